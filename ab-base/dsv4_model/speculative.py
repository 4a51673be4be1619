"""Speculative decoding with the checkpoint's MTP block, graph-safe: drafts, verification and acceptance all on the
device, at fixed shapes, with no host read of how many drafts a row accepted.

One step, for rows [0, n) each at its own position p feeding token t (the runner's `body`, captured per bucket):

1. draft: the MTP block at p-1 reads the main model's final streams at p-1 (kept from the last step) and t, and
   proposes d1; chained k-1 times on its own output streams (as the serving engines run one MTP layer for k
   drafts) it proposes d2..dk. The chained positions' cache writes are speculative: the MTP state rows are
   snapshotted before them and restored after, so only the committed position p-1 stays written.
2. verify: the main model at positions p..p+k, feeding t, d1, ..., dk, in one of two modes (`verify=`):
   - "positions" (the default): one position at a time (`GraphSafeDecoder.hidden`, the plain step's own
     function). A row keeps going while its drafts are accepted; a row that has rejected one (or reached the
     capacity) takes no further state write: each verify position snapshots exactly the state entries a
     one-position step writes and restores them with `torch.where` for the stopped rows (`_Masked`). Every
     accepted token's logits are the plain step's bit for bit, at the price of k+1 weight reads per step.
   - "batched": one forward over the k+1 positions (`GraphSafeDecoder.hidden_positions`): every projection
     (attention q/kv/o, the compressors' and the indexer's, the router, shared and routed experts, the LM head)
     runs once over the n*(k+1) rows; the window ring writes, the compressors' partial blocks, the indexer's
     state and the attention of position j over the cache and positions <= j run position by position at the
     one-position step's shapes. Every row takes all k+1 positions; each layer snapshots what each position
     overwrites (`_Masked`) and, once the accepted counts are known, the positions after them are restored,
     latest first, so a rejected position leaves no trace in any state. Each row's products have the plain
     step's bits only where the products are row-invariant (the same bits at n rows and at n*(k+1)): the
     decoder's kernel table must be built with `rowwise=True` (rowwise.py: on the CPU F.linear and friends are
     not; on CUDA the GEMV kernels are called so they are). Elementwise ops are row-invariant on a GPU; on an
     AVX-512 CPU torch's vectorised transcendentals (exp, sigmoid, silu) give an element of a loop's scalar tail
     other last bits than the vector body, and the tail depends on the tensor's size, so there the batched
     verify's logits can differ from the plain step's in the last bits (the tokens over the tests' 300 steps do
     not; with ATEN_CPU_CAPABILITY=default the state is bit for bit: tests/dsv4_model/test_speculative.py).
3. accept: greedy rows accept the longest prefix of drafts equal to the main model's argmax and then emit the
   argmax; sampling rows use the standard rejection rule (accept d with probability min(1, p(d)/q(d)), else
   emit a sample of norm(max(p - q, 0)); a bonus sample of p after k acceptances), drawing from a
   `torch.Generator` passed in. p and q are the plain sampler's distributions (penalty, temperature, top-k, top-p).
   Prompt tokens are drafts forced to agree, so a prompt is read k+1 tokens a step.
4. commit: each row's position advances by its own count (accepted + 1), its next token and streams are picked
   by a gather at that count, and the MTP block is written at the newly committed positions with the main
   model's streams (masked by the count).

Outputs per row in device buffers: `out` [B, k+1] (the emitted tokens, valid up to `count`) and `count` [B],
read by the host once per step, outside the graph. The MTP block's k-1 chained drafts run position by position
(each reads the last one's streams); the k committed positions are k one-position forwards of the block in the
per-position mode, one forward over the k positions in the batched mode (`_mtp_commit`).
"""
from __future__ import annotations

import torch

from dsv4_kernels.sampling.reference import row_cumsum

from .decode import GraphSafeDecoder, LayerState, block_positions, block_step
from .runner import Runner
from .sampler import Sampler

# shapes: n bucket rows, B decoder rows, k drafts, V vocab, hc streams, d dim, W window


def filtered_probs(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """scaled [n,V] (penalised logits / temperature) -> the plain sampler's distribution [n,V]: the same keep set
    as its pick (`sample_pick_ref`: top-k, then the smallest prefix reaching top_p), normalised."""
    srt, order = scaled.sort(dim=-1, descending=True, stable=True)
    V = srt.shape[-1]
    rank = torch.arange(V, device=srt.device)[None, :]
    keep = rank < torch.where(top_k > 0, top_k, V)[:, None]
    e = torch.exp(srt - srt[:, :1]).masked_fill(~keep, 0.0)
    c = row_cumsum(e)
    keep = keep & ((c - e < top_p[:, None] * c[:, -1:]) | (top_p[:, None] >= 1))
    e = e.masked_fill(~keep, 0.0)
    return torch.zeros_like(e).scatter_(1, order, e / e.sum(-1, keepdim=True))


def draw(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One sample per row of probs [n,V] (unnormalised is fine): the exponential race argmax p / Exp(1), at a fixed
    shape and with no host read (torch.multinomial checks its input on the host)."""
    expo = torch.empty_like(probs).exponential_(generator=gen).clamp_(min=1e-30)    # 0 would give 0/0 = NaN
    return (probs / expo).argmax(-1)


class _Masked:
    """The state entries one graph-safe position writes, for rows [0, n) of the given (attention, layer state)
    pairs: the window slot at the position (`attention_step`), each compressor's whole partial-block ring (small:
    m or 2m slots; the overlap shift rewrites all of it) and the compressed entry of its open block
    (`compressor_fold`). `restore(keep)` puts the saved values back in the rows where keep [n] is False, so a
    stopped row leaves the position bit for bit as it entered it (tests/dsv4_model/test_speculative.py checks
    every state buffer, so a write added to the step without a snapshot here fails there)."""

    def __init__(self, pairs, ix, n: int):
        self.saved = []
        for attn, st in pairs:
            window = st.kv_window[:n]
            at = (ix.rows, ix.window(window.shape[1])[0])
            self.saved.append((window, at, window[at]))
            comps = [(attn.compressor, st.comp), (attn.indexer.compressor if attn.indexer is not None else None, st.icomp)]
            for comp, cs in comps:
                if comp is None:
                    continue
                for buf in (cs.kv_state[:n], cs.gate_state[:n]):
                    self.saved.append((buf, None, buf.clone()))
                entries = cs.entries[:n]
                at = (ix.rows, ix.blocks(comp.m, comp.overlap, entries.shape[1])[1])
                self.saved.append((entries, at, entries[at]))

    def restore(self, keep: torch.Tensor) -> None:
        for buf, at, old in self.saved:
            k = keep.view(-1, *[1] * (old.dim() - 1))
            if at is None:
                buf.copy_(torch.where(k, buf, old))
            else:
                buf.index_put_(at, torch.where(k, buf[at], old))


class _PositionWrites:
    """What each position of a multi-position forward (`block_positions`) overwrites, layer by layer (`_Masked`), so
    that the positions a row did not commit can be put back. The first `committed` positions are always kept (no
    snapshot); position j after them is kept where the row's accepted count [n] is at least j - committed + 1.
    `before` is the forward's hook; `undo(accepted)` restores the rest."""

    def __init__(self, n: int, positions: int, committed: int):
        self.n, self.committed = n, committed
        self.saved: list[list[_Masked]] = [[] for _ in range(positions)]

    def before(self, attn, st, j: int, ix) -> None:
        if j >= self.committed:
            self.saved[j].append(_Masked([(attn, st)], ix, self.n))

    def undo(self, accepted: torch.Tensor) -> None:
        # latest first: where two positions wrote one entry (a window wrap, a block both close), the earlier
        # snapshot, restored last, is what a row that kept neither ends with
        for j in range(len(self.saved) - 1, self.committed - 1, -1):
            for snap in self.saved[j]:
                snap.restore(accepted >= j - self.committed + 1)


VERIFY = ("positions", "batched")


class SpeculativeRunner(Runner):
    """The runner (per-bucket CUDA graphs, prompt feeding, sampler settings) over the speculative step: `body(n)`
    is what a bucket captures, `step(n)` returns (out [n, k+1], count [n]) as device tensors.

    `verify`: "positions" (the k+1 positions one at a time through the plain step's function, each under masked
    state: k+1 reads of the weights) or "batched" (one forward over the k+1 positions, `_verify_batched`: one read;
    needs the model's kernel table built with `rowwise=True`, so that each row's products have the plain step's bits).

    `draft`: what proposes the k drafts, `draft(runner, n) -> (tokens [n,k], their distributions q [n,k,V])`;
    None is the model's MTP block (`propose`). `generator`: the device generator of the sampling rows' draws (the
    draft samples, acceptance uniforms, residual and bonus samples); None is the device's default generator."""

    def __init__(self, decoder: GraphSafeDecoder, sampler: Sampler, k: int = 2, generator: torch.Generator | None = None,
                 draft=None, verify: str = "positions", **kw):
        super().__init__(decoder, sampler, **kw)
        model = decoder.model
        if k < 1:
            raise ValueError(f"speculative decoding: expected k >= 1 drafts per step, found {k}")
        if verify not in VERIFY:
            raise ValueError(f"speculative decoding: verify={verify!r}, expected one of {', '.join(VERIFY)}")
        if verify == "batched" and not (model.kernels is not None and model.kernels.rowwise):
            raise ValueError("speculative decoding: verify='batched' needs the model's products row-invariant (each "
                             "row's bits independent of the row count) to equal the plain step; found "
                             f"{'no kernel table' if model.kernels is None else 'a table without them'} on the model: "
                             "build the decoder with GraphSafeDecoder(model, batch, kernels=..., rowwise=True)")
        self.verify = verify
        if draft is None and not len(model.mtp):
            raise ValueError("speculative decoding: the model has no MTP block (its checkpoint holds no mtp.* tensors, "
                             "or it was loaded with mtp=False); pass a draft")
        self.k, self.gen, self.draft = k, generator, draft
        self.generators = (generator,) if generator is not None else ()
        B, dev, dtype, args = decoder.batch, decoder.tokens.device, model.dtype, model.args
        self.mtp_state = LayerState(model.mtp[0].attn, B, decoder.capacity, dtype).to(dev) if len(model.mtp) else None
        self.mtp_bufs = list(self.mtp_state.buffers()) if self.mtp_state is not None else []   # what a chain snapshots
        self.hidden = torch.zeros(B, 1, args.hc_mult, args.dim, dtype=dtype, device=dev)   # main streams at pos-1
        self.out = torch.zeros(B, k + 1, dtype=torch.long, device=dev)
        self.count = torch.zeros(B, dtype=torch.long, device=dev)

    # -- host side, outside any graph -------------------------------------------------------------------------
    def start(self, row: int, prompt: list[int], **sampling) -> None:
        super().start(row, prompt, **sampling)
        if self.mtp_state is not None:
            self.mtp_state.reset_rows(slice(row, row + 1))
        self.hidden[row] = 0
        self.count[row] = 0

    def state(self) -> dict[str, torch.Tensor]:
        s = super().state()
        if self.mtp_state is not None:
            s.update({f"mtp.{k}": v for k, v in self.mtp_state.named_buffers()})
        s.update(hidden=self.hidden, count=self.count)
        return s

    def step(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        super().step(n)
        return self.out[:n], self.count[:n]

    # -- the captured body ------------------------------------------------------------------------------------
    def _mtp(self, H: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor, n: int, keep: torch.Tensor | None):
        """The MTP block at positions pos [n] reading streams H [n,1,hc,d] and tokens tok [n] -> (fp32 logits
        [n,V], its streams [n,1,hc,d]); its cache rows write only where keep [n] (all when None)."""
        dec, mtp = self.dec, self.dec.model.mtp[0]
        ix = dec.index(pos.clamp(min=0, max=dec.capacity - 1), n)
        saved = None if keep is None else _Masked([(mtp.attn, self.mtp_state)], ix, n)
        ids = tok.view(n, 1)
        X = block_step(mtp, self.mtp_state, mtp.mix(H, ids), ids, ix, n, dec.gather)
        if saved is not None:
            saved.restore(keep)
        return mtp.logits(X)[:, -1], X

    def _mtp_commit(self, H: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor, n_acc: torch.Tensor, n: int) -> None:
        """The MTP block written at positions pos..pos+k-1 (the main streams H [n,k,hc,d] and the tokens tok [n,k]
        after them) in one forward, its projections once over the n*k rows; each position's writes undone, latest
        first, where the row committed fewer (j >= n_acc): the batched verify's counterpart of k `_mtp` calls."""
        dec, mtp, k = self.dec, self.dec.model.mtp[0], self.k
        ixs = [dec.index((pos + j).clamp(min=0, max=dec.capacity - 1), n) for j in range(k)]
        writes = _PositionWrites(n, k, committed=0)
        block_positions(mtp, self.mtp_state, mtp.mix(H, tok), tok, ixs, n, dec.gather, writes.before)
        writes.undo(n_acc)

    def _dist(self, logits: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 logits [n,V] -> (the plain sampler's distribution [n,V], its greedy token [n])."""
        s = self.sampler
        scaled, greedy = s.penalize_scale(logits, s.ring[:n], s.penalty[:n], s.temperature[:n])
        return filtered_probs(scaled, s.top_k[:n], s.top_p[:n]), greedy

    def propose(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The MTP block's k drafts [n,k] and the distributions they were drawn from [n,k,V]. Its position p-1
        (the main streams kept from the last step and the token now fed) is committed; the chained positions
        after it are undone by restoring the block's state rows from a snapshot."""
        pos, tok = self.dec.pos[:n], self.dec.tokens[:n]
        sampled = self.sampler.temperature[:n] > 0
        logits, G = self._mtp(self.hidden[:n], tok, pos - 1, n, keep=pos >= 1)     # no position -1 at the start
        bufs = self.mtp_bufs if self.k > 1 else []
        snap = [buf[:n].clone() for buf in bufs]
        drafts, qs = [], []
        for i in range(self.k):
            if i:
                logits, G = self._mtp(G, d, pos - 1 + i, n, keep=None)
            q, greedy = self._dist(logits, n)
            d = torch.where(sampled, draw(q, self.gen), greedy)
            drafts.append(d)
            qs.append(q)
        for buf, old in zip(bufs, snap):
            buf[:n].copy_(old)
        return torch.stack(drafts, 1), torch.stack(qs, 1)

    def _observe(self, tok: torch.Tensor, keep: torch.Tensor, n: int) -> None:
        """Sampler.observe for the rows where keep [n]: a rejected draft never enters the penalty ring."""
        ring, at = self.sampler.ring[:n], self.sampler.ring_pos[:n]
        slot = (at % ring.shape[1])[:, None]
        ring.scatter_(1, slot, torch.where(keep[:, None], tok[:, None], ring.gather(1, slot)))
        at += keep.long()

    def _verify_batched(self, feed: torch.Tensor, pos: torch.Tensor, n: int):
        """The main model over positions pos..pos+k of each row in one forward, feeding feed [n,k+1] (t, d1..dk):
        every projection, the MoE and the LM head once over the n*(k+1) rows; the state writes and attention
        position by position at the one-position step's shapes (`GraphSafeDecoder.hidden_positions`). Every row
        takes all k+1 positions; what each position's writes overwrite is snapshotted first (`_Masked`, per layer),
        so `undo(n_acc)` can put back the positions after a row's accepted ones. -> (streams [n,k+1,hc,d], fp32
        logits [n,k+1,V], undo)."""
        writes = _PositionWrites(n, self.k + 1, committed=1)     # position p (the fed token) is always committed
        H = self.dec.hidden_positions(feed, pos, writes.before)
        return H, self.dec.model.logits(H), writes.undo

    @torch.inference_mode()
    def body(self, n: int) -> torch.Tensor:
        """One speculative step for rows [0, n): draft, verify, accept, commit. Writes out[:n], count[:n]."""
        dec, model, k, cap = self.dec, self.dec.model, self.k, self.dec.capacity
        pos, tok = dec.pos[:n], dec.tokens[:n]
        at = pos[:, None] + 1 + torch.arange(k + 1, device=pos.device)             # [n,k+1] emitted tokens' positions
        forced = at < self.prompt_len[:n, None]                                      # prompt tokens there
        ptok = self.prompt[:n].gather(1, at.clamp(max=cap - 1))
        drafts, q = self.propose(n) if self.draft is None else self.draft(self, n)   # [n,k], [n,k,V]
        drafts = torch.where(forced[:, :k], ptok[:, :k], drafts)
        sampled = self.sampler.temperature[:n] > 0
        u = torch.rand(n, k, generator=self.gen, device=pos.device)
        pairs = [(blk.attn, st) for blk, st in zip(model.layers, dec.layers)]
        batched = self.verify == "batched"
        if batched:                                     # all k+1 positions first, the rejected ones undone below
            H, logits, undo = self._verify_batched(torch.cat([tok[:, None], drafts], 1), pos, n)
        alive = torch.ones_like(forced[:, 0])
        c, streams, emitted, accepted = tok, [], [], []
        for i in range(k + 1):                          # verify position p+i, feeding c (t, then the drafts)
            self._observe(c, alive, n)
            if batched:
                lg = logits[:, i]
            else:
                saved = _Masked(pairs, dec.index((pos + i).clamp(max=cap - 1), n), n)
                X = dec.hidden(c, pos + i)                                           # [n,1,hc,d]
                saved.restore(alive)
                streams.append(X)
                lg = model.logits(X)[:, -1]
            p, greedy = self._dist(lg, n)
            if i < k:                                   # the rejection rule; greedy rows: draft == argmax
                d = drafts[:, i]
                pd, qd = p.gather(1, d[:, None])[:, 0], q[:, i].gather(1, d[:, None])[:, 0]
                resid = (p - q[:, i]).clamp(min=0)
                resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, p)      # p == q: never rejected
                ok = torch.where(sampled, u[:, i] * qd < pd, d == greedy)
                y = torch.where(sampled, torch.where(ok, d, draw(resid, self.gen)), greedy)
                alive = alive & (ok | forced[:, i]) & (pos + i + 1 < cap)
                accepted.append(alive)
                c = d
            else:                                       # all k accepted: the bonus token
                y = torch.where(sampled, draw(p, self.gen), greedy)
            emitted.append(torch.where(forced[:, i], ptok[:, i], y))
        n_acc = torch.stack(accepted, 1).sum(1)                                      # [n] accepted drafts
        out = torch.stack(emitted, 1)                                                # [n,k+1]
        if batched:
            undo(n_acc)
        else:
            H = torch.cat(streams, 1)                                                # [n,k+1,hc,d]
        if self.mtp_state is not None and batched:      # the MTP block at the committed positions p..p+n_acc-1
            self._mtp_commit(H[:, :k], out[:, :k], pos, n_acc, n)
        elif self.mtp_state is not None:
            for i in range(k):
                self._mtp(H[:, i:i + 1], out[:, i], pos + i, n, keep=i < n_acc)
        self.hidden[:n] = H.gather(1, n_acc.view(n, 1, 1, 1).expand(-1, 1, *H.shape[2:]))
        self.out[:n] = out
        self.count[:n] = n_acc + 1
        tok.copy_(out.gather(1, n_acc[:, None])[:, 0])
        pos += n_acc + 1
        return self.out[:n]

"""The official release's numerics, rederived from DeepSeek's `inference/` code, as an oracle of the model's decode.

Source: DeepSeek-V4 `inference/model.py`, `inference/kernel.py`, `inference/convert.py`, `inference/generate.py`, as
held verbatim by the public fork Mockingjay1316/deepseek-v4-flash-spark at commit 0825add (later commits there replace
the MoE). Line numbers below are of those files at that commit. Written from them, not from `dsv4_model` (it imports
none of the model's code; the checkpoint readers and fake quants are `oracle.py`'s, the spec oracle's own).

A token-by-token decode, as `generate.py` runs one (its first call is a prefill of the prompt; scoring one token at a
time from position 0 takes the `start_pos == 0` branches with one token, which give the same numbers). Every tensor
that the official code holds in bf16 (`generate.py:90` `torch.set_default_dtype(torch.bfloat16)`, `model.py:19`)
is rounded to bf16 where it is produced; fp32 where the code declares fp32. The rounding points:

- projections (`model.py:108-120` `linear`): an FP8/FP4 weight takes `act_quant(x, 128, "ue8m0")` first (1x128
  blocks, power-of-two scale, `kernel.py:36-101`), fp32 accumulation (`kernel.py:203-273`), the output rounded to
  bf16 (`kernel.py:270`: `c` in the default dtype); a bf16 weight `F.linear` in bf16 (fp32 accumulation, one
  rounding). fp32 declarations: the compressor's wkv/wgate on `x.float()` (`model.py:297-298, 320-324`), the router
  (`model.py:565`), the LM head on `x.float()` (`model.py:714, 717`), the mHC mixes (`model.py:666-682, 729-736`);
  wo_a is dequantised to bf16 at conversion (`convert.py:137-141`) and its einsum runs in bf16 (`model.py:541`).
- RMSNorm computes in fp32 and rounds once (`model.py:191-196`).
- (1) the per-head q norm in bf16 arithmetic, every op rounded (`model.py:498`:
  `q *= torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps)` on a bf16 q).
- RoPE computes in fp32 and writes back into the bf16 tensor (`model.py:232-244`); the table in fp32
  (`model.py:199-229`).
- (2) sparse attention (`kernel.py:276-368`): the keys in the order of the index list (the window oldest first,
  `model.py:254-265`, padded with -1 to W entries; then the compressed ones, `model.py:268-276` or the indexer's
  top-k), blocks of 64 (`kernel.py:290`), per block scores in fp32 times the scale (`kernel.py:328-330`), running
  max, P = exp(s - max) in fp32, the row sum from the unrounded P (`kernel.py:337-339`), P rounded to bf16 before
  P . V (`kernel.py:340-343`), the sink's exp(sink - max) added after the last block (`kernel.py:345-346`), the
  output divided and stored in bf16 (`kernel.py:347-350`).
- (3) the attention output rounded to bf16 by the kernel and again after the inverse RoPE (`model.py:528-534`).
- (4) the indexer's score chain in bf16 (`model.py:418-421`): the head weights `weights_proj(x) * scale` (bf16
  product), the dots q . k rounded to bf16, ReLU, the weighted products rounded, the sum over heads rounded once.
  Its q and keys: RoPE, Hadamard (`model.py:247-251`, fp32 butterflies scaled by 1/sqrt(n), rounded to bf16), the
  FP4 simulation (`kernel.py:128-200`). Ties in its top-k (`model.py:427`, CUDA topk: order among equal scores
  unspecified): this oracle, like every path of the model, takes ties to the lower block index.
- the KV FP8 simulation on the non-rope dims, blocks of 64 (`model.py:506`, `model.py:372`).
- the compressor (`model.py:316-377`): fp32 state, pooled in fp32, rounded to bf16 before its norm.
- MoE (`model.py:564-645`): router in fp32, expert gate/up outputs bf16 then fp32 SwiGLU (clamp for routed experts
  only, `model.py:624-628`), the routing weight before w2 in fp32, rounded to bf16 before w2; the expert outputs
  (bf16) summed into an fp32 accumulator in expert order, the shared expert last, the sum rounded to bf16.
- mHC (`model.py:674-687`, `kernel.py:371-438`): fp32, the stream mix rounded to bf16.

bf16 elementwise ops are emulated as CUDA's kernels run them (the op in fp32, one rounding), not as the CPU's bf16
kernels do (some of which, rsqrt among them, round differently).

`acc=torch.float64` gives the twin: every product, sum and fp32 declaration in fp64, before the same bf16
roundings. Its distance from the oracle is the noise floor of two faithful implementations (accumulation order).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from oracle import fp4_quant, fp8_quant, read_config, weight

BLOCK = 64


class OfficialOracle:
    def __init__(self, root: Path, acc: torch.dtype = torch.float32):
        from safetensors.torch import load_file
        self.acc = acc
        self.c = read_config(Path(root) / "config.json")
        self.sd = {}
        for f in sorted(Path(root).glob("*.safetensors")):
            self.sd.update(load_file(str(f)))
        self._w: dict[str, tuple[torch.Tensor, str]] = {}
        self.ties = 0               # top-k picks decided by the tie rule (an equal score on both sides of the cut)

    # -- numbers ------------------------------------------------------------------------------------------
    def bf(self, x: torch.Tensor) -> torch.Tensor:
        """Round to bf16, held in the accumulation dtype."""
        return x.to(torch.bfloat16).to(self.acc)

    def t(self, name: str) -> torch.Tensor:
        return self.sd[name].to(self.acc)

    def lin(self, x: torch.Tensor, base: str, out_bf16: bool = True) -> torch.Tensor:
        if base not in self._w:
            w, fmt = weight(self.sd, base)
            self._w[base] = (w.to(self.acc), fmt)
        w, fmt = self._w[base]
        if fmt != "plain":
            k = x.shape[-1]
            x = fp8_quant(x.float(), 128 if k % 128 == 0 else k).to(self.acc)
        if out_bf16 and self.acc == torch.float32:
            # a bf16 GEMM (fp32 accumulation, one rounding), as `F.linear` on the bf16 tensors (the dequantised FP8
            # and the quantised activation are exact in bf16); one row, as the decode's [1, K]
            return F.linear(x[None].bfloat16(), w.bfloat16())[0].to(self.acc)
        y = F.linear(x[None], w)[0]
        return self.bf(y) if out_bf16 else y

    def rms(self, x: torch.Tensor, w: str) -> torch.Tensor:
        y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.c["norm_eps"])
        return self.bf(self.t(w) * y)

    def head_rms(self, q: torch.Tensor) -> torch.Tensor:
        bf = self.bf
        ms = bf(bf(q * q).mean(-1, keepdim=True))
        return bf(q * bf(torch.rsqrt(bf(ms + self.c["norm_eps"]))))

    def table(self, compressed: bool) -> torch.Tensor:
        """cos, sin [len, rd/2] as `precompute_freqs_cis` (fp32)."""
        import math
        c = self.c
        rd = c["rope_head_dim"]
        base = c["compress_rope_theta"] if compressed else c["rope_theta"]
        f = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
        orig = c["original_seq_len"] if compressed else 0
        if orig and orig > 0:
            def corr(rot):
                return rd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
            lo, hi = max(math.floor(corr(c["beta_fast"])), 0), min(math.ceil(corr(c["beta_slow"])), rd - 1)
            if lo == hi:
                hi += 0.001
            smooth = 1 - ((torch.arange(rd // 2, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
            f = f / c["rope_factor"] * (1 - smooth) + f * smooth
        z = torch.polar(torch.ones(self.cap, rd // 2), torch.outer(torch.arange(self.cap, dtype=torch.float32), f))
        return torch.stack([z.real, z.imag], -1).to(self.acc)

    def rope(self, x: torch.Tensor, cs: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """x [.., rd] bf16 values, cs [rd/2, 2] -> bf16 values."""
        a, b = x[..., 0::2], x[..., 1::2]
        cos, sin = cs[..., 0], -cs[..., 1] if inverse else cs[..., 1]
        return self.bf(torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2))

    def rope_tail(self, x, cs, inverse=False):
        rd = self.c["rope_head_dim"]
        return torch.cat([x[..., :-rd], self.rope(x[..., -rd:], cs, inverse)], -1)

    def hadamard(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        y = x.clone()
        h = 1
        while h < n:
            y = y.unflatten(-1, (n // (2 * h), 2, h))
            y = torch.stack([y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]], -2).flatten(-3)
            h *= 2
        return self.bf(y * n ** -0.5)

    def fp4(self, x):
        return fp4_quant(x.float()).to(self.acc)

    def kv_fp8(self, x):
        rd = self.c["rope_head_dim"]
        return torch.cat([fp8_quant(x[..., :-rd].float(), 64).to(self.acc), x[..., -rd:]], -1)

    # -- compressor ---------------------------------------------------------------------------------------
    def compress(self, st: dict, x: torch.Tensor, pos: int, p: str, ratio: int, width: int, cs: torch.Tensor, post):
        kv = self.lin(x, p + ".wkv", out_bf16=False)
        sc = self.lin(x, p + ".wgate", out_bf16=False) + self.t(p + ".ape")[pos % ratio]
        ov = ratio == 4
        slot = (ratio if ov else 0) + pos % ratio
        st["kv"][slot], st["sc"][slot] = kv, sc
        if (pos + 1) % ratio:
            return
        if ov:
            kvs = torch.cat([st["kv"][:ratio, :width], st["kv"][ratio:, width:]], 0)
            scs = torch.cat([st["sc"][:ratio, :width], st["sc"][ratio:, width:]], 0)
        else:
            kvs, scs = st["kv"], st["sc"]
        pooled = (kvs * scs.softmax(0)).sum(0)
        e = self.rms(self.bf(pooled), p + ".norm.weight")
        e = self.rope_tail(e, cs[pos + 1 - ratio])
        st["entries"].append(post(e))
        if ov:
            st["kv"][:ratio], st["sc"][:ratio] = st["kv"][ratio:].clone(), st["sc"][ratio:].clone()

    def new_comp(self, ratio: int, width: int) -> dict:
        coff = 2 if ratio == 4 else 1
        return {"kv": torch.zeros(coff * ratio, coff * width, dtype=self.acc),
                "sc": torch.full((coff * ratio, coff * width), float("-inf"), dtype=self.acc), "entries": []}

    # -- attention ----------------------------------------------------------------------------------------
    def sparse_attn(self, q: torch.Tensor, keys: list, sink: torch.Tensor) -> torch.Tensor:
        """q [H, D]; keys: [D] tensors or None (a -1 index) in the index list's order -> o [H, D] bf16 values."""
        H, D = q.shape
        scale = D ** -0.5
        m = torch.full((H,), float("-inf"), dtype=self.acc)
        l = torch.zeros(H, dtype=self.acc)
        o = torch.zeros(H, D, dtype=self.acc)
        for j in range(0, len(keys), BLOCK):
            blk = keys[j:j + BLOCK]
            valid = torch.tensor([k is not None for k in blk])
            K = torch.stack([k if k is not None else torch.zeros(D, dtype=self.acc) for k in blk])
            s = (q @ K.T).masked_fill(~valid, float("-inf")) * scale
            m_new = torch.maximum(m, s.max(-1).values)
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[:, None])
            l = l * alpha + p.sum(-1)
            o = o * alpha[:, None] + self.bf(p) @ K
            m = m_new
        l = l + torch.exp(sink - m)
        return self.bf(o / l[:, None])

    def index_score(self, q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """q [Hi, Di], k [n, Di], w [Hi] (bf16 values) -> [n]: the bf16 chain of `model.py:420-421`."""
        return self.bf((self.bf(torch.relu(self.bf(q @ k.T)) * w[:, None])).sum(0))

    def indexer(self, x, qr, pos, L, cs):
        c, p = self.c, f"layers.{L}.attn.indexer"
        Hi, Di = c["index_n_heads"], c["index_head_dim"]
        st = self.state[L]["icomp"]
        q = self.lin(qr, p + ".wq_b").view(Hi, Di)
        q = self.fp4(self.hadamard(self.rope_tail(q, cs[pos])))
        self.compress(st, x, pos, p + ".compressor", 4, Di, cs, lambda e: self.fp4(self.hadamard(e)))
        n = (pos + 1) // 4
        if n == 0:
            return []
        w = self.bf(self.lin(x, p + ".weights_proj") * (Di ** -0.5 * Hi ** -0.5))
        k = torch.stack(st["entries"][:n])
        score = self.index_score(q, k, w)
        kk = min(c["index_topk"], n)
        order = score.float().sort(descending=True, stable=True)
        if kk < n and order.values[kk - 1] == order.values[kk]:
            self.ties += 1
        return order.indices[:kk].tolist()

    def attention(self, x, pos, L):
        c, p = self.c, f"layers.{L}.attn"
        H, D, W = c["n_heads"], c["head_dim"], c["window_size"]
        ratio = c["compress_ratios"][L]
        cs = self.tables[ratio > 0]
        st = self.state[L]
        qr = self.rms(self.lin(x, p + ".wq_a"), p + ".q_norm.weight")
        q = self.rope_tail(self.head_rms(self.lin(qr, p + ".wq_b").view(H, D)), cs[pos])
        kv = self.kv_fp8(self.rope_tail(self.rms(self.lin(x, p + ".wkv"), p + ".kv_norm.weight"), cs[pos]))
        picks = self.indexer(x, qr, pos, L, cs) if ratio == 4 else None
        st["window"][pos % W] = kv
        if ratio:
            self.compress(st["comp"], x, pos, p + ".compressor", ratio, D, cs, self.kv_fp8)
        # the index list: the window oldest first, -1 (None) pads until it fills; then the compressed entries
        if pos >= W - 1:
            keys = [st["window"][(pos + 1 + i) % W] for i in range(W)]
        else:
            keys = [st["window"][i] for i in range(pos + 1)] + [None] * (W - pos - 1)
        ent = st["comp"]["entries"] if ratio else []
        keys += [ent[i] for i in (picks if picks is not None else range((pos + 1) // ratio if ratio else 0))]
        o = self.sparse_attn(q, keys, self.t(p + ".attn_sink"))
        o = self.rope_tail(o, cs[pos], inverse=True)
        G, R = c["o_groups"], c["o_lora_rank"]
        wa = self.bf(weight(self.sd, p + ".wo_a")[0].to(self.acc)).view(G, R, -1)
        o = self.bf(torch.einsum("gi,gri->gr", o.view(G, -1), wa)).flatten()
        return self.lin(o, p + ".wo_b")

    # -- MoE ----------------------------------------------------------------------------------------------
    def expert(self, x, base, limit, wt=None):
        g, u = self.lin(x, base + ".w1"), self.lin(x, base + ".w3")
        if limit:
            g, u = g.clamp(max=limit), u.clamp(-limit, limit)
        h = F.silu(g) * u
        if wt is not None:
            h = wt * h
        return self.lin(self.bf(h), base + ".w2")

    def moe(self, x, tok, L):
        c, p = self.c, f"layers.{L}.ffn"
        scores = F.softplus(F.linear(x[None], self.t(p + ".gate.weight"))[0]).sqrt()
        if L < c["n_hash_layers"]:
            idx = self.sd[p + ".gate.tid2eid"].long()[tok]
        else:
            idx = (scores + self.t(p + ".gate.bias")).topk(c["n_activated_experts"]).indices
        wts = scores[idx]
        wts = wts / wts.sum() * c["route_scale"]
        y = torch.zeros_like(x)
        for e in sorted(range(len(idx)), key=lambda i: int(idx[i])):       # expert order, as the dispatch loop
            y = y + self.expert(x, f"{p}.experts.{int(idx[e])}", c["swiglu_limit"], wts[e])
        y = y + self.expert(x, p + ".shared_experts", None)                  # official: the shared expert unclamped
        return self.bf(y)

    # -- mHC ----------------------------------------------------------------------------------------------
    def hc_pre(self, X, p):
        c = self.c
        hc, eps = c["hc_mult"], c["hc_eps"]
        fn, scale, base = self.t(p + "_fn"), self.t(p + "_scale"), self.t(p + "_base")
        f = X.flatten()
        mix = F.linear(f[None], fn)[0] * torch.rsqrt(f.square().mean(-1, keepdim=True) + c["norm_eps"])
        pre = torch.sigmoid(mix[:hc] * scale[0] + base[:hc]) + eps
        post = 2 * torch.sigmoid(mix[hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = mix[2 * hc:].view(hc, hc) * scale[2] + base[2 * hc:].view(hc, hc)
        comb = torch.softmax(comb, -1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        return self.bf((pre[:, None] * X).sum(0)), post, comb

    def hc_post(self, y, X, post, comb):
        return self.bf(post[:, None] * y[None, :] + (comb[:, :, None] * X[:, None, :]).sum(0))

    # -- the decode ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, ids) -> torch.Tensor:
        """Teacher-forced fp32 logits [T, vocab] of decoding `ids` token by token from position 0."""
        c = self.c
        ids = torch.as_tensor(ids, dtype=torch.long).view(-1)
        self.cap = ids.numel() + 1
        self.tables = {False: self.table(False), True: self.table(True)}
        self.state = []
        for L in range(c["n_layers"]):
            r = c["compress_ratios"][L]
            self.state.append({"window": torch.zeros(c["window_size"], c["head_dim"], dtype=self.acc),
                               "comp": self.new_comp(r, c["head_dim"]) if r else None,
                               "icomp": self.new_comp(4, c["index_head_dim"]) if r == 4 else None})
        emb = self.bf(self.t("embed.weight"))
        out = []
        for pos, tok in enumerate(ids.tolist()):
            X = emb[tok].unsqueeze(0).repeat(c["hc_mult"], 1)                         # [hc, d]
            for L in range(c["n_layers"]):
                p = f"layers.{L}"
                x, post, comb = self.hc_pre(X, p + ".hc_attn")
                X = self.hc_post(self.attention(self.rms(x, p + ".attn_norm.weight"), pos, L), X, post, comb)
                x, post, comb = self.hc_pre(X, p + ".hc_ffn")
                X = self.hc_post(self.moe(self.rms(x, p + ".ffn_norm.weight"), tok, L), X, post, comb)
            f = X.flatten()
            mix = F.linear(f[None], self.t("hc_head_fn"))[0] * torch.rsqrt(f.square().mean(-1, keepdim=True) + c["norm_eps"])
            pre = torch.sigmoid(mix * self.t("hc_head_scale") + self.t("hc_head_base")) + c["hc_eps"]
            h = self.rms(self.bf((pre[:, None] * X).sum(0)), "norm.weight")
            out.append(F.linear(h[None], self.t("head.weight"))[0].float())
        return torch.stack(out)

"""Speculative decoding with the MTP block (mtp.py, speculative.py), on the CPU.

Greedy speculative decoding emits exactly plain greedy decoding's tokens (MTP draft from the checkpoint, batch 1
and a staggered batch of 4, >= 300 tokens; a draft forced to agree, accepting every draft; a draft right about
half the time); a stopped row's state leaves a verify position bit for bit as it entered it; the speculative
sampler's output distribution is the plain sampler's (chi-square against the exact distribution).
"""
import math
import os

import pytest
import torch

import dsv4_model
from dsv4_model.decode import GraphSafeDecoder, LayerState
from dsv4_model.runner import Runner
from dsv4_model.sampler import Sampler
from dsv4_model.speculative import SpeculativeRunner, _Masked, filtered_probs

STEPS = 300
PROMPTS = [[0], [0, 19], [0, 22, 42], [0, 25, 43, 7]]     # staggered: every row at its own position


@pytest.fixture(scope="module")
def rowwise():
    """The same fp32 model loaded again, with the row-invariant kernel table on it (decode_kernels(rowwise=True)):
    what the batched verify needs. A model of its own, so the other tests' model keeps no table."""
    from dsv4_model.precision import COMPONENTS
    m = dsv4_model.load("tiny", max_seq_len=512, precision=[f"{c}=plain" for c in COMPONENTS], dtype=torch.float32)
    m.set_simulation(False)
    GraphSafeDecoder(m, 1, kernels=False, rowwise=True)       # puts the table on the model
    assert m.kernels.rowwise
    return m


@pytest.fixture(scope="module")
def exact():
    """fp32, weights dequantised at load, no activation simulation (as test_graphsafe's structural checks): the
    MTP block is still the one loaded from the tiny checkpoint's mtp.0.* tensors."""
    from dsv4_model.precision import COMPONENTS
    m = dsv4_model.load("tiny", max_seq_len=512, precision=[f"{c}=plain" for c in COMPONENTS], dtype=torch.float32)
    m.set_simulation(False)
    assert len(m.mtp) == 1
    return m


def _runner(model, B, cls=Runner, **kw):
    """A runner of B rows over a decoder that keeps the model's kernel table (eager unless graphs=True)."""
    kw.setdefault("graphs", False)
    dev = model.embed.weight.device
    return cls(GraphSafeDecoder(model, B), Sampler(B, model.args.vocab_size, device=dev), buckets=(B,),
               log=lambda s: None, **kw)


BATCHED = dict(verify="batched")


def _plain(model, prompts, n, graphs=False, **sampling):
    """Plain greedy decoding: each row's stream (prompt, then what it generates), n tokens past the first."""
    r = _runner(model, len(prompts), graphs=graphs)
    for i, p in enumerate(prompts):
        r.start(i, p, **sampling)
    seqs = [p[:1] for p in prompts]
    for _ in range(n):
        r.step(len(prompts))
        for i, t in enumerate(r.dec.tokens.tolist()):
            seqs[i] = seqs[i] + [t]
    return seqs


def _speculative(model, prompts, n, k=2, sampling=None, runner=None, full=False, **kw):
    """The same streams from the speculative step; also every step's counts [steps, B]."""
    B = len(prompts)
    r = runner or _runner(model, B, SpeculativeRunner, k=k, **kw)
    for i, p in enumerate(prompts):
        r.start(i, p, **(sampling or {}))
    seqs, counts = [p[:1] for p in prompts], []
    while min(map(len, seqs)) <= n:
        out, count = r.step(B)
        counts.append(count.tolist())
        for i, (o, c) in enumerate(zip(out.tolist(), counts[-1])):
            seqs[i] = seqs[i] + o[:c]
    return (seqs if full else [s[: n + 1] for s in seqs]), counts


def _oracle(streams, k, right=lambda pos, i: True):
    """A draft that reads the plain decode's own tokens (the main model's prediction), right where right(pos, i)
    and off by one token id elsewhere; q is the draft's one-hot distribution."""
    table = torch.tensor([s + [0] * k for s in streams])

    def draft(runner, n):
        V = runner.dec.model.args.vocab_size
        pos = runner.dec.pos[:n]
        at = pos[:, None] + 1 + torch.arange(k)
        d = table[:n].gather(1, at.clamp(max=table.shape[1] - 1))
        wrong = torch.tensor([[not right(int(p), i) for i in range(k)] for p in pos])   # host: test-only draft
        d = torch.where(wrong, (d + 1) % V, d)
        return d, torch.nn.functional.one_hot(d, V).float()
    return draft


@pytest.fixture(scope="module", params=["positions", "batched"])
def verify(request):
    """Each verify over its model: the per-position one over `exact`, the batched one (one forward over the k+1
    positions) over `rowwise`, whose products are row-invariant. -> (model, the runner's keywords)."""
    if request.param == "positions":
        return request.getfixturevalue("exact"), {}
    return request.getfixturevalue("rowwise"), BATCHED


@pytest.fixture(scope="module")
def plain4(verify):
    return _plain(verify[0], PROMPTS, STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 4])
def test_greedy_speculative_with_the_mtp_draft_equals_greedy_decoding(verify, plain4, rows):
    """Greedy speculative decoding emits plain greedy decoding's tokens, >= 300 tokens, batch 1 and the staggered
    batch of 4 (both decodes over the verify's model)."""
    model, kw = verify
    want = plain4 if rows == 4 else _plain(model, PROMPTS[:1], STEPS)
    got, counts = _speculative(model, PROMPTS[:rows], STEPS, **kw)
    assert got == want
    assert len(counts) >= 100


def test_greedy_speculative_short_run_with_the_mtp_draft(verify):
    """The quick pass's version of the above: 24 tokens past the staggered prompts (4 rows)."""
    model, kw = verify
    got, counts = _speculative(model, PROMPTS, 24, k=3, **kw)
    assert got == _plain(model, PROMPTS, 24)
    assert max(max(c) for c in counts) == 4           # the prompt is read k+1 tokens a step


def test_forced_agree_draft_accepts_every_draft_and_equals_greedy_decoding(verify, plain4):
    model, kw = verify
    n, k = 120, 3
    got, counts = _speculative(model, PROMPTS, n, k=k, draft=_oracle(plain4, k), **kw)
    assert got == [s[: n + 1] for s in plain4]
    assert all(c == k + 1 for step in counts for c in step)        # every draft accepted, every step


def test_partly_right_draft_equals_greedy_decoding(verify):
    """Rows accept 0..k drafts, each its own number per step: positions, state and the repetition penalty's ring
    advance by their own counts (a rejected draft never enters the ring); the batched verify undoes the positions
    after each row's accepted ones in every state buffer (window, compressor rings and entries, indexer)."""
    model, kw = verify
    n, k = 80, 3
    want = _plain(model, PROMPTS, n + k, repetition_penalty=1.5)
    right = lambda pos, i: (pos * 7 + i * 3) % 5 != 0
    got, counts = _speculative(model, PROMPTS, n, k=k, draft=_oracle(want, k, right),
                               sampling=dict(repetition_penalty=1.5), **kw)
    assert got == [s[: n + 1] for s in want]
    assert want != _plain(model, PROMPTS, n + k)[:n + 1]             # the penalty decides tokens here
    seen = {c for step in counts[2:] for c in step}
    assert len(seen) >= 3, seen


@pytest.mark.parametrize("verify", ["positions", "batched"])
def test_mtp_cache_holds_the_committed_positions_only(request, verify):
    """After speculative steps (mostly rejected MTP drafts), the MTP block's window is the reference block's after
    decoding the committed stream position by position: the chained drafts' writes are undone and the committed
    positions written with the main model's streams (the batched verify: in one forward over the k positions,
    the uncommitted ones undone)."""
    exact = request.getfixturevalue("exact" if verify == "positions" else "rowwise")
    r = _runner(exact, 1, SpeculativeRunner, k=3, verify=verify)
    (got,), _ = _speculative(exact, PROMPTS[:1], 30, runner=r, full=True)
    p = int(r.dec.pos[0])
    ids = torch.tensor([got])
    assert ids.shape[1] == p + 1 and p >= 30                      # positions 0..p-1 fed, token p next
    exact.reset()
    H = exact._hidden(ids[:, :p], None)
    mtp = exact.mtp[0]
    for j in range(p - 1):
        mtp(H[:, j:j + 1], ids[:, j + 1:j + 2], exact.rope_main, j)
    want, have = mtp.attn.kv_window[0].float(), r.mtp_state.kv_window[0].float()
    assert float((want - have).abs().max()) < 1e-4 * float(want.abs().max())


def test_a_stopped_row_leaves_a_verify_position_untouched(exact):
    """_Masked snapshots exactly what one graph-safe position writes: over positions that close CSA (4) and HCA
    (128) blocks and wrap the window, a stopped row's every state buffer is bit for bit unchanged, and a kept row's
    equals the unmasked step's."""
    B = 4
    dec = GraphSafeDecoder(exact, B)
    g = torch.Generator().manual_seed(5)
    for buf in dec.state().values():
        if buf.is_floating_point():
            buf.copy_(torch.randn(buf.shape, generator=g))
    pos = torch.tensor([127, 3, 16, 255])
    tok = torch.tensor([5, 6, 7, 8])
    before = {k: v.clone() for k, v in dec.state().items()}
    dec.hidden(tok, pos)
    plain = {k: v.clone() for k, v in dec.state().items()}
    for k, v in dec.state().items():
        v.copy_(before[k])
    keep = torch.tensor([True, False, True, False])
    pairs = [(blk.attn, st) for blk, st in zip(exact.layers, dec.layers)]
    saved = _Masked(pairs, dec.index(pos, B), B)
    dec.hidden(tok, pos)
    saved.restore(keep)
    changed = [k for k in before if not torch.equal(before[k], plain[k])]
    assert any("entries" in k for k in changed) and any("kv_window" in k for k in changed)
    for k, v in dec.state().items():
        assert torch.equal(v[~keep], before[k][~keep]), k
        assert torch.equal(v[keep], plain[k][keep]), k


def test_mtp_reference_prefill_matches_its_decode(exact):
    """The reference MTP block (mtp.MTPBlock): its masked prefill over a sequence equals its decode position by
    position (its own window cache), reading the main model's final streams."""
    ids = torch.randint(16, exact.args.vocab_size, (1, 24), generator=torch.Generator().manual_seed(3))
    exact.reset()
    H = exact._hidden(ids, None)
    mtp = exact.mtp[0]
    want, _ = mtp(H[:, :-1], ids[:, 1:], exact.rope_main, None)
    got = torch.cat([mtp(H[:, j:j + 1], ids[:, j + 1:j + 2], exact.rope_main, j)[0] for j in range(23)], 1)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5


def test_graph_safe_mtp_equals_the_reference_mtp(exact):
    """The speculative step's MTP positions (block_step over a LayerState) give the reference block's logits."""
    ids = torch.randint(16, exact.args.vocab_size, (1, 20), generator=torch.Generator().manual_seed(4))
    exact.reset()
    H = exact._hidden(ids, None)
    want, _ = exact.mtp[0](H[:, :-1], ids[:, 1:], exact.rope_main, None)
    r = _runner(exact, 1, SpeculativeRunner)
    got = torch.stack([r._mtp(H[:, j:j + 1], ids[0, j + 1:j + 2], torch.tensor([j]), 1, None)[0][0] for j in range(19)])
    assert float((got - want[0]).abs().max() / want.abs().max()) < 1e-5


# -- the batched verify (verify="batched": one forward over the k+1 positions) -------------------------------------
def _states_of_both_verifies(model, prompts):
    """The runner state after the same steps through the per-position and the batched verify (k = 3, a draft right
    about two times in three), over positions that wrap the window (16) and close CSA and HCA blocks (4, 128)."""
    k, n = 3, 140
    want = _plain(model, prompts, n + k)
    right = lambda pos, i: (pos * 5 + i) % 3 != 0
    states = []
    for verify in ("positions", "batched"):
        r = _runner(model, len(prompts), SpeculativeRunner, k=k, verify=verify, draft=_oracle(want, k, right))
        _speculative(model, prompts, n, runner=r)
        states.append({name: v.clone() for name, v in r.state().items()})
    return states


def check_both_verifies_leave_one_state():
    """Run by the test below in a process of its own: every state tensor of the two verifies equal bit for bit
    (`out` up to each row's count: past it the per-position verify computed its rejected positions over the
    restored state, the batched one over the speculative state, and nobody reads them)."""
    from dsv4_model.precision import COMPONENTS
    m = dsv4_model.load("tiny", max_seq_len=512, precision=[f"{c}=plain" for c in COMPONENTS], dtype=torch.float32)
    m.set_simulation(False)
    GraphSafeDecoder(m, 1, kernels=False, rowwise=True)
    for prompts in (PROMPTS[:1], PROMPTS):        # batch 1 (1 row per product against 4) and the staggered batch of 4
        got, want = _states_of_both_verifies(m, prompts)
        assert int(want["decoder.pos"].min()) >= 128
        valid = torch.arange(want["out"].shape[1])[None, :] < want["count"][:, None]
        for name, v in want.items():
            if name == "out":
                v, w = v[valid], got[name][valid]
            else:
                w = got[name]
            assert torch.equal(v, w), f"{len(prompts)} rows: {name} differs between the per-position and the batched verify"


@pytest.mark.slow          # ~40 s in a process of its own
def test_batched_verify_leaves_the_state_of_the_per_position_verify():
    """After the same steps, the batched verify's state is the per-position verify's bit for bit: every decoder
    buffer (the rejected positions leave no trace in windows, compressor rings and entries, indexer), the MTP
    cache, the kept streams and the sampler's ring. In a process with ATEN_CPU_CAPABILITY=default: on an AVX-512
    CPU torch's vectorised exp/sigmoid/rsqrt give an element other bits in a loop's vector body than in its scalar
    tail, and which elements fall in the tail depends on the tensor's size (4 rows of the plain step's mHC mix:
    all tail; 16 rows of the batched verify's: none), so elementwise ops there are not row-invariant; the scalar
    build takes that out and leaves what this test is about, the state the verify commits."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default",
               PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", "import test_speculative as t; t.check_both_verifies_leave_one_state()"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def triton_small_kernels_on_cpu() -> dict:
    """SMALL_KERNELS key -> its kernel wrapper with the CUDA test taken out, so that the Triton branch runs on CPU
    tensors (under TRITON_INTERPRET=1). Every wrapper tests `<tensor>.is_cuda and KERNEL.available()[0]`; one that
    stops saying so fails here, instead of running its reference unnoticed."""
    import importlib
    import inspect
    import re
    import textwrap
    from dsv4_kernels._select import KERNELS
    from dsv4_model.decode import SMALL_KERNELS
    out = {}
    for key, (name, _, _) in SMALL_KERNELS.items():
        fn = KERNELS[name].kernel
        src = textwrap.dedent(inspect.getsource(fn))
        new = re.sub(r"\b\w+\.is_cuda and ", "", src).replace("KERNEL.available()[0]", "True")
        assert new.count("True") > src.count("True"), f"{name}: its wrapper no longer tests x.is_cuda and KERNEL.available()"
        scope = {}
        exec(compile(new, inspect.getsourcefile(fn), "exec"), importlib.import_module(fn.__module__).__dict__, scope)
        out[key] = scope[fn.__name__]
    return out


def check_forced_agree_over_the_triton_kernels(verify: str, steps: int = 1) -> None:
    """Run by the test below under TRITON_INTERPRET=1: the GPU test's forced-agree run (tiny model, staggered batch
    of 4, k = 2, every row's own plain greedy stream as the draft) with every small op through its Triton kernel."""
    from conftest import load_benchmark
    from dsv4_model import decode
    kernels = triton_small_kernels_on_cpu()
    decode.small_kernels = lambda device, use_kernels=True: dict(kernels)
    bench = load_benchmark("decode", "decode_bench")
    model = dsv4_model.load("tiny", max_seq_len=128)
    B, k, rowwise = 4, 2, verify == "batched"
    prompts = [[0, 3 + r, 4 + r][: 1 + r % 3] for r in range(B)]
    plain = Runner(GraphSafeDecoder(model, B, kernels=True, rowwise=rowwise), Sampler(B, model.args.vocab_size),
                   buckets=(B,), graphs=False, log=lambda s: None)
    assert model.kernels.fns["route"] is kernels["route"]
    for i, p in enumerate(prompts):
        plain.start(i, p)
    table = torch.zeros(B, (k + 1) * steps + 4, dtype=torch.long)
    for t in range(1, table.shape[1]):
        plain.step(B)
        table[:, t] = plain.dec.tokens
    r = SpeculativeRunner(GraphSafeDecoder(model, B, kernels=True, rowwise=rowwise), Sampler(B, model.args.vocab_size),
                          k=k, draft=bench.table_draft(table, k), verify=verify, buckets=(B,), graphs=False,
                          log=lambda s: None)
    for i, p in enumerate(prompts):
        r.start(i, p)
    for step in range(steps):
        r.body(B)
        assert r.count[:B].tolist() == [k + 1] * B, f"{verify} step {step}: counts {r.count[:B].tolist()}"


@pytest.mark.slow          # ~35-60 s each: the Triton interpreter
@pytest.mark.parametrize("verify", ["positions", "batched"])
def test_forced_agree_draft_is_accepted_over_the_triton_kernels(verify):
    """The CUDA forced-agree replay test (test_cuda_speculative_replay_bitwise[forced-*]) on CPU, every small op
    through its Triton kernel's logic (TRITON_INTERPRET=1, a process of its own): a kernel that reads a strided
    input as contiguous, or gives a row other bits at another row count, makes a draft the plain step emits lose
    and the count fall short. It caught the route kernel reading a hash layer's token ids as contiguous: the
    per-position verify feeds position i's tokens, a column of the [B, k] drafts (counts [3, 2, 3, 2])."""
    import subprocess
    import sys
    from conftest import triton_interpreter_env
    here = os.path.dirname(os.path.abspath(__file__))
    env = triton_interpreter_env(PYTHONPATH=os.pathsep.join(filter(None, [here, os.path.dirname(here),
                                                                         os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", f"import test_speculative as t; "
                        f"t.check_forced_agree_over_the_triton_kernels({verify!r})"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_batched_verify_asks_for_row_invariant_products(exact):
    """Over a model whose products are not row-invariant the batched verify could not equal the plain step: the
    runner says so and how to get them."""
    with pytest.raises(ValueError, match="rowwise=True"):
        _runner(exact, 2, SpeculativeRunner, **BATCHED)
    with pytest.raises(ValueError, match="verify='sideways'"):
        _runner(exact, 2, SpeculativeRunner, verify="sideways")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_invariant_products_give_each_row_its_bits_at_any_row_count(dtype):
    """rowwise.py's products, the ones the batched verify and the plain step share: each row's result is the same
    bits at every row count M in 1..40 and at any offset, for the decode's product shapes (the dense projections,
    the fp32 ones, the attention's grouped output, the routed experts). F.linear is not (checked alongside, so the
    test would notice a BLAS that made it so)."""
    import torch.nn.functional as F
    from dsv4_model import rowwise as rw
    from dsv4_model.quant import QWeight
    g = torch.Generator().manual_seed(0)
    linear_varies = False
    for K, N in ((128, 64), (64, 128), (128, 512), (512, 128), (128, 320), (64, 8), (128, 24)):
        W, X = torch.randn(N, K, generator=g).to(dtype), torch.randn(40, K, generator=g).to(dtype)
        one = torch.cat([rw.rows_linear(X[i:i + 1], W) for i in range(40)])
        one_f = torch.cat([F.linear(X[i:i + 1], W) for i in range(40)])
        for M in (2, 3, 8, 12, 24, 40):
            for off in (0, 40 - M):
                assert torch.equal(rw.rows_linear(X[off:off + M], W), one[off:off + M]), (K, N, M, off)
            linear_varies |= not torch.equal(F.linear(X[:M], W), one_f[:M])
    if dtype == torch.float32:
        assert linear_varies                        # what makes rowwise.py necessary on this CPU
        Xf, Wb = torch.randn(40, 256, generator=g), torch.randn(24, 256, generator=g).bfloat16()
        one = torch.cat([rw.rows_linear(Xf[i:i + 1], Wb) for i in range(40)])
        assert torch.equal(rw.rows_linear(Xf, Wb), one)
    o, wa = torch.randn(40, 1, 2, 128, generator=g).to(dtype), torch.randn(2, 32, 128, generator=g).to(dtype)
    one = torch.cat([rw.rows_grouped(o[i:i + 1], wa) for i in range(40)])
    assert torch.equal(rw.rows_grouped(o, wa), one) and torch.equal(rw.rows_grouped(o[7:19], wa), one[7:19])
    E, dim, inter = 8, 128, 64
    w1, w3, w2 = (QWeight("plain", torch.randn(E, a, b, generator=g).to(dtype), None, None, None).astuple()
                  for a, b in ((inter, dim), (inter, dim), (dim, inter)))
    x = torch.randn(40, dim, generator=g).to(dtype)
    idx = torch.randint(0, E, (40, 2), generator=g).sort(-1).values
    wts = torch.rand(40, 2, generator=g)
    one = torch.cat([rw.rows_routed_experts(x[i:i + 1], idx[i:i + 1], wts[i:i + 1], w1, w3, w2, 10.0) for i in range(40)])
    for M in (2, 12, 40):
        assert torch.equal(rw.rows_routed_experts(x[:M], idx[:M], wts[:M], w1, w3, w2, 10.0), one[:M]), M


# -- sampling --------------------------------------------------------------------------------------------------
N, T, TOPK = 768, 2.0, 3


def _exact_joint(model, prompt):
    """The plain sampler's exact distribution of the 3 tokens after `prompt` (temperature T, top-k TOPK, no
    penalty), from plain graph-safe steps over every branch: ({(a, b, c): probability}, {generated prefix: the
    next token's distribution [V]})."""
    def dist(prefixes):
        B = len(prefixes)
        dec = GraphSafeDecoder(model, B)
        for i in range(len(prefixes[0])):
            dec.tokens.copy_(torch.tensor([p[i] for p in prefixes]))
            logits = dec.step(B)
        return filtered_probs(logits / T, torch.full((B,), TOPK), torch.ones(B)).double()
    p1 = dist([prompt])[0]
    cond = {(): p1}
    a_s = p1.nonzero()[:, 0].tolist()
    cond.update({(a,): p for a, p in zip(a_s, dist([prompt + [a] for a in a_s]))})
    ab = [(a, b) for a in a_s for b in cond[(a,)].nonzero()[:, 0].tolist()]
    cond.update(zip(ab, dist([prompt + list(x) for x in ab])))
    joint = {(a, b, c): float(p1[a] * cond[(a,)][b] * cond[(a, b)][c])
             for a, b in ab for c in cond[(a, b)].nonzero()[:, 0].tolist()}
    return joint, cond


def _chi2(samples, probs):
    """Pearson's statistic over the cells (cells expected below 5 pooled, a cell for anything outside the support)
    and its critical value at significance 1e-3 (Wilson-Hilferty)."""
    n = len(samples)
    counts = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    outside = sum(c for s, c in counts.items() if s not in probs)
    big = {s: p for s, p in probs.items() if p * n >= 5}
    pooled_p = 1 - sum(big.values())
    cells = [(counts.get(s, 0), p * n) for s, p in big.items()]
    pooled_c = n - outside - sum(c for c, _ in cells)
    if pooled_p * n >= 1e-9:
        cells.append((pooled_c, pooled_p * n))
    stat = sum((c - e) ** 2 / e for c, e in cells) + (math.inf if outside else 0)
    df = len(cells) - 1
    z = 3.09                                         # the normal's 1 - 1e-3 quantile
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, crit


@pytest.fixture(scope="module")
def joint(exact):
    return _exact_joint(exact, [0, 40, 41])


def _sample_runs(runner, n_rows, steps):
    for i in range(n_rows):
        runner.start(i, [0, 40, 41], temperature=T, top_k=TOPK, seed=i)
    seqs = [[0] for _ in range(n_rows)]
    for _ in range(steps):
        res = runner.step(n_rows)
        if isinstance(res, tuple):
            out, count = res
            for i, (o, c) in enumerate(zip(out.tolist(), count.tolist())):
                seqs[i] += o[:c]
        else:
            for i, t in enumerate(runner.dec.tokens.tolist()):
                seqs[i].append(t)
    return [tuple(s[3:6]) for s in seqs]


def test_plain_sampler_matches_the_exact_distribution(exact, joint):
    """Calibrates the statistical test: the plain sampler's (t3, t4, t5) against the exact joint."""
    stat, crit = _chi2(_sample_runs(_runner(exact, N), N, 5), joint[0])
    assert stat < crit, (stat, crit)


def _contrary_draft(cond, V, seed=0):
    """A draft from the exact target distributions, turned around: 0.8 on the target's least likely token, 0.2
    over its others. It overlaps the target unevenly, so both the acceptance ratio and the residual sample
    decide the output (the MTP block's drafts rarely overlap the random target: they test mostly the rejection
    path). Reads each row's generated tokens from the sampler's ring on the host: a test-only draft."""
    gen = torch.Generator().manual_seed(seed)
    uniform = torch.full((V,), 1.0 / V, dtype=torch.float64)

    def draft(runner, n):
        k, pos, tok = runner.k, runner.dec.pos[:n].tolist(), runner.dec.tokens[:n].tolist()
        ring = runner.sampler.ring[:n].tolist()
        d, q = torch.zeros(n, k, dtype=torch.long), torch.zeros(n, k, V)
        for r in range(n):
            hist = ring[r][: pos[r]] + [tok[r]]                 # the tokens at positions 0..p
            for i in range(k):
                p = cond.get(tuple(hist[3:]))
                if p is None:
                    qi = uniform
                else:
                    live = p > 0
                    least = torch.where(live, p, 2.0).argmin()
                    qi = torch.where(live, 0.2 / max(int(live.sum()) - 1, 1), 0.0).double()
                    qi[least] = 0.8
                    qi = qi / qi.sum()
                di = int(torch.multinomial(qi, 1, generator=gen))
                d[r, i], q[r, i] = di, qi.float()
                hist.append(di)
        return d, q
    return draft


# each draft's run is 14-17 s of CPU: CI's slow pass runs both (issue 40's bound on the default run)
@pytest.mark.slow
@pytest.mark.parametrize("which", ["mtp", "contrary"])
def test_speculative_sampler_matches_the_plain_distribution(exact, joint, which):
    """The rejection rule keeps the target distribution: (t3, t4, t5) of the speculative sampler (k = 2) against
    the same exact joint, with the MTP draft and with a draft that overlaps the target, at significance 1e-3."""
    V = exact.args.vocab_size
    draft = None if which == "mtp" else _contrary_draft(joint[1], V)
    r = _runner(exact, N, SpeculativeRunner, k=2, generator=torch.Generator().manual_seed(11), draft=draft)
    stat, crit = _chi2(_sample_runs(r, N, 4), joint[0])
    assert stat < crit, (stat, crit)


# -- graphcheck ------------------------------------------------------------------------------------------------
def _rows(findings):
    return sorted((f.rule, f.path.rsplit("/", 1)[-1], f.line) for f in findings)


@pytest.mark.slow    # ~10 s each; the same zero is CI's gate (graphcheck run --config graphcheck-graphsafe.toml) on every push
@pytest.mark.parametrize("verify", ["positions", "batched"])
def test_graphcheck_finds_nothing_in_the_speculative_step(verify):
    """The speculative target, both verifies (also gated in CI: graphcheck-graphsafe.toml, empty baseline): the
    portable audit and the capture emulation, MTP drafts and sampling rows included, at zero findings."""
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    from dsv4_model.target import speculative_decode
    assert audit(speculative_decode(device="cpu", batch=2, max_seq_len=64, verify=verify), steps=2) == []
    assert capture_test(speculative_decode(device="cpu", batch=2, max_seq_len=64, verify=verify), steps=2,
                        device="cpu") == []


# each variant runs the audit and the capture emulation (~7 s of CPU): all three in CI's slow pass (issue 40's bound)
@pytest.mark.parametrize("factory,marker,rule", [pytest.param("item_count", "item", "GC101", marks=pytest.mark.slow),
                                                 pytest.param("loop_over_accepted", "loop", "GC105", marks=pytest.mark.slow),
                                                 pytest.param("slice_by_count", "slice", "GC105", marks=pytest.mark.slow)])
def test_planted_host_reads_of_the_accepted_count_are_caught_at_their_line(factory, marker, rule):
    """A host `.item()` of the count, a Python loop over the accepted tokens, a slice by the count: the audit
    names each read at its line, and the capture fails there (GC001), nothing else reported."""
    import spec_planted
    from graphcheck.runtime.audit import audit
    from graphcheck.runtime.capture import capture_test
    line = spec_planted.line_of(marker)
    assert _rows(audit(getattr(spec_planted, factory)(), steps=2)) == [(rule, "spec_planted.py", line)]
    assert _rows(capture_test(getattr(spec_planted, factory)(), steps=2, device="cpu")) == [("GC001", "spec_planted.py", line)]


# -- GPU ------------------------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("verify", ["positions", "batched"])
@pytest.mark.parametrize("draft", ["mtp", "forced"])
def test_cuda_speculative_replay_bitwise(draft, verify):
    """The runner's captured speculative step (k = 2, a staggered batch of 4, greedy and sampling rows, its own
    generator registered with the graph) replays equal to the eager step bit for bit over 300 steps: emitted
    tokens, counts and every state tensor (every 50 steps); with the forced-agree draft every step accepts all.
    Both verifies; the batched one over the row-invariant table (kernels=True, rowwise=True), the plain stream the
    forced draft reads too (so that its drafts are what the batched verify's argmax is, if the kernels' rows are
    invariant: else the forced rows' counts fall short and this fails)."""
    from conftest import load_benchmark
    bench = load_benchmark("decode", "decode_bench")
    model = dsv4_model.load("tiny", device="cuda", max_seq_len=1024)
    B, k, steps = 4, 2, STEPS
    rowwise = verify == "batched"
    prompts = [[0, 3 + r, 4 + r][: 1 + r % 3] for r in range(B)]
    settings = [dict(temperature=0.7, top_k=40, top_p=0.95, repetition_penalty=1.1, seed=r) if r % 2 and draft == "mtp"
                else {} for r in range(B)]
    table_draft = None
    if draft == "forced":                      # each row's own greedy stream, from the plain (eager) step
        plain = Runner(GraphSafeDecoder(model, B, kernels=True, rowwise=rowwise),
                       Sampler(B, model.args.vocab_size, device="cuda"), buckets=(B,), graphs=False, log=lambda s: None)
        for i, p in enumerate(prompts):
            plain.start(i, p)
        table = torch.zeros(B, (k + 1) * steps + 8, dtype=torch.long, device="cuda")
        for t in range(1, table.shape[1]):
            plain.step(B)
            table[:, t] = plain.dec.tokens
        table_draft = bench.table_draft(table, k)
    gen = torch.Generator(device="cuda").manual_seed(0)
    r = SpeculativeRunner(GraphSafeDecoder(model, B, kernels=True, rowwise=rowwise),
                          Sampler(B, model.args.vocab_size, device="cuda"), k=k, generator=gen, draft=table_draft,
                          verify=verify, buckets=(B,), log=lambda s: None)
    for i, p in enumerate(prompts):
        r.start(i, p, **settings[i])
    r.step(B)                                  # captures the bucket's graph (state restored after), one replay
    assert r.graphs[B] is not None
    state = r.state()
    start, g0 = {n: v.clone() for n, v in state.items()}, gen.get_state()
    eager, snaps = [], []
    for i in range(steps):
        r.body(B)
        eager.append((r.out[:B].clone(), r.count[:B].clone()))
        if i % 50 == 49:
            snaps.append({n: v.clone() for n, v in state.items()})
    for n, v in state.items():
        v.copy_(start[n])
    gen.set_state(g0)
    for i in range(steps):
        out, count = r.step(B)
        assert torch.equal(out, eager[i][0]) and torch.equal(count, eager[i][1]), f"step {i}"
        if draft == "forced":
            assert bool((count == k + 1).all()), f"step {i}: {count.tolist()}"
        if i % 50 == 49:
            for n, v in state.items():
                assert torch.equal(v, snaps[i // 50][n]), f"state {n} differs at step {i}"


@pytest.mark.cuda
@pytest.mark.parametrize("verify", ["positions", "batched"])
def test_cuda_capture_of_the_speculative_target_is_clean(verify):
    from graphcheck.runtime.capture import capture_test
    from dsv4_model.target import speculative_decode
    assert capture_test(speculative_decode(device="cuda", batch=4, verify=verify), steps=3, device="cuda") == []


@pytest.mark.cuda
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("verify", ["positions", "batched"])
def test_cuda_greedy_speculative_equals_plain_greedy(verify, rows):
    """On the GPU with the decode kernels (for the batched verify the row-invariant table: rowwise=True), both
    runners captured: greedy speculative decoding (MTP drafts, k = 2) emits plain greedy decoding's tokens over 300
    steps, batch 1 and the staggered batch of 4; a draft forced to agree (the plain stream, read on the device) is
    accepted every step, every row. The batched verify fails here where a kernel gives a row other bits at the
    verify's n*(k+1) rows than at the plain step's n (then a draft the plain step would emit can lose its argmax):
    `python benchmarks/row_invariance.py --device cuda` names the first such product."""
    from conftest import load_benchmark
    bench = load_benchmark("decode", "decode_bench")
    model = dsv4_model.load("tiny", device="cuda", max_seq_len=1024)
    GraphSafeDecoder(model, 1, kernels=True, rowwise=verify == "batched")   # the table every runner below keeps
    prompts, k = PROMPTS[:rows], 2
    want = _plain(model, prompts, STEPS + 2 * k, graphs=True)
    got, counts = _speculative(model, prompts, STEPS, k=k, graphs=True, verify=verify)
    assert got == [s[: STEPS + 1] for s in want]
    table = torch.tensor([s + [0] * (STEPS * k) for s in want], device="cuda")
    forced, counts = _speculative(model, prompts, STEPS - 2 * k, k=k, graphs=True, verify=verify,
                                  draft=bench.table_draft(table, k))
    assert forced == [s[: STEPS - 2 * k + 1] for s in want]
    assert all(c == k + 1 for step in counts for c in step), "a forced draft was rejected"

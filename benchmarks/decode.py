"""Decode step speed on a GPU: eager graph-safe step vs its CUDA-graph replay vs torch.compile(reduce-overhead) of
the same step, against the HBM floor (bytes the step must read / measured copy bandwidth), all measured in this run.

    python benchmarks/decode.py                       # tiny preset and Flash layer dimensions, batch 1 and 8
    python benchmarks/decode.py --configs tiny --no-compile
    python benchmarks/decode.py --configs flash --batches 8 --profile   # plus the graph step's top kernels

The step timed is the runner's captured body: decoder step + device sampler + next-token feed. Flash: the real
layer dimensions (dim 4096, 64x512 heads, 256 experts of 2048, top-6), 3 layers, random bf16 weights built on the
device. Ratios, not absolute times, are the result: eager/graph >= 4 on tiny is the target, graph <= compile, and
graph within 3x of the floor on Flash.

Depth mode (issue 37), the layers counted honestly, with no compile:

    python benchmarks/decode.py --depths 2,8 --batches 1,8,32      # Flash layers at depths 2 and 8
    python benchmarks/decode.py --depths 2,8 --layer-profile 1 --batches 1,8   # plus layer 1's kernels, timed
    python benchmarks/decode.py --device cpu --configs tiny --depths 2,4 --batches 1,2 --layer-profile 1  # CI
    python benchmarks/decode.py --depths 2,8 --batches 1,8 --unfused    # the fused small-chain ops off (an A/B)
    python benchmarks/decode.py --depths 2,8 --batches 1,8 --unfused attend_ring    # only that one off

The same random model at each depth (layer 0 hashed, then CSA and HCA alternating), graph replay of the runner's
step: per layer = the difference of two depths over the layers between them (time, kernels per replay, graph nodes,
bytes), the rest (embedding, head, sampler) = the shallow step minus its layers. The floor is the bytes the release
checkpoint STORES (`stored_floor`: FP8 e4m3 + one e8m0 scale per 128x128 block for attention and shared expert,
MXFP4 + e8m0 per 32 for the routed experts actually hit in the step, bf16 for head, router, compressors and norms,
fp32 where the checkpoint keeps fp32; the decode state read) over the copy bandwidth measured in this run, whatever
dtype the model holds them in. The projected 43-layer step = rest + 43 x per layer, against rest + 43 x the layer
floor. On CPU (`--device cpu`, tiny shapes) the same code runs eagerly, counting profiler ops instead of kernels:
what CI runs to keep the script working; its times mean nothing.

Speculative mode (issue 41), graph replay of the speculative step (speculative.py, the MTP block's drafts) against
the plain step, per step and per emitted token, at acceptance 0, 0.5 and 1 (drafts from each row's own greedy
stream, right for the first 0, k/2 or k of them) and with the MTP block's own drafts:

    python benchmarks/decode.py --speculative 2 --configs tiny,flash --batches 1,8
    python benchmarks/decode.py --speculative 2 --device cpu --configs tiny --batches 1 --steps 2   # CI crash test

Both verify modes by default (`--verify positions,batched`): the per-position verify (k+1 one-position forwards),
and the batched one (one forward over the k+1 positions, its plain row over the same row-invariant kernel table).

torch.compile runs in a child process per (config, batch): a compile that fails inside Inductor can leave the
process's dispatcher state broken (torch 2.11 hit an internal assert on the next allocation), which must not take
the other rows with it. The child compiles the step with the kernels the decoder selects; if that fails it says
why and compiles the PyTorch-reference step instead (the column then carries "ref").
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import subprocess
import sys
import time
from collections import Counter

import torch

import ab_knobs  # benchmarks/ab_knobs.py: this script's directory is on sys.path


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _ms(fn, steps: int) -> float:
    _sync()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    _sync()
    return (time.perf_counter() - t) * 1e3 / steps


def copy_bandwidth(nbytes: int = 1 << 30, device: str = "cuda") -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = _ms(lambda: dst.copy_(src), 20)
    return 2 * nbytes / (ms / 1e3)


def bytes_per_step(model, dec, batch: int) -> int:
    """Weights the step reads in their stored formats (routed experts: the ones hit, at most batch*k per layer;
    embedding: the rows fed) plus the decode state it reads (window rings, compressor states and every compressed
    slot, masked or not). The reference model's own decode state and rope tables are not read by this step."""
    a = model.args
    skip = ("kv_window", "kv_state", "gate_state", "entries", "pos", "rope_main", "rope_compress", "tid2eid")
    # bytes of memory, not of tensors: views of one tensor (the compressors' joined weights and the modules' views of
    # them) count once, as the union of the byte ranges they cover
    spans: dict[int, list[tuple[int, int]]] = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if ".experts." in name or name == "embed.weight" or name.rsplit(".", 1)[-1] in skip:
            continue
        lo = t.storage_offset() * t.element_size()
        spans.setdefault(t.untyped_storage().data_ptr(), []).append((lo, lo + t.numel() * t.element_size()))
    total = 0
    for ranges in spans.values():
        end = -1
        for lo, hi in sorted(ranges):
            total += max(0, hi - max(lo, end))
            end = max(end, hi)
    for layer in model.layers:
        ex = layer.ffn.experts
        per_expert = sum(qw.nbytes for qw in (ex.w1, ex.w2, ex.w3)) // ex.n      # ex.n: the experts on this rank
        total += min(ex.n, batch * a.n_activated_experts) * per_expert
    total += batch * a.dim * model.embed.weight.element_size()
    total += sum(b.numel() * b.element_size() for n, b in dec.named_buffers() if b.dim() >= 2)
    return total


def _setup(model, batch: int, kernels: bool = True):
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.runner import Runner
    from dsv4_model.sampler import Sampler
    dec = GraphSafeDecoder(model, batch=batch, kernels=kernels)
    dev = model.embed.weight.device
    runner = Runner(dec, Sampler(batch, model.args.vocab_size, device=dev, kernels=kernels), buckets=(batch,),
                    log=lambda s: None)
    for r in range(batch):
        runner.start(r, [0, 5 + r, 6 + r], temperature=0.8, top_k=50, top_p=0.95, seed=r)
    for _ in range(3):
        runner.body(batch)
    return dec, runner


def _model(cfg: str):
    import dsv4_model
    from dsv4_model.synthetic import flash_layers
    from dsv4_model.target import shard_if_distributed
    model = dsv4_model.load("tiny", device="cuda", max_seq_len=512) if cfg == "tiny" else flash_layers()
    return shard_if_distributed(model)


def compile_child(cfg: str, batch: int, steps: int, kernels: bool) -> dict:
    """Runs in its own process: torch.compile(mode="reduce-overhead") of the runner's body."""
    torch.manual_seed(0)
    _, runner = _setup(_model(cfg), batch, kernels)
    fn = torch.compile(runner.body, mode="reduce-overhead")
    for _ in range(3):
        fn(batch)
    return {"compile": _ms(lambda: fn(batch), steps)}


def compile_row(cfg: str, batch: int, steps: int, deadline: float) -> tuple[float, str]:
    """(ms, note) of the compiled step, from a child process; NaN and the reason when both attempts fail or the
    run's compile budget (`deadline`, a perf_counter time) is spent."""
    why = ""
    for kernels in (True, False):
        left = deadline - time.perf_counter()
        if left < 20:
            return float("nan"), "compile: no time left"
        cmd = [sys.executable, __file__, "--compile-child", f"{cfg}:{batch}:{int(kernels)}", "--steps", str(steps)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            return float("nan"), "compile: timed out"
        last = (p.stdout.strip().splitlines() or [""])[-1]
        if p.returncode == 0 and last.startswith("{"):
            return json.loads(last)["compile"], "" if kernels else "ref"
        err = [ln for ln in p.stderr.splitlines() if "Error" in ln or "error" in ln]
        why = (err[-1] if err else f"exit {p.returncode}")[:160]
        print(f"  torch.compile ({'kernels' if kernels else 'references'}) failed on {cfg} batch {batch}: {why}",
              file=sys.stderr)
    return float("nan"), "failed"


def profile_parts(dec, runner, batch: int) -> None:
    """The decoder step and the sampler, each captured alone and replayed: how the step's time splits."""
    logits = dec.step(batch)
    for name, fn in (("decoder step", lambda: dec.step(batch)), ("sampler", lambda: runner.sampler(logits))):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        print(f"  {name}: {_ms(g.replay, 20):.3f} ms per replay")


def profile_graph(runner, batch: int, top: int = 40) -> None:
    """The CUDA kernels of one graph replay, by total time: where the step's time goes."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            runner.step(batch)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=top, max_name_column_width=70))


# -- per layer, at depth, against the stored bytes (issue 37) ---------------------------------------------------
def depth_args(cfg: str, layers: int, experts: int | None = None):
    """The config's layer dimensions at `layers` deep: layer 0 hashed, then CSA and HCA alternating (Flash:
    `synthetic.flash_args`); `experts` routed experts per layer where given (a step reads only those it hits)."""
    from dsv4_model.config import ModelArgs, flash, tiny
    pattern = [4, 128] * layers
    over = {"n_layers": layers, "compress_ratios": pattern[:layers] + [0], "n_hash_layers": 1,
            "max_seq_len": 4096 if cfg == "flash" else 512}
    if experts:
        over["n_routed_experts"] = experts
    return ModelArgs(**{**(flash() if cfg == "flash" else tiny()).to_json(), **over}).validate()


def _linear_stored(base: str, shape) -> int:
    """Bytes of projection `base` [N, K] as the release checkpoint stores it."""
    from dsv4_model.checkpoint import stored_format
    N, K = shape
    fmt = stored_format("release", base)
    if fmt == "fp8":        # e4m3 codes + one ue8m0 scale per 128x128 block (the release's scale_fmt)
        return N * K + math.ceil(N / 128) * math.ceil(K / 128)
    if fmt == "mxfp4":      # e2m1 codes + one e8m0 scale per 32
        return N * K // 2 + N * K // 32
    return 2 * N * K        # bf16: head, router, compressors, indexer weights_proj


def state_bytes(dec) -> list[int]:
    """Per layer, the decode state a step reads: the decoder's buffers as laid out (window ring, compressor states,
    every compressed slot at its capacity, masked or not)."""
    return [sum(b.numel() * b.element_size() for b in st.buffers() if b.dim() >= 2) for st in dec.layers]


def stored_floor(args, batch: int, hits: list[float], state: list[int]) -> tuple[int, list[int]]:
    """(rest, [layer]): the bytes a step must read, every tensor at the dtype the release checkpoint stores it in,
    whatever the model holds. rest: the embedding rows fed, hc head, final norm, LM head. Layer L: its weights
    but the routed experts, hits[L] routed experts (the distinct ones the step's routing picked), the hash table's
    rows fed, and state[L] bytes of decode state (`state_bytes`)."""
    from dsv4_model.checkpoint import expected_tensors, stored_fp32
    rest, layers, expert = 0, [0] * args.n_layers, 0
    for name, (shape, kind) in expected_tensors(args).items():
        if ".ffn.experts." in name:
            if name.startswith("layers.0.ffn.experts.0."):
                expert += _linear_stored(name[: -len(".weight")], shape)
            continue
        if kind == "int":                           # tid2eid: the rows of the tokens fed, int64
            n = batch * shape[1] * 8
        elif kind == "linear":
            n = _linear_stored(name[: -len(".weight")], shape)
        elif name == "embed.weight":
            n = batch * shape[1] * 2
        else:
            n = math.prod(shape) * (4 if stored_fp32(name) else 2)
        if name.startswith("layers."):
            layers[int(name.split(".")[1])] += n
        else:
            rest += n
    return rest, [n + round(h * expert) + st for n, h, st in zip(layers, hits, state)]


def expert_hits(model, runner, batch: int, steps: int = 3) -> list[float]:
    """Distinct routed experts each layer's router picks per step, the mean over `steps` eager steps."""
    seen = [[] for _ in model.layers]
    hooks = [layer.ffn.gate.register_forward_hook(lambda m, i, out, L=L: seen[L].append(out[1].unique().numel()))
             for L, layer in enumerate(model.layers)]
    try:
        for _ in range(steps):
            runner.body(batch)
    finally:
        for h in hooks:
            h.remove()
    return [sum(v) / len(v) for v in seen]


_NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait", 7: "record",
               10: "alloc", 11: "free", 12: "memop", 13: "conditional"}


def graph_nodes(fn) -> Counter | None:
    """Node types of a CUDA graph of `fn` (torch keeps the cudaGraph_t with keep_graph=True and has no count of
    its own; the driver's cuGraphGetNodes and cuGraphNodeGetType count them, on the raw handle). None, and why on
    stderr, where that is unavailable."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            fn()
        raw = ctypes.c_void_p(int(g.raw_cuda_graph()))
        n = ctypes.c_size_t(0)
        if lib.cuGraphGetNodes(raw, None, ctypes.byref(n)) != 0:
            raise RuntimeError("cuGraphGetNodes failed")
        nodes = (ctypes.c_void_p * n.value)()
        lib.cuGraphGetNodes(raw, nodes, ctypes.byref(n))
        kinds, t = Counter(), ctypes.c_int()
        for node in nodes:
            if lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t)) != 0:
                raise RuntimeError("cuGraphNodeGetType failed")
            kinds[_NODE_TYPES.get(t.value, str(t.value))] += 1
    except (OSError, TypeError, RuntimeError, AttributeError) as e:   # a count we cannot make is said, not guessed
        print(f"  graph nodes: not counted ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    del g
    return kinds


def _device_events(prof, cuda: bool) -> list:
    """The profiled kernels (CUDA; memcpy/memset apart) or top-level aten ops (CPU), in start order."""
    from torch.autograd import DeviceType
    if cuda:
        ev = [e for e in prof.events()
              if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))]
    else:
        ev = [e for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None]
    return sorted(ev, key=lambda e: e.time_range.start)


def kernels_per_step(fn, cuda: bool, reps: int = 5) -> float:
    """Kernels one call of `fn` launches (a graph replay's kernels, from the profiler); CPU: top-level aten ops."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
        _sync()
    return len(_device_events(prof, cuda)) / reps


# kernels that stream a weight (the GEMVs, routed experts, cuBLAS): the others are the small chain around them
_WEIGHT_KERNELS = ("gemv", "gemm", "rows", "mma", "expert", "f32_", "cluster", "cutlass", "xmma", "bf16_rows")


def layer_profile(model, dec, batch: int, L: int, bw: float, floor_bytes: int, cuda: bool, reps: int = 20) -> None:
    """Layer L captured alone (a CUDA graph of `GraphSafeDecoder.block`; eagerly on CPU) and replayed: its kernels in
    launch order with their mean times, the split between weight-streaming kernels and the small chain around
    them, and what fusing that chain into fewer launches would give (a model, not a measurement: each fused launch
    costing the median small kernel, the idle time between launches shrinking with their count)."""
    from torch.profiler import ProfilerActivity, profile
    n = batch
    X = torch.randn(n, 1, model.args.hc_mult, model.args.dim, device=dec.tokens.device).to(model.dtype)
    ids = dec.tokens[:n].view(n, 1)
    snap = {k: v.clone() for k, v in dec.state().items()}
    with torch.inference_mode():
        ix = dec.index(dec.pos[:n].clamp(max=dec.capacity - 1), n)
        dec.block(L, X, ids, ix, n)     # ix's tensors made here, once: the graph holds the layer's own work only

        def fn():
            with torch.inference_mode():
                dec.block(L, X, ids, ix, n)
        run = fn
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            run = g.replay
        wall = _ms(run, reps) * 1e3
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            for _ in range(reps):
                run()
            _sync()
    for k, v in dec.state().items():
        v.copy_(snap[k])
    ev = _device_events(prof, cuda)
    per = len(ev) // reps
    if per == 0:
        print(f"== layer {L}, B={batch}: no {'kernels' if cuda else 'ops'} profiled")
        return
    names = [e.name for e in ev[:per]]
    us = [sum(ev[r * per + i].time_range.elapsed_us() for r in range(reps)) / reps for i in range(per)]
    floor_us = floor_bytes / bw * 1e6
    print(f"== layer {L} ({'CSA' if model.args.ratio(L) == 4 else 'HCA' if model.args.ratio(L) else 'SWA'}"
          f"{', hashed' if L < model.args.n_hash_layers else ''}), B={batch}: {per} {'kernels' if cuda else 'ops'}, "
          f"{wall:.1f} us per {'replay' if cuda else 'call'}, stored floor {floor_bytes / 1e6:.1f} MB = "
          f"{floor_us:.1f} us, {wall / floor_us:.2f}x")
    for i, (nm, t) in enumerate(zip(names, us)):
        print(f"  {i:3d} {t:8.2f} us  {nm[:110]}")
    heavy = [i for i, nm in enumerate(names) if any(k in nm.lower() for k in _WEIGHT_KERNELS)]
    light = [i for i in range(per) if i not in heavy]
    t_heavy, t_light = sum(us[i] for i in heavy), sum(us[i] for i in light)
    from dsv4_model.decode import SideStream
    if isinstance(dec.side, SideStream):
        # side streams (decode.OVERLAP): kernels overlap, so their sum is not the wall time and the launch order may
        # differ between replays; the idle time and the fusion projections below assume one serial chain
        print(f"  weight-streaming: {len(heavy)} kernels {t_heavy:.1f} us; the small chain: {len(light)} kernels "
              f"{t_light:.1f} us; on {1 + len(dec.side.streams)} streams, so no idle time or fusion projection "
              f"(--knob dsv4_model.decode.OVERLAP=False profiles one stream)")
        return
    idle = max(0.0, wall - t_heavy - t_light)
    print(f"  weight-streaming: {len(heavy)} kernels {t_heavy:.1f} us; the small chain: {len(light)} kernels "
          f"{t_light:.1f} us; idle between launches {idle:.1f} us")
    med = sorted(us[i] for i in light)[len(light) // 2] if light else 0.0
    for fused in (16, 8, 4):
        if fused < len(light):
            t = t_heavy + fused * med + idle * (len(heavy) + fused) / per
            print(f"  projected, the small chain as {fused} launches of {med:.1f} us: {t:.1f} us = {t / floor_us:.2f}x "
                  f"the floor; weight kernels at copy bandwidth too: {floor_us + fused * med:.1f} us = "
                  f"{(floor_us + fused * med) / floor_us:.2f}x")


def head_check(model, batch: int) -> str:
    """The LM head as held: bytes per step against an fp32-held copy, and its logits against the fp32-weight product."""
    import torch.nn.functional as F
    w = model.head.qweight.data
    x = torch.randn(batch, model.args.dim, device=w.device)
    with torch.inference_mode():
        got = model.head(x).float()
    want, exact = F.linear(x, w.float()), F.linear(x.double(), w.double())
    rel = ((got - want).abs().max() / want.abs().max()).item()
    err, err32 = ((t.double() - exact).abs().max().item() / exact.abs().max().item() for t in (got, want))
    return (f"LM head held {str(w.dtype).split('.')[-1]}: {w.nbytes / 1e6:.1f} MB read per step (an fp32-held copy: "
            f"{w.numel() * 4 / 1e6:.1f} MB); B={batch} logits vs the fp32-weight product: max rel diff {rel:.2e} "
            f"(vs the exact product: {err:.2e}, the fp32-weight product's own {err32:.2e})")


def depth_point(cfg: str, layers: int, batches: list[int], steps: int, device: str, experts: int | None,
                profile: list[int], bw: float, unfused: str | None = None) -> dict:
    """Every measurement of one depth: per batch the step's time (graph replay on CUDA, eager on CPU), kernels per
    step, graph nodes, the stored floor (rest and per layer) and the held bytes the old floor counted."""
    from dsv4_model.synthetic import random_model
    torch.manual_seed(0)
    args = depth_args(cfg, layers, experts)
    model = random_model(args, device=device)
    cuda = device == "cuda"
    out = {}
    for b in batches:
        try:
            out[b] = _depth_batch(cfg, layers, model, args, b, steps, cuda, profile, bw, head=b == batches[0],
                                  unfused=unfused)
        except Exception as e:  # noqa: BLE001 - one batch that fails (memory, a kernel's limit) must not lose the rest
            why = str(e).splitlines()[0][:300] if str(e) else ""
            print(f"  {cfg} depth {layers} B={b}: FAILED {type(e).__name__}: {why}", flush=True)
        if cuda:
            torch.cuda.empty_cache()
    return out


def _depth_batch(cfg: str, layers: int, model, args, b: int, steps: int, cuda: bool, profile: list[int], bw: float,
                 head: bool, unfused: str | None = None) -> dict:
    """One batch of `depth_point` (`head`: also check the LM head's bytes and logits; `unfused`: the fused small-chain
    ops replaced by the launches they fused, `fuse_ab.unfuse`, before the capture: "all", or a comma list of slots)."""
    dec, runner = _setup(model, b)
    if unfused:
        from fuse_ab import unfuse
        unfuse(model, None if unfused == "all" else unfused.split(","))
    runner.step(b)                                          # captures the bucket's graph (CUDA)
    ms = _ms(lambda: runner.step(b), steps)
    kern = kernels_per_step(lambda: runner.step(b), cuda, reps=5 if cuda else 1)
    nodes = graph_nodes(lambda: runner.body(b)) if cuda else None
    hits = expert_hits(model, runner, b, steps=3 if cuda else 1)
    rest, per = stored_floor(args, b, hits, state_bytes(dec))
    row = dict(ms=ms, kernels=kern, nodes=nodes, rest=rest, layers=per, held=bytes_per_step(model, dec, b), hits=hits)
    print(f"  {cfg} depth {layers} B={b}: {ms:.3f} ms, {kern:.0f} {'kernels' if cuda else 'ops'}, nodes "
          f"{dict(nodes) if nodes else 'n/a'}, experts hit per layer {[round(h, 1) for h in hits]}", flush=True)
    if head:
        print("  " + head_check(model, b), flush=True)
    for L in profile:
        if L < layers:
            layer_profile(model, dec, b, L, bw, per[L], cuda, reps=20 if cuda else 2)
    return row


def depth_table(cfg: str, lo: int, hi: int, shallow: dict, deep: dict, bw: float, full: int = 43) -> None:
    """Per layer = (deep - shallow) / (hi - lo); rest = shallow - lo x per layer; a `full`-layer step projected."""
    cuda = bw > 0 and torch.cuda.is_available()
    unit = "kern" if cuda else "ops"
    print(f"{cfg}: depths {lo} and {hi}; per layer = their difference / {hi - lo}; floor = stored bytes / "
          f"{bw / 1e9:.0f} GB/s copy bandwidth; a {full}-layer step = rest + {full} x per layer")
    print(f"{'B':>3} {'ms@' + str(lo):>8} {'ms@' + str(hi):>8} {'layer ms':>9} {'floor ms':>9} {'x floor':>7} "
          f"{unit + '/layer':>11} {'nodes/layer':>11} {'stored MB':>9} {'held MB':>8} {'rest ms':>8} {'rest fl':>8} "
          f"{str(full) + 'L ms':>8} {str(full) + 'L fl':>8} {'x floor':>7}")
    for b in [b for b in deep if b in shallow]:
        s, d = shallow[b], deep[b]
        k = hi - lo
        per_ms = (d["ms"] - s["ms"]) / k
        per_b = sum(d["layers"][lo:hi]) / k
        per_fl = per_b / bw * 1e3
        held = (d["held"] - s["held"]) / k
        rest_ms = s["ms"] - lo * per_ms
        rest_fl = s["rest"] / bw * 1e3
        kern = (d["kernels"] - s["kernels"]) / k
        nodes = (sum(d["nodes"].values()) - sum(s["nodes"].values())) / k if d["nodes"] and s["nodes"] else float("nan")
        full_ms, full_fl = rest_ms + full * per_ms, rest_fl + full * per_fl
        print(f"{b:>3} {s['ms']:8.3f} {d['ms']:8.3f} {per_ms:9.4f} {per_fl:9.4f} {per_ms / per_fl:7.2f} {kern:11.1f} "
              f"{nodes:11.1f} {per_b / 1e6:9.1f} {held / 1e6:8.1f} {rest_ms:8.3f} {rest_fl:8.3f} {full_ms:8.3f} "
              f"{full_fl:8.3f} {full_ms / full_fl:7.2f}")


def depth_mode(a) -> int:
    depths = sorted(int(x) for x in a.depths.split(","))
    if len(depths) != 2 or depths[0] < 1 or depths[0] == depths[1]:
        print(f"benchmarks/decode.py: --depths takes two different depths >= 1 (e.g. 2,8), found {a.depths!r}",
              file=sys.stderr)
        return 2
    if a.unfused not in (None, "all"):
        from fuse_ab import FUSED_SLOTS
        unknown = sorted(set(a.unfused.split(",")) - set(FUSED_SLOTS))
        if unknown:
            print(f"benchmarks/decode.py: --unfused {a.unfused!r}: no fused op {unknown}; expected 'all' or some of "
                  f"{', '.join(FUSED_SLOTS)}", file=sys.stderr)
            return 2
    batches = [int(x) for x in a.batches.split(",")]
    bw = copy_bandwidth(1 << 30 if a.device == "cuda" else 1 << 26, a.device)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "CPU (times mean nothing: a crash test)"
    print(f"{name}, torch {torch.__version__}; copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)
    for cfg in a.configs.split(","):
        prof = [int(x) for x in a.layer_profile.split(",") if x]
        points = {L: depth_point(cfg, L, batches, a.steps, a.device, a.experts, prof if L == depths[1] else [], bw,
                                 a.unfused) for L in depths}
        depth_table(cfg, depths[0], depths[1], points[depths[0]], points[depths[1]], bw)
    return 0


def table_draft(table: torch.Tensor, right: int):
    """A device-side draft at a set acceptance, for timing: each row's own greedy stream `table` [B, T] (token at
    each position, what the main model emits), the first `right` of the k drafts taken from it and the others off
    by one token id (never accepted); q one-hot (a deterministic draft). Fixed shapes, no host read: it captures."""
    def draft(runner, n):
        k, V = runner.k, runner.dec.model.args.vocab_size
        pos = runner.dec.pos[:n]
        j = torch.arange(k, device=pos.device)
        d = table[:n].gather(1, (pos[:, None] + 1 + j).clamp(max=table.shape[1] - 1))
        d = torch.where(j < right, d, (d + 1) % V)
        return d, torch.zeros(n, k, V, device=d.device).scatter_(2, d[..., None], 1.0)
    return draft


def _spec_model(cfg: str, device: str):
    import dsv4_model
    from dsv4_model.synthetic import flash_args, random_model
    if cfg == "tiny":
        return dsv4_model.load("tiny", device=device, max_seq_len=512)
    return random_model(flash_args(3), device=device, mtp=True)


def speculative_rows(cfg: str, model, batch: int, k: int, steps: int, device: str, verify: str = "positions",
                     phase=lambda what: None) -> list[dict]:
    """Plain and speculative graph steps (eager on CPU) from the same greedy prompts: ms per step, emitted tokens
    per step (measured: the mean count over `steps` more steps) and ms per emitted token. `verify`: the speculative
    step's verify mode; "batched" runs both steps over the row-invariant kernel table (`rowwise=True`), the plain
    row too, so each pair compares one table. `phase(what)` is told each part as it starts."""
    from dsv4_model.decode import GraphSafeDecoder
    from dsv4_model.runner import Runner
    from dsv4_model.sampler import Sampler
    from dsv4_model.speculative import SpeculativeRunner
    V, graphs = model.args.vocab_size, device == "cuda"
    prompts = [[0, 5 + r, 6 + r] for r in range(batch)]

    def runner(cls=Runner, **kw):
        r = cls(GraphSafeDecoder(model, batch=batch, kernels=True, rowwise=verify == "batched"),
                Sampler(batch, V, device=device), buckets=(batch,), graphs=graphs, log=lambda s: None, **kw)
        for i, p in enumerate(prompts):
            r.start(i, p)
        return r
    T = (2 * steps + 1) * (k + 1) + 16               # the warm-up, timed and counted steps at acceptance 1
    phase(f"the plain greedy stream: {T} steps")
    plain = runner()
    table = torch.zeros(batch, T + 1, dtype=torch.long, device=device)
    table[:, 0] = 0
    for t in range(1, T + 1):                        # each row's greedy stream: the tokens the draft will meet
        plain.step(batch)
        table[:, t] = plain.dec.tokens[:batch]
    phase("the plain step")
    plain = runner()
    plain.step(batch)                                # captures the bucket's graph: not a step's time
    rows = [{"draft": "plain", "ms": _ms(lambda: plain.step(batch), steps), "tokens": 1.0}]
    del plain
    drafts = [("acceptance 0", table_draft(table, 0)), ("acceptance 0.5", table_draft(table, k // 2)),
              ("acceptance 1", table_draft(table, k)), ("MTP block", None)]
    for name, draft in drafts:
        phase(f"the speculative step, draft {name}")
        spec = runner(SpeculativeRunner, k=k, generator=torch.Generator(device=device).manual_seed(0), draft=draft,
                      verify=verify)
        spec.step(batch)                             # the capture (and the first row's JIT), left out as above
        ms = _ms(lambda: spec.step(batch), steps)
        counts = [spec.step(batch)[1].float().mean().item() for _ in range(steps)]   # host reads, untimed
        rows.append({"draft": name, "ms": ms, "tokens": sum(counts) / len(counts)})
        del spec
    for r in rows:
        r.update(config=cfg, batch=batch, k=k, verify=verify, per_token=r["ms"] / r["tokens"],
                 speedup=rows[0]["ms"] / (r["ms"] / r["tokens"]))
    return rows


def speculative_mode(a) -> int:
    """Each row is printed (and flushed) as soon as its config, batch and verify are measured, and each phase's
    time goes to stderr: a run cut off by a time limit keeps what it measured and says where the time went."""
    device = a.device
    if device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/decode.py: --device cuda and no CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def phase(what: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {what}", file=sys.stderr, flush=True)
    print(f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU (eager; times mean nothing)'}, "
          f"torch {torch.__version__}; speculative step, k = {a.speculative} drafts")
    print(f"{'config':7} {'B':>2} {'verify':9} {'draft':15} {'ms/step':>9} {'tokens/step':>11} {'ms/token':>9} "
          f"{'vs plain':>8}", flush=True)
    for cfg in a.configs.split(","):
        phase(f"{cfg}: building the model")
        model = _spec_model(cfg, device)
        for b in (int(x) for x in a.batches.split(",")):
            for verify in a.verify.split(","):
                for r in speculative_rows(cfg, model, b, a.speculative, a.steps, device, verify,
                                          lambda what: phase(f"{cfg} B={b} {verify}: {what}")):
                    print(f"{r['config']:7} {r['batch']:>2} {r['verify']:9} {r['draft']:15} {r['ms']:9.3f} "
                          f"{r['tokens']:11.2f} {r['per_token']:9.3f} {r['speedup']:8.2f}", flush=True)
        del model
    phase("done")
    return 0


def bench(name: str, model, batch: int, steps: int, compile_: bool, bw: float, profile_: bool = False,
          deadline: float = float("inf")) -> dict:
    dec, runner = _setup(model, batch)
    row = {"config": name, "batch": batch}
    row["eager"] = _ms(lambda: runner.body(batch), steps)
    runner.step(batch)                                          # captures the bucket's graph
    row["graph"] = _ms(lambda: runner.step(batch), steps)
    row["floor"] = bytes_per_step(model, dec, batch) / bw * 1e3
    if profile_:
        print(f"== {name} batch {batch}: graph replay, top kernels")
        profile_graph(runner, batch)
        profile_parts(dec, runner, batch)
    del dec, runner
    torch.cuda.empty_cache()
    row["compile"], row["note"] = compile_row(name, batch, steps, deadline) if compile_ else (float("nan"), "")
    return row


def measure(a) -> tuple[float, list[dict]]:
    """The table's rows on this process (or this rank's shard under a process group of more than one rank)."""
    bw = copy_bandwidth()
    rows = []
    compile_ = not a.no_compile and a.nproc == 1          # the child process is a single rank
    only = set(a.compile_rows.split(",")) if a.compile_rows else None
    deadline = time.perf_counter() + a.compile_budget
    for cfg in a.configs.split(","):
        model = _model(cfg)
        for b in (int(x) for x in a.batches.split(",")):
            want = compile_ and (only is None or f"{cfg}:{b}" in only)
            rows.append(bench(cfg, model, b, a.steps, want, bw, a.profile, deadline))
        del model
        torch.cuda.empty_cache()
    return bw, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,flash")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--nproc", type=int, default=1, help="tensor-parallel ranks, one GPU each (NCCL); rank 0's times")
    ap.add_argument("--profile", action="store_true", help="print each graph replay's top CUDA kernels")
    ap.add_argument("--compile-rows", default="", help="compile only these CONFIG:BATCH rows (default: all)")
    ap.add_argument("--compile-budget", type=float, default=3600, help="seconds for all torch.compile children")
    ap.add_argument("--compile-child", metavar="CFG:B:KERNELS", help=argparse.SUPPRESS)
    ap.add_argument("--depths", default="", help="two depths, e.g. 2,8: the per-layer table against the stored floor")
    ap.add_argument("--experts", type=int, default=None, help="routed experts per layer in depth mode (default: the "
                    "config's; a step reads only those it hits)")
    ap.add_argument("--layer-profile", default="", metavar="L,..",
                    help="depth mode: these layers' kernels in launch order with their times, and fusion projections "
                         "(at the deeper depth)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: depth mode only (a crash test)")
    ap.add_argument("--unfused", nargs="?", const="all", default=None, metavar="SLOT,..",
                    help="depth mode: the fused small-chain ops (issue 37) replaced by the launches they fused "
                         "(benchmarks/fuse_ab.py), for the A/B: all of them, or these slots (e.g. attend_ring)")
    ap.add_argument("--verify", default="positions,batched",
                    help="speculative mode: the verify modes timed (positions: k+1 one-position forwards; batched: one "
                         "forward over the k+1 positions, each with its plain step over the same kernel table)")
    ap.add_argument("--speculative", type=int, default=0, metavar="K",
                    help="time the speculative step with K drafts against the plain step (issue 41)")
    ap.add_argument("--bf16-shape", default=None, metavar="BB=bk,waves,pairs,warps;..",
                    help="the bf16-weight GEMV's launch shape by x rows per program (dsv4_kernels.bf16_gemv."
                         "triton_kernel.SHAPES) in this process, e.g. what benchmarks/bf16_sweep.py --best found")
    ap.add_argument("--knob", action="append", default=[], metavar="MODULE.NAME=VALUE", help=ab_knobs.HELP)
    a = ap.parse_args(argv)
    if not ab_knobs.apply(a.knob, "benchmarks/decode.py"):
        return 2
    if a.bf16_shape:
        from dsv4_kernels.bf16_gemv import triton_kernel as bf16_tk
        for part in filter(None, a.bf16_shape.split(";")):
            bb, _, vals = part.partition("=")
            bf16_tk.SHAPES[int(bb)] = tuple(int(v) for v in vals.split(","))
        print(f"bf16 GEMV launch shapes (BB -> bk, waves, pairs, warps): {bf16_tk.SHAPES}")
    if a.speculative:
        return speculative_mode(a)
    if a.depths:
        if a.device == "cuda" and not torch.cuda.is_available():
            print("benchmarks/decode.py: --device cuda and no CUDA GPU (--device cpu runs the depth mode's code on "
                  "small shapes)", file=sys.stderr)
            return 2
        return depth_mode(a)
    if a.device == "cpu":
        print("benchmarks/decode.py: --device cpu runs the depth mode only (pass --depths)", file=sys.stderr)
        return 2
    if a.compile_child:
        cfg, b, k = a.compile_child.split(":")
        print(json.dumps(compile_child(cfg, int(b), a.steps, k == "1")))
        return 0
    if torch.cuda.device_count() < a.nproc:
        print(f"benchmarks/decode.py: needs {a.nproc} CUDA GPU(s), found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    if a.nproc > 1:                       # every rank runs the same steps on its shard; collectives in the graph
        from graphcheck.runtime.distributed import launch
        bw, rows = launch(measure, a.nproc, a, backend="nccl", timeout=3600)[0]
    else:
        bw, rows = measure(a)
    print(f"{torch.cuda.get_device_name()} x{a.nproc}, torch {torch.__version__}; copy bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'config':7} {'B':>2} {'eager ms':>9} {'graph ms':>9} {'compile ms':>10} {'floor ms':>9} "
          f"{'eager/graph':>11} {'compile/graph':>13} {'graph/floor':>11}")
    # compile/graph > 1: the graph replay is faster than reduce-overhead; "ref": compiled with the references
    for r in rows:
        print(f"{r['config']:7} {r['batch']:>2} {r['eager']:9.3f} {r['graph']:9.3f} {r['compile']:10.3f} {r['floor']:9.3f} "
              f"{r['eager'] / r['graph']:11.2f} {r['compile'] / r['graph']:13.2f} {r['graph'] / r['floor']:11.2f} {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

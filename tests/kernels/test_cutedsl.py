"""The CuTeDSL kernels (`kernels/*/cutedsl_kernel.py`) against their PyTorch references.

Compiling needs no GPU: the CPU tests build every kernel for sm_90 at odd shapes and check what the host side
refuses. Running needs an H100/H200 (cuda-marked): parity at odd shapes with poisoned outputs, the clamp order, and a
clean capture. Without nvidia-cutlass-dsl (CPU CI) all of it skips; `test_cutedsl_skips_cleanly` checks that the
package and its selection still work then.
"""
import importlib.util

import pytest
import torch

import dsv4_kernels as kernels
from dsv4_kernels.indexer.reference import gather_picks_ref
from dsv4_kernels.moe_gemv.reference import E2M1, random_weight, routed_experts_ref

HAVE_CUTE = importlib.util.find_spec("cutlass") is not None
cute_only = pytest.mark.skipif(not HAVE_CUTE, reason="nvidia-cutlass-dsl is not installed (the gpu extra)")
cuda = pytest.mark.cuda


def test_cutedsl_skips_cleanly():
    """Without CuTeDSL or a GPU the default kernels stay selected and asking for CuTeDSL says why."""
    from dsv4_kernels._select import CUTEDSL, CUTEDSL_BY_DEFAULT
    assert set(CUTEDSL_BY_DEFAULT) <= set(CUTEDSL)
    assert kernels.compiled("gather_picks", "cpu") is gather_picks_ref
    if torch.cuda.is_available() and HAVE_CUTE:
        pytest.skip("CuTeDSL can run here")
    with pytest.raises(RuntimeError, match=r"compiled\('routed_experts', .*backend='cutedsl'\): cannot run: "):
        kernels.compiled("routed_experts", "cuda" if torch.cuda.is_available() else "cpu", (4, 64, 32, 2),
                         backend="cutedsl")
    with pytest.raises(KeyError, match="has no CuTeDSL kernel"):
        kernels.compiled("rms_norm", "cuda", backend="cutedsl")


@cute_only
def test_e2m1_decode_is_the_table():
    from dsv4_kernels.moe_gemv.cutedsl_kernel import _e2m1
    assert [_e2m1(c).value for c in range(16)] == list(E2M1)


_COMPILE_ALL = """
import torch
from dsv4_kernels.indexer import cutedsl_kernel as gk
from dsv4_kernels.moe_gemv import cutedsl_kernel as mk
g = gk.CompiledKernels().prepare([(3, 37, 5, 6, torch.float32), (2, 40, 7, 10, torch.bfloat16)])
m = mk.CompiledKernels(20, 96, 160, 6).prepare([3], dtypes=(torch.bfloat16, torch.float32), sims=(False, True),
                                               clamps=(True, False))
print(len(g.compiled), len(m.compiled))
"""


@cute_only
def test_kernels_compile_for_sm90_at_odd_shapes(tmp_path):
    """Every variant builds for the H100/H200 (sm_90a; without a GPU CuTeDSL would target its default, sm_100),
    checked on the PTX it keeps. Kept files are named by argument types and shapes only: one per gather key, a
    gate/up per (dtype, act-sim) (the clamp is a constant: its two builds share a name) and a down per dtype."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", _COMPILE_ALL], env=env, capture_output=True, text=True, timeout=600,
                       cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["2", "8"], r.stderr[-2000:]
    ptx = sorted(tmp_path.glob("*.ptx"))
    names = [p.name.split("_Fake")[0] for p in ptx]
    assert (names.count("cutlass__gather"), names.count("cutlass__gate_up"), names.count("cutlass__down")) == (2, 4, 2), names
    assert all(".target sm_90a" in p.read_text() for p in ptx)


@cute_only
def test_unprepared_shapes_are_an_error_not_a_compile():
    """A call whose bucket was not prepared must never compile inside a (captured) step."""
    from dsv4_kernels.indexer import cutedsl_kernel as gk
    from dsv4_kernels.moe_gemv import cutedsl_kernel as mk
    g = gk.CompiledKernels().prepare([(2, 40, 7, 10, torch.bfloat16)])
    with pytest.raises(KeyError, match=r"no kernel prepared for \(B, N, k, D, dtype\) = \(3, 40, 7, 10"):
        g(torch.zeros(3, 40, 10, dtype=torch.bfloat16), torch.zeros(3, 7, dtype=torch.long))
    assert len(g.compiled) == 1
    m = mk.CompiledKernels(4, 64, 32, 2)
    w1, w3, w2 = (random_weight("mxfp4", 32, 64, 4), random_weight("mxfp4", 32, 64, 4), random_weight("mxfp4", 64, 32, 4))
    with pytest.raises(KeyError, match=r"no kernel prepared for \(tokens, dtype, act_sim, clamp\) = \(1, torch.bfloat16"):
        m(torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2), w1, w3, w2, 1.0)
    with pytest.raises(ValueError, match=r"built for dim 64, 4 experts, inter 32, top-2; found x \(1, 32\)"):
        m(torch.zeros(1, 32, dtype=torch.bfloat16), torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2),
          random_weight("mxfp4", 32, 32, 4), random_weight("mxfp4", 32, 32, 4), random_weight("mxfp4", 32, 32, 4), 1.0)
    with pytest.raises(ValueError, match="multiples of 32"):
        mk.CompiledKernels(4, 64, 48, 2)
    with pytest.raises(TypeError, match="expected int64 picks"):
        gk.CompiledKernels().prepare([(2, 40, 7, 10, torch.bfloat16)])(
            torch.zeros(2, 40, 10, dtype=torch.bfloat16), torch.zeros(2, 7, dtype=torch.int32))


# ---------------------------------------------------------------------------------------------- GPU only
def _poison(nbytes: int) -> None:
    """Fill freed allocator blocks with NaN so an output element the kernel forgets to write is visible."""
    junk = torch.full((nbytes // 4 + 4096,), float("nan"), device="cuda")
    del junk


def _sim(h, fmt, s):
    """A stand-in activation simulation (rounds to quarters), as in test_kernels.py."""
    return h.float().mul(4).round().div(4).to(h.dtype)


def _routed(T, E, k, dim, inter, dt, limit, sim, seed, xscale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1, w3 = (random_weight("mxfp4", inter, dim, E, g, "cuda") for _ in range(2))
    w2 = random_weight("mxfp4", dim, inter, E, g, "cuda")
    x = (torch.randn(T, dim, device="cuda", generator=g) * xscale).to(dt)
    idx = torch.rand(T, E, device="cuda", generator=g).argsort(-1)[:, :k]
    wts = torch.rand(T, k, device="cuda", generator=g)
    return x, idx, wts, w1, w3, w2


@cuda
@cute_only
@pytest.mark.parametrize("T,E,k,dim,inter", [(1, 16, 6, 256, 512), (3, 20, 6, 96, 160), (8, 12, 6, 512, 1056),
                                             (5, 4, 2, 64, 32), (32, 9, 3, 384, 640)])
def test_routed_experts_cutedsl_parity(T, E, k, dim, inter):
    from dsv4_kernels.moe_gemv.cutedsl_kernel import CompiledKernels
    ck = CompiledKernels(E, dim, inter, k).prepare([T], dtypes=(torch.bfloat16, torch.float32), sims=(False, True),
                                                   clamps=(True, False))
    for trial, (dt, limit, sim) in enumerate([(torch.bfloat16, 10.0, None), (torch.bfloat16, None, None),
                                              (torch.float32, 0.5, None), (torch.bfloat16, 10.0, _sim)]):
        x, idx, wts, w1, w3, w2 = _routed(T, E, k, dim, inter, dt, limit, sim, 100 * T + trial)
        _poison(T * k * (dim + inter) * 4)
        got = ck(x, idx, wts, w1, w3, w2, limit, sim)
        ref = routed_experts_ref(x, idx, wts, w1, w3, w2, limit, sim)
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-3 * ref.abs().max().item())


def _old_clamp_order_ref(x, idx, wts, w1, w3, w2, limit):
    """The seed's bug: silu first, then the clamp (min(silu(g), L)) instead of silu(min(g, L))."""
    import torch.nn.functional as F

    from dsv4_kernels.moe_gemv import reference as R
    orig = R.swiglu
    R.swiglu = lambda g, u, lim: F.silu(g.float()).clamp(max=lim) * u.float().clamp(-lim, lim)
    try:
        return R.routed_experts_ref(x, idx, wts, w1, w3, w2, limit)
    finally:
        R.swiglu = orig


@cuda
@cute_only
def test_routed_experts_cutedsl_clamps_the_gate_before_silu():
    """Gate outputs far above the limit: silu(min(g, L)) = L*sigmoid(L) there, min(silu(g), L) = L. A kernel with the
    old order matches the second and fails."""
    from dsv4_kernels.moe_gemv.cutedsl_kernel import CompiledKernels
    T, E, k, dim, inter, L = 4, 8, 2, 256, 128, 0.5
    ck = CompiledKernels(E, dim, inter, k).prepare([T], dtypes=(torch.float32,), sims=(False,), clamps=(True,))
    x, idx, wts, w1, w3, w2 = _routed(T, E, k, dim, inter, torch.float32, L, None, 7, xscale=40.0)
    got = ck(x, idx, wts, w1, w3, w2, L)
    ref = routed_experts_ref(x, idx, wts, w1, w3, w2, L)
    old = _old_clamp_order_ref(x, idx, wts, w1, w3, w2, L)
    tol = dict(rtol=2e-2, atol=2e-3 * ref.abs().max().item())
    assert not torch.allclose(old, ref, **tol), "the data does not separate the two clamp orders"
    torch.testing.assert_close(got, ref, **tol)


@cuda
@cute_only
@pytest.mark.parametrize("B,N,k,D,dt", [(3, 37, 5, 6, torch.float32), (2, 40, 7, 10, torch.bfloat16),
                                        (8, 1024, 512, 512, torch.bfloat16), (1, 9, 9, 130, torch.bfloat16),
                                        (32, 256, 64, 512, torch.bfloat16)])
def test_gather_picks_cutedsl_is_bitwise_the_reference(B, N, k, D, dt):
    from dsv4_kernels.indexer.cutedsl_kernel import CompiledKernels
    ck = CompiledKernels().prepare([(B, N, k, D, dt)])
    g = torch.Generator(device="cuda").manual_seed(B * N + k)
    ent = torch.randn(B, N, D, device="cuda", generator=g).to(dt)
    ent.view(-1)[::7] = float("nan")                  # moved as bits: NaNs (and their payloads) included
    sel = torch.rand(B, N, device="cuda", generator=g).argsort(-1)[:, :k]
    sel[:, -1] = N - 1                                # the last row is reachable
    _poison(B * k * D * 4)
    got = ck(ent, sel)
    want = gather_picks_ref(ent, sel)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@cuda
@cute_only
@pytest.mark.parametrize("factory", ["routed_experts_cutedsl", "gather_picks_cutedsl"])
def test_cutedsl_targets_capture_clean(factory):
    from dsv4_kernels import targets
    from graphcheck.runtime.capture import capture_test
    assert capture_test(getattr(targets, factory)(), steps=5, device="cuda") == []

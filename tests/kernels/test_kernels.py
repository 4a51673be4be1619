"""kernels/: references on every machine; on a GPU, parity with poisoned outputs, capture replay, sanitizer-safe errors."""
import os

import pytest
import torch

import dsv4_kernels as kernels
from dsv4_model.quant import dequant_nvfp4_weight, quantize_nvfp4_weight, unpack_e2m1
from graphcheck.runtime.capture import capture_test
from dsv4_kernels import targets
from dsv4_kernels.compressor_reduce.reference import compressor_reduce_ref
from dsv4_kernels.nvfp4_gemv import nvfp4_gemv
from dsv4_kernels.nvfp4_gemv.reference import nvfp4_gemv_ref
from dsv4_kernels.nvfp4_kvcache import dequantize_nvfp4_kvcache
from dsv4_kernels.nvfp4_kvcache.reference import dequantize_nvfp4_kvcache_ref

cuda = pytest.mark.cuda


def test_kernels_skip_cleanly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    for name in ("compressor_reduce", "nvfp4_kvcache", "fused_swiglu", "nvfp4_gemv"):
        ok, reason = kernels.available(name)
        assert not ok and reason == "no CUDA device"


def test_kernel_mode_without_gpu_is_a_clear_error(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    monkeypatch.setenv("GRAPHCHECK_KERNELS", "kernel")
    x = torch.randn(2, 8, 4)
    # CPU tensors always take the reference: nothing to launch a kernel on
    assert torch.equal(kernels.compressor_reduce(x, x, x[0]), compressor_reduce_ref(x, x, x[0]))


def test_kvcache_reference_matches_the_weight_dequant():
    """Same NVFP4 encoding on both paths: KV rows dequantised = weight rows dequantised (per-row global scale 1)."""
    w = torch.randn(8, 64)
    q = quantize_nvfp4_weight(w)
    s2 = q["weight_scale_2"].float()
    kv = dequantize_nvfp4_kvcache_ref(q["weight"], q["weight_scale"], s2.expand(8).contiguous(), 8, 64, torch.float32)
    assert torch.equal(kv, dequant_nvfp4_weight(q["weight"], q["weight_scale"], q["weight_scale_2"], torch.float32))


def test_gemv_reference():
    w = torch.randn(32, 64)
    q = quantize_nvfp4_weight(w)
    x = torch.randn(3, 64)
    y = nvfp4_gemv(x, q["weight"], q["weight_scale"], q["weight_scale_2"])
    assert torch.allclose(y, x @ dequant_nvfp4_weight(q["weight"], q["weight_scale"], q["weight_scale_2"]).T, atol=1e-4)
    with pytest.raises(ValueError, match="features"):
        nvfp4_gemv(torch.randn(3, 63), q["weight"], q["weight_scale"], q["weight_scale_2"])


@pytest.mark.parametrize("factory", ["compressor_reduce_csa", "compressor_reduce_hca", "nvfp4_kvcache", "fused_swiglu", "nvfp4_gemv"])
def test_kernel_targets_capture_clean(factory):
    """On CPU this is the emulation over the references; on a GPU, real capture of the kernels."""
    t = getattr(targets, factory)()
    assert capture_test(t, steps=2) == []


# ---------------------------------------------------------------------------------------------- GPU only
def _poison(nbytes: int) -> None:
    """Fill freed allocator blocks with NaN so an output element the kernel forgets to write is visible."""
    junk = torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda")
    del junk


def _force(monkeypatch, mode: str):
    monkeypatch.setenv("GRAPHCHECK_KERNELS", mode)


@cuda
@pytest.mark.parametrize("n,slots,d", [(1, 8, 512), (37, 8, 128), (5, 128, 512), (64, 128, 64)])
def test_compressor_reduce_parity(monkeypatch, n, slots, d):
    _force(monkeypatch, "kernel")
    for trial in range(3):
        kv, gate, bias = (torch.randn(n, slots, d, device="cuda") for _ in range(2)), None, None
        kv, gate = list(kv)
        bias = torch.randn(slots, d, device="cuda")
        _poison(n * d * 4)
        got = kernels.compressor_reduce(kv, gate, bias)
        ref = compressor_reduce_ref(kv, gate, bias)
        assert torch.isfinite(got).all()
        rel = ((got - ref).abs() / ref.abs().clamp_min(1e-6)).max().item()
        assert rel <= 1e-5 or (got - ref).abs().max().item() <= 1e-6, rel
        wrong = (torch.softmax(gate, -2) * (kv + bias)).sum(-2)
        assert not torch.allclose(got, wrong, atol=1e-3)      # the bias-on-KV variant is detectably different


@cuda
@pytest.mark.parametrize("M,N", [(1, 16), (7, 512), (300, 128), (64, 4096)])
def test_kvcache_parity(monkeypatch, M, N):
    _force(monkeypatch, "kernel")
    for dt in (torch.float32, torch.bfloat16):
        fp4 = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8, device="cuda")
        sf = (torch.rand(M, N // 16, device="cuda") * 8).to(torch.float8_e4m3fn)
        gs = torch.rand(M, device="cuda") + 0.1
        _poison(M * N * 4)
        got = dequantize_nvfp4_kvcache(fp4, sf, gs, M, N, dt)
        ref = dequantize_nvfp4_kvcache_ref(fp4, sf, gs, M, N, dt)
        assert torch.equal(got, ref)


@cuda
def test_kvcache_bad_shapes_raise_before_launch(monkeypatch):
    _force(monkeypatch, "kernel")
    M, N = 8, 256
    fp4 = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8, device="cuda")
    sf = torch.rand(M, N // 16, device="cuda").to(torch.float8_e4m3fn)
    gs = torch.ones(M, device="cuda")
    with pytest.raises(ValueError, match="sf.numel"):
        dequantize_nvfp4_kvcache(fp4, sf[:, :3].contiguous(), gs, M, N)
    with pytest.raises(ValueError, match="contiguous"):
        dequantize_nvfp4_kvcache(fp4, sf.t().contiguous().t(), gs, M, N)
    with pytest.raises(ValueError, match="fp4.numel"):
        dequantize_nvfp4_kvcache(fp4[:4], sf, gs, M, N)
    with pytest.raises(ValueError, match="is on cpu"):
        dequantize_nvfp4_kvcache(fp4, sf, gs.cpu(), M, N)
    torch.cuda.synchronize()


@cuda
@pytest.mark.parametrize("layout", ["split", "interleaved"])
@pytest.mark.parametrize("rows,inter", [(1, 256), (13, 2048), (64, 768)])
def test_fused_swiglu_parity(monkeypatch, layout, rows, inter):
    ok, why = kernels.available("fused_swiglu")
    if not ok:
        pytest.skip(why)
    from dsv4_kernels.fused_swiglu.reference import fused_swiglu_ref, split_gate_up
    _force(monkeypatch, "kernel")
    h = (torch.randn(rows, 2 * inter, device="cuda") * 12).bfloat16()
    _poison(rows * inter * 2)
    got = kernels.fused_swiglu(h, 10.0, layout)
    ref = fused_swiglu_ref(h, 10.0, layout)
    assert torch.isfinite(got.float()).all()
    torch.testing.assert_close(got, ref, atol=1e-2, rtol=1.6e-2)
    g, u = split_gate_up(h.float(), layout)
    wrong = (torch.nn.functional.silu(g).clamp(max=10.0) * u.clamp(-10, 10)).bfloat16()
    assert not torch.allclose(got.float(), wrong.float(), atol=1e-1)


@cuda
@pytest.mark.parametrize("batch,n,k", [(1, 256, 512), (3, 1000, 2048), (8, 4096, 4096)])
def test_nvfp4_gemv_parity(monkeypatch, batch, n, k):
    ok, why = kernels.available("nvfp4_gemv")
    if not ok:
        pytest.skip(why)
    _force(monkeypatch, "kernel")
    q = {name: t.cuda() for name, t in quantize_nvfp4_weight(torch.randn(n, k)).items()}
    x = torch.randn(batch, k, device="cuda").bfloat16()
    _poison(batch * n * 2)
    got = nvfp4_gemv(x, q["weight"], q["weight_scale"], q["weight_scale_2"])
    ref = nvfp4_gemv_ref(x, q["weight"], q["weight_scale"], q["weight_scale_2"])
    torch.testing.assert_close(got.float(), ref.float(), atol=2e-2 * k ** 0.5, rtol=2e-2)

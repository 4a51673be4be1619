"""CuTeDSL targets with one planted hazard each (and a clean one), for graphcheck's CuTeDSL tests and the GPU script.

Imports CuTeDSL: only tests that `pytest.importorskip("cutlass.cute")` load it. One tiny kernel, y = a * x + 1, on
CUDA; without a device the step runs the same arithmetic in torch where the kernel would launch (a compile needs no
GPU, so the compile hazards are real on CPU too). Lines the tests expect findings on carry a `# <- name` marker.
"""
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_stream

from graphcheck import Target
from planted import marked_line

N = 256
THREADS = 128


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


@cute.kernel
def _axpb_kernel(x: cute.Tensor, y: cute.Tensor, a: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    y[i] = x[i] * a + cutlass.Float32(1.0)


@cute.jit
def axpb(x: cute.Tensor, y: cute.Tensor, a: cutlass.Float32, stream: cuda.CUstream):
    _axpb_kernel(x, y, a).launch(grid=[x.shape[0] // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)


@cute.jit
def axpb_no_stream(x: cute.Tensor, y: cute.Tensor, a: cutlass.Float32):
    _axpb_kernel(x, y, a).launch(grid=[x.shape[0] // THREADS, 1, 1], block=[THREADS, 1, 1])


def _fake(n: int):
    return make_fake_compact_tensor(cutlass.Float32, (n,))


def _dev() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(k: int) -> torch.Tensor:
    return torch.randn(N, generator=torch.Generator().manual_seed(k)).to(_dev())


class Runner:
    """The kernel compiled at load for its one shape (the clean way), and steps that break that in one way each."""

    def __init__(self):
        self.y = torch.zeros(N, device=_dev())
        self.scale = torch.full((), 2.0, device=_dev())
        self.fn = cute.compile(axpb, _fake(N), _fake(N), 2.0, make_fake_stream())
        self.fn_no_stream = cute.compile(axpb_no_stream, _fake(N), _fake(N), 2.0) if self.y.is_cuda else None
        self.cache = {}
        self.calls = 0

    def state(self):
        return {"y": self.y}

    def _run(self, fn, x, a: float):
        if self.y.is_cuda:
            fn(x, self.y, a, cuda.CUstream(torch.cuda.current_stream().cuda_stream))
        else:                                # the kernel's arithmetic where no device can run it
            torch.add(x * a, 1.0, out=self.y)
        return self.y

    def clean(self, x):
        return self._run(self.fn, x, 2.0)

    def compile_in_step(self, x):
        fn = cute.compile(axpb, _fake(x.shape[0]), _fake(x.shape[0]), 2.0, make_fake_stream())  # <- compile-in-step
        return self._run(fn, x, 2.0)

    def per_step_key(self, x):
        self.calls += 1
        key = (x.shape[0], x.dtype, self.calls)      # a step counter in the key: every step misses the cache
        fn = self.cache.get(key)
        if fn is None:
            fn = self.cache[key] = cute.compile(axpb, _fake(x.shape[0]), _fake(x.shape[0]), 2.0, make_fake_stream())  # <- per-step-key
        return self._run(fn, x, 2.0)

    def pack_readback(self, x):
        a = float(self.scale)                        # <- pack-readback
        return self._run(self.fn, x, a)

    # -- GPU only: these launch -------------------------------------------------------------------------------
    def stream0(self, x):
        self.fn(x, self.y, 2.0, stream=cuda.CUstream(0))  # <- stream0
        return self.y

    def no_stream(self, x):
        self.fn_no_stream(x, self.y, 2.0)  # <- no-stream
        return self.y

    def jit_direct(self, x):
        # a @cute.jit function takes cute tensors: torch tensors are wrapped through DLPack (passing them as they
        # are fails its argument check before anything is traced)
        axpb(from_dlpack(x), from_dlpack(self.y), 2.0, cuda.CUstream(torch.cuda.current_stream().cuda_stream))  # <- jit-direct
        return self.y


def _target(name: str) -> Target:
    r = Runner()
    return Target(step=getattr(r, name), make_inputs=_inputs, state=r.state, name=f"cute_planted.{name}", device=_dev())


def clean():
    return _target("clean")


def compile_in_step():
    return _target("compile_in_step")


def per_step_key():
    return _target("per_step_key")


def pack_readback():
    return _target("pack_readback")


def stream0():
    return _target("stream0")


def no_stream():
    return _target("no_stream")


def jit_direct():
    return _target("jit_direct")

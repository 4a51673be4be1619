"""Targets with one planted hazard each (and a clean one), for the runtime layers' tests.

Lines the tests expect findings on carry a `# <- name` marker; `line_of(name)` finds them.
"""
import numpy as np
import torch

from graphcheck import Target

D = 8


def marked_line(path: str, marker: str) -> int:
    """The line number in `path` of the line that ends with `# <- marker`."""
    with open(path) as fh:
        for i, text in enumerate(fh, 1):
            if text.rstrip().endswith(f"# <- {marker}"):
                return i
    raise KeyError(f"no line ending with '# <- {marker}' in {path}")


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


def _inputs(k: int) -> torch.Tensor:
    return torch.randn(2, D, generator=torch.Generator().manual_seed(k))


class Decoder:
    """A tiny graph-safe decode step: fixed-capacity cache, device position, everything in place."""

    def __init__(self, cap: int = 16):
        self.w = torch.randn(D, D, generator=torch.Generator().manual_seed(0))
        self.cache = torch.zeros(cap, 2, D)
        self.pos = torch.zeros((), dtype=torch.long)
        self.out = torch.zeros(2, D)
        self.scale = 0.5
        self.host_pos = 0

    def state(self):
        return {"cache": self.cache, "pos": self.pos, "out": self.out}

    def step(self, x):
        h = torch.tanh(x @ self.w)
        self.cache.index_copy_(0, self.pos.view(1), h.unsqueeze(0))
        valid = (torch.arange(self.cache.shape[0], device=self.cache.device) <= self.pos).view(-1, 1, 1)
        ctx = torch.where(valid, self.cache, 0.0).sum(0)
        self.out.copy_(ctx * 0.5 + h)
        self.pos += 1
        return self.out


def _target(dec: Decoder, step, name: str) -> Target:
    return Target(step=step, make_inputs=_inputs, state=dec.state, name=name)


def clean():
    d = Decoder()
    return _target(d, d.step, "clean")


def log_norm(t: torch.Tensor) -> float:
    return t.norm().item()  # <- helper-item


def readback_in_helper():
    d = Decoder()

    def step(x):
        out = d.step(x)
        log_norm(out)
        return out
    return _target(d, step, "readback-in-helper")


def baked_scalar():
    d = Decoder()

    def step(x):
        d.scale = d.scale * 1.5                       # host float, changes every step
        d.out.copy_(torch.tanh(x @ d.w) * d.scale)  # <- baked
        return d.out
    return _target(d, step, "baked-scalar")


def fresh_tensor():
    d = Decoder()

    def step(x):
        bias = torch.tensor([0.1] * D)  # <- fresh-tensor
        d.out.copy_(x + bias)
        return d.out
    return _target(d, step, "fresh-tensor")


def rebound_cache():
    d = Decoder()

    def step(x):
        d.cache = torch.roll(d.cache, 1, 0)  # <- rebind
        d.cache[0] = torch.tanh(x)
        d.out.copy_(d.cache.sum(0))
        return d.out
    return _target(d, step, "rebound-cache")


def data_dependent_branch():
    d = Decoder()

    def step(x):
        if x.sum() > 0:  # <- branch
            d.out.copy_(x * 2)
        else:
            d.out.copy_(torch.tanh(x))
        return d.out
    return _target(d, step, "data-dependent-branch")


def growing_slice():
    d = Decoder()

    def step(x):
        d.cache[d.host_pos % d.cache.shape[0]].copy_(x)
        d.host_pos += 1
        d.out.copy_(d.cache[: d.host_pos].mean(0))  # <- growing
        return d.out
    return _target(d, step, "growing-slice")


def numpy_side_work():
    d = Decoder()

    def step(x):
        d.out.numpy()[:] = np.tanh(x.numpy())   # work the graph never sees (like a launch on stream 0)
        return d.out
    return _target(d, step, "numpy-side-work")


def explicit_sync():
    d = Decoder()

    def step(x):
        out = d.step(x)
        torch.cuda.synchronize()  # <- sync
        return out
    return _target(d, step, "explicit-sync")


def exempted():
    import graphcheck
    d = Decoder()

    def step(x):
        out = d.step(x)
        with graphcheck.allow_sync("stop check, moved out of the step in the graph-safe path"):  # <- exempt
            bool(out.sum() > 0)
        return out
    return _target(d, step, "exempted")


def broken():
    d = Decoder()

    def step(x):
        return d.step(x[:, :3])   # shape error
    return _target(d, step, "broken")


def host_mask():
    """A mask built on the host each step and moved to the device: an H2D copy on a GPU, even when run on CPU."""
    d = Decoder()

    def step(x):
        mask = torch.tensor([1.0, 0.0]).to(x.device)  # <- host-mask
        d.out.copy_(x * mask.view(2, 1))
        return d.out
    return _target(d, step, "host-mask")


def sampling(named: bool = False, per_step: bool = False):
    """Sampling on device RNG: graph-safe when replay and eager start from equal generator states. A generator
    created inside the step is not: the graph keeps the one it was captured with."""
    d = Decoder()
    gen = torch.Generator().manual_seed(7)

    def step(x):
        g = torch.Generator().manual_seed(7) if per_step else (gen if named else None)
        probs = torch.softmax(x @ d.w, dim=-1)
        d.out.copy_(torch.multinomial(probs, 4, replacement=True, generator=g).float().repeat(1, 2))  # <- sample
        return d.out
    return _target(d, step, "sampling")


@torch.library.custom_op("graphcheck_planted::count_rows", mutates_args=())
def count_rows(x: torch.Tensor) -> torch.Tensor:
    rows = x.tolist()  # <- custom-op-tolist
    return x * len(rows)


@count_rows.register_fake
def _(x):
    return torch.empty_like(x)


class HostScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * float(x.abs().max())  # <- autograd-fn-float

    @staticmethod
    def backward(ctx, g):
        return g


def custom_ops():
    d = Decoder()

    def step(x):
        d.out.copy_(HostScale.apply(count_rows(x)))
        return d.out
    return _target(d, step, "custom-ops")


# Placement asked of the source: on a CPU run the run's device is "cpu" too.
DEV = "cuda" if torch.cuda.is_available() else "cpu"
HOST_DEVICE = torch.device("cpu")


def device_variable():
    """Graph-safe: every tensor is made with the run's device expression, which is "cpu" on a CPU run."""
    d = Decoder()
    d.w, d.cache, d.pos, d.out = (t.to(DEV) for t in (d.w, d.cache, d.pos, d.out))

    def step(x):
        h = torch.tanh(x @ d.w)
        d.cache.index_copy_(0, d.pos.view(1), h.unsqueeze(0))
        valid = (torch.arange(d.cache.shape[0], device=DEV) <= d.pos).view(-1, 1, 1)
        scale = torch.full((1, D), 0.5, device=torch.device(DEV))
        d.out.copy_(torch.where(valid, d.cache, 0.0).sum(0) * scale + h.to(DEV))
        d.pos += 1
        return d.out
    t = _target(d, step, "device-variable")
    t.make_inputs = lambda k: _inputs(k).to(DEV)
    return t


def host_literal_devices():
    """The same step with literal host devices: each is a host tensor on every machine."""
    d = Decoder()

    def step(x):
        cpu = "cpu"
        h = torch.tanh(x @ d.w)
        valid = torch.arange(d.cache.shape[0], device="cpu") <= d.pos  # <- literal-cpu
        d.out.copy_(h * torch.ones(D, device=HOST_DEVICE))  # <- global-cpu
        d.out.add_(torch.zeros(2, D, device=cpu))  # <- local-cpu
        d.out.mul_(valid.any().to(d.out.dtype))
        return d.out
    return _target(d, step, "host-literal-devices")


class SuppressIds:
    """Built before the step, like HF's SuppressTokensLogitsProcessor: the ids live where `device` says (default
    the host) and each call moves them next to the scores."""

    def __init__(self, ids, device="cpu"):
        self.ids = torch.tensor(ids, device=device)

    def __call__(self, scores):
        keep = ~torch.isin(torch.arange(D, device=scores.device), self.ids.to(scores.device))  # <- prebuilt-move
        return torch.where(keep, scores, -1.0)


def prebuilt_on_host(device=None):
    """A part built by the factory before the step with its host default (device=None: passed as the run's
    device instead, which is graph-safe)."""
    d = Decoder()
    d.w, d.cache, d.pos, d.out = (t.to(DEV) for t in (d.w, d.cache, d.pos, d.out))
    sup = SuppressIds([1, 5]) if device is None else SuppressIds([1, 5], device=device)

    def step(x):
        d.out.copy_(sup(x))
        return d.out
    return _target(d, step, "prebuilt")


def readback_by_to():
    """`.to("cpu")` of device data is a readback on a GPU; `.to(DEV)` of it is not."""
    d = Decoder()

    def step(x):
        h = torch.tanh(x @ d.w).to(DEV)
        d.out.copy_(h)
        host = h.to("cpu")  # <- to-cpu
        d.out.add_(host.to(DEV))  # <- back-to-dev
        return d.out
    return _target(d, step, "readback-by-to")

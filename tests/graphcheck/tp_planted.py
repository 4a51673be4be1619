"""Tensor-parallel targets for the rank-aware runtime tests: a clean sharded step and one planted hazard each.

Every target reads its rank from the process group, as a real sharded decode does. Lines the tests expect
findings on carry a `# <- name` marker; `line_of(name)` finds them.
"""
import torch
import torch.distributed as dist

from graphcheck import Target
from planted import D, _inputs, marked_line   # the same width and inputs as the single-process targets

H = 16


def line_of(marker: str) -> int:
    return marked_line(__file__, marker)


class ShardedMLP:
    """y = all_reduce(tanh(x W1[:, shard]) W2[shard, :]) with a fixed-capacity cache and a device position."""

    def __init__(self, cap: int = 16):
        r, n = dist.get_rank(), dist.get_world_size()
        g = torch.Generator().manual_seed(0)
        w1, w2 = torch.randn(D, H, generator=g), torch.randn(H, D, generator=g)
        cols = slice(r * H // n, (r + 1) * H // n)
        self.w1, self.w2 = w1[:, cols].contiguous(), w2[cols].contiguous()
        self.cache = torch.zeros(cap, 2, D)
        self.pos = torch.zeros((), dtype=torch.long)
        self.out = torch.zeros(2, D)
        self.stats = torch.zeros(1)
        self.extra = torch.zeros(2, D)   # the shape of the step's own all-reduce: a mismatch pairs silently, then hangs

    def state(self):
        return {"cache": self.cache, "pos": self.pos, "out": self.out}

    def mlp(self, x):
        y = torch.tanh(x @ self.w1) @ self.w2
        dist.all_reduce(y)  # <- all-reduce
        return y

    def step(self, x):
        y = self.mlp(x)
        self.cache.index_copy_(0, self.pos.view(1), y.unsqueeze(0))
        self.out.copy_(y + 0.5 * self.cache.sum(0))
        self.pos += 1
        return self.out

    def step_readback_on_rank1(self, x):
        y = self.mlp(x)
        if dist.get_rank() == 1:
            self.stats += y.abs().max().item()  # <- rank1-item
        self.out.copy_(y)
        return self.out

    def step_rank0_extra_collective(self, x):
        y = self.mlp(x)
        if dist.get_rank() == 0:
            dist.all_reduce(self.extra)  # <- rank0-extra
        self.out.copy_(y)
        return self.out

    def step_barrier(self, x):
        y = self.mlp(x)
        dist.barrier()  # <- barrier
        self.out.copy_(y)
        return self.out

    def step_async_unwaited(self, x):
        y = torch.tanh(x @ self.w1) @ self.w2
        work = dist.all_reduce(y, async_op=True)  # <- async
        self.out.copy_(y)
        return work and self.out


def _target(name: str) -> Target:
    m = ShardedMLP()
    return Target(step=getattr(m, name), make_inputs=_inputs, state=m.state, name=name)


def clean():
    return _target("step")


def readback_on_rank1():
    return _target("step_readback_on_rank1")


def rank0_extra_collective():
    return _target("step_rank0_extra_collective")


def barrier():
    return _target("step_barrier")


def async_unwaited():
    return _target("step_async_unwaited")

"""Generator states, so replay and eager are compared from the same random stream.

A CUDA graph registers the default CUDA generator at capture and reads its seed and offset at each replay; a frozen
graph on CPU draws from the generators it was traced with. Starting both runs from equal states makes a sampling
step equal to its eager twin; what still differs is a real capture hazard (host RNG baked at capture, a generator
created inside the step).
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import torch


class RngState:
    def __init__(self, generators: Iterable[torch.Generator] = ()):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.named = [(g, g.get_state()) for g in generators]

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        for g, st in self.named:
            g.set_state(st)


def generators_in(values: Iterable) -> list[torch.Generator]:
    """The distinct generator objects among `values` (args and kwargs of traced ops)."""
    seen: dict[int, torch.Generator] = {}
    for v in values:
        if isinstance(v, torch.Generator):
            seen.setdefault(id(v), v)
    return list(seen.values())


SEED = 0


@contextlib.contextmanager
def seeded() -> Iterator[None]:
    """Run with the default generators at a fixed seed, and give the caller's states back afterwards. torch seeds
    its default CPU generator from the OS in every process, so a step that samples (a speculative accept/reject, a
    multinomial) took other branches on every run and the same target gave other rows; from a fixed state every
    run of a layer draws the same numbers."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.random.default_generator.manual_seed(SEED)
    if cuda is not None:
        for g in torch.cuda.default_generators:
            g.manual_seed(SEED)
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)

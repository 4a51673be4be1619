"""Generator states, so replay and eager are compared from the same random stream.

A CUDA graph registers the default CUDA generator at capture and reads its seed and offset at each replay; a frozen
graph on CPU draws from the generators it was traced with. Starting both runs from equal states makes a sampling
step equal to its eager twin; what still differs is a real capture hazard (host RNG baked at capture, a generator
created inside the step).
"""
from __future__ import annotations

from typing import Iterable

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

"""The speculative step with one planted host read of the accepted count each: what the obvious implementation
does, and what graphcheck must catch at its line. Lines the tests expect findings on carry a `# <- name` marker."""
import torch

from dsv4_model.speculative import SpeculativeRunner
from dsv4_model.target import speculative_decode


def line_of(marker: str) -> int:
    with open(__file__) as fh:
        for i, text in enumerate(fh, 1):
            if text.rstrip().endswith(f"# <- {marker}"):
                return i
    raise KeyError(marker)


class ItemCount(SpeculativeRunner):
    """Reads the longest accepted run back to size the host's copy."""

    def body(self, n):
        out = super().body(n)
        self.longest = int(self.count[:n].max().item())  # <- item
        return out


class LoopOverAccepted(SpeculativeRunner):
    """Appends the accepted tokens of row 0 one by one to a history buffer."""

    def body(self, n):
        out = super().body(n)
        self.history = getattr(self, "history", torch.zeros(4096, dtype=torch.long, device=out.device))
        self.filled = getattr(self, "filled", 0)
        for j in range(self.count[0]):  # <- loop
            self.history[(self.filled + j) % 4096] = out[0, j]
        return out


class SliceByCount(SpeculativeRunner):
    """Keeps row 0's accepted tokens by slicing them off at the count."""

    def body(self, n):
        out = super().body(n)
        self.kept = out[0, : self.count[0]].clone()  # <- slice
        return out


def item_count():
    return speculative_decode(device="cpu", batch=2, max_seq_len=64, runner_cls=ItemCount)


def loop_over_accepted():
    return speculative_decode(device="cpu", batch=2, max_seq_len=64, runner_cls=LoopOverAccepted)


def slice_by_count():
    return speculative_decode(device="cpu", batch=2, max_seq_len=64, runner_cls=SliceByCount)

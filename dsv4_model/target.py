"""graphcheck targets for the DSV4 decode: `graphcheck audit dsv4_model.target:reference_decode`."""
from __future__ import annotations

import os

import torch

from graphcheck.target import Target

STATE_BUFFERS = ("kv_window", "kv_state", "gate_state", "entries", "pos")


def decode_state(model) -> dict[str, torch.Tensor]:
    """Every buffer the decode step writes: sliding windows, compressor ring state, compressed entries, position."""
    return {n: b for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] in STATE_BUFFERS}


def shard_if_distributed(model):
    """Under a process group of more than one rank (`graphcheck ... --nproc N`, torchrun), this rank's tensor-parallel
    shard of the model; the model itself otherwise."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        from .parallel import shard
        return shard(model)
    return model


def reference_decode(device: str | None = None, batch: int = 1, max_seq_len: int = 256) -> Target:
    """The reference decode step on the embedded tiny checkpoint (or $DSV4_CHECKPOINT)."""
    from . import load
    device = device or os.environ.get("GRAPHCHECK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    model = shard_if_distributed(load(os.environ.get("DSV4_CHECKPOINT", "tiny"), device=device, max_seq_len=max_seq_len, batch=batch))
    vocab = model.args.vocab_size

    def make_inputs(k: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 + k)
        return torch.randint(16, vocab, (batch,), generator=g).to(device)

    return Target(step=model.decode_step, make_inputs=make_inputs, state=lambda: decode_state(model),
                  name="dsv4 reference decode", device=device, warmup=1)

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


def _checkpoint(device: str, max_seq_len: int, **kw):
    """The embedded tiny checkpoint (or $DSV4_CHECKPOINT) on `device`, this rank's shard under a process group."""
    from . import load
    return shard_if_distributed(load(os.environ.get("DSV4_CHECKPOINT", "tiny"), device=device, max_seq_len=max_seq_len,
                                     **kw))


def _tokens(batch: int, vocab: int, device: str, seed: int):
    """make_inputs(k) -> a fresh token per row [batch], the same for the same k (ids from 16: past the control ids)."""
    def make_inputs(k: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed + k)
        return torch.randint(16, vocab, (batch,), generator=g).to(device)
    return make_inputs


def _runner_target(runner, batch: int, vocab: int, device: str, seed: int, name: str) -> Target:
    """A runner's captured body as a target: each step feeds the rows new tokens through the decoder's static input."""
    def step(tokens: torch.Tensor) -> torch.Tensor:
        runner.dec.tokens.copy_(tokens)
        return runner.body(batch)

    return Target(step=step, make_inputs=_tokens(batch, vocab, device, seed), state=runner.state, name=name,
                  device=device, warmup=1)


def reference_decode(device: str | None = None, batch: int = 1, max_seq_len: int = 256) -> Target:
    """The reference decode step on the embedded tiny checkpoint (or $DSV4_CHECKPOINT)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = _checkpoint(device, max_seq_len, batch=batch)
    return Target(step=model.decode_step, make_inputs=_tokens(batch, model.args.vocab_size, device, 1000),
                  state=lambda: decode_state(model), name="dsv4 reference decode", device=device, warmup=1)


def graphsafe_decode(device: str | None = None, batch: int = 4, max_seq_len: int = 256) -> Target:
    """The graph-safe step as the runner captures it (decode + device sampler + next-token feed), `batch` rows at
    different positions, sampling with temperature, top-k, top-p and a repetition penalty."""
    from .decode import GraphSafeDecoder
    from .runner import Runner
    from .sampler import Sampler
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = _checkpoint(device, max_seq_len)
    runner = Runner(GraphSafeDecoder(model, batch, kernels=True), Sampler(batch, model.args.vocab_size, device=device),
                    buckets=(batch,), graphs=False, log=lambda s: None)
    for r in range(batch):                       # rows start at different steps, so their positions differ
        runner.start(r, [0, 16 + r, 17 + r], temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.1, seed=r)
        for _ in range(3):
            runner.body(batch)
    return _runner_target(runner, batch, model.args.vocab_size, device, 2000, "dsv4 graph-safe decode")


def speculative_decode(device: str | None = None, batch: int = 4, max_seq_len: int = 256, k: int = 2,
                       runner_cls=None, verify: str = "positions") -> Target:
    """The speculative step as the runner captures it (speculative.py: MTP drafts, verification, acceptance and
    the per-row advance, all on the device), `batch` rows at different positions: half greedy, half sampling
    (temperature, top-k, top-p, repetition penalty) from the device's default generator (what a CUDA graph
    registers by itself and graphcheck's capture snapshots; a generator of one's own the runner registers with
    its graphs, tests/dsv4_model/test_speculative.py replays that on the GPU). `runner_cls`: a
    SpeculativeRunner subclass (the planted variants in tests/dsv4_model/spec_planted.py). `verify`: the
    runner's verify mode ("batched": one forward over the k+1 positions, over the row-invariant kernel table)."""
    from .decode import GraphSafeDecoder
    from .sampler import Sampler
    from .speculative import SpeculativeRunner
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = _checkpoint(device, max_seq_len)
    runner = (runner_cls or SpeculativeRunner)(GraphSafeDecoder(model, batch, kernels=True, rowwise=verify == "batched"),
                                               Sampler(batch, model.args.vocab_size, device=device),
                                               k=k, verify=verify, buckets=(batch,), graphs=False, log=lambda s: None)
    for r in range(batch):                       # prompts of different lengths: the rows' positions differ
        sampling = dict(temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.1) if r % 2 else {}
        runner.start(r, [0, 16 + r, 17 + r, 18 + r][: 1 + r], **sampling)
        for _ in range(2):
            runner.body(batch)
    return _runner_target(runner, batch, model.args.vocab_size, device, 3000,
                          f"dsv4 speculative decode (MTP, {verify} verify)")


def speculative_batched(device: str | None = None, batch: int = 4, max_seq_len: int = 256, k: int = 2) -> Target:
    """`speculative_decode` with the batched verify (one forward of the main model over the k+1 positions): what
    graphcheck-graphsafe.toml gates beside the per-position one."""
    return speculative_decode(device, batch, max_seq_len, k, verify="batched")

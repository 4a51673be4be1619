"""CUDA-graph runner for the graph-safe decode: one graph per batch bucket (1, 2, 4, 8 by default).

The captured body is the whole per-token device work: the decoder step, the sampler, and the choice of the next
input (the prompt's next token while a row is still reading its prompt, else the sampled one), `copy_`-ed in place
into the decoder's static `tokens`. The host loop around it reads one small tensor per step (the sampled tokens)
for the stop check and detokenisation; that read is outside the graph by design.

A batch of n rows runs in the smallest bucket >= n; the extra rows are padding whose outputs nobody reads. Graphs
are captured lazily, on a bucket's first use, after two warm-up steps on a side stream (the state is snapshotted
before the warm-up and restored after capture, so warm-up leaves no trace). Without CUDA, or with graphs=False,
the same body runs eagerly. `check=True` first runs graphcheck's capture-under-test on the body and prints its
verdict; a bucket with findings stays eager.
"""
from __future__ import annotations

import sys
from typing import Callable

import torch

from .decode import GraphSafeDecoder
from .sampler import Sampler

BUCKETS = (1, 2, 4, 8)


class Runner:
    def __init__(self, decoder: GraphSafeDecoder, sampler: Sampler, buckets=BUCKETS, graphs: bool = True,
                 check: bool = False, log: Callable[[str], None] | None = None):
        self.dec, self.sampler = decoder, sampler
        self.buckets = tuple(sorted(b for b in buckets if b <= decoder.batch))
        if not self.buckets:
            raise ValueError(f"runner: no bucket fits the decoder's {decoder.batch} rows (buckets {tuple(buckets)})")
        self.log = log or (lambda s: print(s, file=sys.stderr))
        dev = decoder.tokens.device
        self.use_graphs = graphs and dev.type == "cuda"
        if graphs and not self.use_graphs:
            self.log(f"dsv4_model: no CUDA device ({dev}): running the graph-safe step eagerly, without CUDA graphs")
        if check and not self.use_graphs:    # the check runs before a capture: with none, no verdict would come
            self.log("dsv4_model: --check checks CUDA graph captures and nothing is captured here (no CUDA device, or "
                     "--no-graph); for a verdict without one: graphcheck capture dsv4_model.target:graphsafe_decode")
        self.check = check
        B, cap = decoder.batch, decoder.capacity
        self.prompt = torch.zeros(B, cap, dtype=torch.long, device=dev)     # each row's prompt, fed token by token
        self.prompt_len = torch.zeros(B, dtype=torch.long, device=dev)
        self.out = torch.zeros(B, dtype=torch.long, device=dev)             # the sampled token of the last step
        self.graphs: dict[int, torch.cuda.CUDAGraph | None] = {}
        self.pool = None
        self.generators: tuple[torch.Generator, ...] = ()      # non-default generators the body draws from

    # -- host side, outside any graph -------------------------------------------------------------------------
    @staticmethod
    def bucket_for(n: int, buckets=BUCKETS) -> int:
        for b in sorted(buckets):
            if b >= n:
                return b
        raise ValueError(f"runner: {n} rows exceed the largest bucket {max(buckets)}")

    def bucket(self, n: int) -> int:
        return self.bucket_for(n, self.buckets)

    def start(self, row: int, prompt: list[int], **sampling) -> None:
        """Begin a fresh sequence in `row`: state cleared, prompt loaded, sampling settings set."""
        if not prompt or len(prompt) > self.dec.capacity:
            raise ValueError(f"runner: prompt of {len(prompt)} tokens, expected 1..{self.dec.capacity} (max_seq_len)")
        self.dec.reset(row)
        self.sampler.configure(row, **sampling)
        p = torch.as_tensor(prompt, dtype=torch.long)
        self.prompt[row, : len(prompt)] = p.to(self.prompt.device)
        self.prompt_len[row] = len(prompt)
        self.dec.tokens[row] = int(prompt[0])

    def state(self) -> dict[str, torch.Tensor]:
        s = {f"decoder.{k}": v for k, v in self.dec.state().items()}
        s.update({f"sampler.{k}": v for k, v in self.sampler.named_buffers()})
        s["out"] = self.out
        return s

    # -- the captured body ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def body(self, n: int) -> torch.Tensor:
        """One token for rows [0, n): decode, sample, feed the next input in place. Returns out[:n]."""
        dec = self.dec
        tok_in = dec.tokens[:n]
        self.sampler.observe(tok_in)
        logits = dec.step(n)                                     # advances dec.pos[:n]
        nxt = self.sampler(logits)
        pos = dec.pos[:n]
        in_prompt = pos < self.prompt_len[:n]
        forced = self.prompt[:n].gather(1, pos.clamp(max=dec.capacity - 1)[:, None])[:, 0]
        self.out[:n] = nxt
        tok_in.copy_(torch.where(in_prompt, forced, nxt))
        return self.out[:n]

    def step(self, n: int) -> torch.Tensor:
        """Run one step for rows [0, n) padded to their bucket; returns the sampled tokens [n] (device)."""
        b = self.bucket(n)
        if not self.use_graphs:
            return self.body(b)[:n]
        if b not in self.graphs:
            self.graphs[b] = self._capture(b)
        g = self.graphs[b]
        if g is None:
            return self.body(b)[:n]
        g.replay()
        return self.out[:n]

    def _capture(self, b: int):
        state = self.state()
        snap = {k: v.clone() for k, v in state.items()}
        if self.check:
            from graphcheck.runtime.capture import capture_test
            from graphcheck.target import Target
            target = Target(step=lambda _: self.body(b), make_inputs=lambda k: self.dec.tokens[:b],
                            state=self.state, name=f"graph-safe decode, bucket {b}", device=str(self.out.device), warmup=1)
            found = capture_test(target, steps=3, device="cuda")
            for k, v in state.items():
                v.copy_(snap[k])
            verdict = "clean (capture, replay equals eager bit for bit)" if not found else f"{len(found)} finding(s)"
            self.log(f"graphcheck capture-under-test, bucket {b}: {verdict}")
            for f in found:
                self.log(f"  {f.rule} {f.path}:{f.line} {f.message}")
            if found:
                self.log(f"dsv4_model: bucket {b} stays eager")
                return None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.body(b)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        for gen in self.generators:           # a replay then advances its offset, as the default generator's
            g.register_generator_state(gen)
        with torch.cuda.graph(g, pool=self.pool):
            self.body(b)
        self.pool = g.pool()
        torch.cuda.synchronize()
        for k, v in state.items():
            v.copy_(snap[k])
        return g

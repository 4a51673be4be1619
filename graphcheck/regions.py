"""Regions: where a finding's line runs, which decides whether the gate counts it.

A sync in the captured graph breaks capture; the same sync on the per-step host path costs every step its
overlap; in a warm-up branch, inside the engine's own allow-block, or in an encoder that runs eagerly outside the
graph it is a deliberate, bounded cost. Serving engines take such syncs on purpose, and a report that cannot tell
them apart from a sync in the graph is noise (measured: precision 0.35 on a large engine's hot paths when every
region counted the same). The static layer decides each finding's region (``graphcheck/static/regions.py``); this
module is the model every layer, the gate and every report share. `graphcheck explain regions` prints ``DOC``.
"""
from __future__ import annotations

# Strongest first: a line reached along several paths runs in the strongest region of them (a helper the graph
# calls and a warm-up branch also calls is captured); along one path the weakest step decides (a call inside
# `with gpu_sync_allowed():` in a captured function runs allowed).
REGIONS = ("captured", "per-step", "allowed", "one-time", "eager-only")
GATED = ("captured", "per-step")
RANK = {r: i for i, r in enumerate(REGIONS)}

DOC = """regions

## What it is
Every finding carries the region its line runs in. The gate and the default output count and show the
captured and per-step regions only; rows in the other regions are counted in the summary line and listed
with `--show-all-regions` (every command that prints findings takes it). The JSON inventory, SARIF
(`properties.region`), and the html page carry the region of every row.

| region | the line runs | gated |
|---|---|---|
| `captured` | in the CUDA graph: reachable from a capture entry point (`entry-points`, `@graphcheck.capturable`) | yes |
| `per-step` | on the host every step, outside the graph: reachable from `per-step-entry-points` only | yes |
| `allowed` | inside a `with` block (or a def decorated) by a context the project declares an allow-block: `allowed-sync-contexts` | no |
| `one-time` | in a warm-up, first-launch or cache-miss branch, or a def that runs once per key | no |
| `eager-only` | in code configured to run eagerly outside the graph (`eager-only`), or under `if not torch.cuda.is_current_stream_capturing():` | no |

Along one call path the weakest region wins (a captured function calling a helper inside an allow-block runs
that helper allowed); across paths the strongest (a helper also called straight from the graph is captured).

One-time patterns, recognised in the source (each on an attribute or a global, never on a local or a
parameter, whose `if x is None: x = default` runs every step):
- `if self._buf is None: self._buf = build()` (the body assigns what it tests; `is not None ... else:` too)
- `if key not in self._cache: self._cache[key] = ...`, `if not hasattr(self, "x"): self.x = ...`
- a flag: `if self._first_run:`, `if self.warmup:`, `if not self._initialized:` / `built` / `compiled` /
  `warmed` (the else branch for the opposite test), or any flag the body sets to a constant
- a def decorated `functools.cache`, `functools.lru_cache` or `functools.cached_property`

`torch.compiler.disable` is no region: it leaves torch.compile's graph, not a CUDA graph, and capture records
what it launches like any other code.

Kernel-DSL code is not the step's Python either: the body of a def decorated with a `jit` (`@triton.jit`,
`@cute.jit`, `@gluon.jit`), with `@cute.kernel`, cuTile's `@ct.kernel` / `@ct.function` or Warp's `@wp.kernel` /
`@wp.func`, and every def nested in it, holds the DSL's values (a Triton block, a CuTe tensor, `Int32`, a tile),
never torch tensors, and runs as Python only while the DSL traces it. No rule reads
it; a launch is checked where it is made (GC801: no current-stream argument, GC802: compiled in the captured
region), and a helper that only kernels call is not an entry point fed the step's tensors (`--all-functions`).

Runtime rows (audit, capture) ran in the target's step: they are `captured`, unless the static layer places
their line in another region (`graphcheck run` merges the layers by line; the standalone `audit` and `capture`
commands have no static layer and mark every row `captured`).

## Baseline
The baseline accepts what the gate counts: `graphcheck baseline` adds rows of the captured and per-step
regions only. An entry whose row is still found in another region is kept (with its reason) and is not stale,
so a row that moves back into a gated region is accepted again, and existing baselines keep passing.

## Fan-out
A dynamic dispatch call (`self.model.embed_multimodal(x)` on an attribute typed by a base class, a base
method's overrides, a factory or registry) that resolves to more than `fan-out-limit` implementations (classes;
default 8, 0 for no limit) is not followed: it is one scope warning naming the call and the number of
implementations, and `--show-scope` lists them. Where the receiver's concrete class is known (the attribute is
assigned `Foo(...)` as well as annotated with a base class of Foo) the call resolves to Foo alone. Name the
class (an annotation or a constructor), configure the implementations as `eager-only`, or raise the limit.

## Configuration ([tool.graphcheck])
per-step-entry-points = ["pkg.runner:ModelRunner.prepare_inputs"]   # host code that runs every step
allowed-sync-contexts = ["gpu_sync_allowed", "pkg.utils.sync_ok"]   # a name, or a dotted suffix of one
eager-only = ["pkg.models.vision:Encoder.forward", "pkg.models.vision", "pkg.mm:Processor"]
fan-out-limit = 8

An `eager-only` entry is a function (`mod:Class.method`), a class (`mod:Class`: all its methods) or a module
or package (`pkg.sub`: everything in it); one that names nothing scanned is an error.
"""


def weaker(a: str, b: str) -> str:
    """The region of a line reached through a call in region `a` to code in region `b`."""
    return a if RANK[a] >= RANK[b] else b


def gated(region: str) -> bool:
    return region in GATED

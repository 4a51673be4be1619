"""GC503 host-rng-state — Flags reading or setting a torch generator's state on the host inside the captured step."""
from __future__ import annotations

import ast

from ._base import Rule, dotted, on

RULE = Rule(
    code='GC503',
    name='host-rng-state',
    message='`{call}` reads or sets the RNG state on the host',
    hint='draw with torch ops on the generator (`torch.rand(..., generator=g)`), or keep seed and offset in device tensors',
    what='Flags the module functions that read or set torch\'s RNG state (`torch.cuda.get_rng_state`, `torch.manual_seed`, `torch.cuda.initial_seed`, ...) and the same methods of a generator (`g.get_state()`, `g.set_state(...)`, `g.manual_seed(...)`, `g.initial_seed()`, `g.seed()`) inside the captured region. A receiver is a generator when it is built by `torch.Generator(...)` or `default_generators[...]`, or its name says so (`gen`, `generator`, `rng`, `self.sampling_gen`). Not flagged: torch ops that draw from a generator (`torch.rand(..., generator=g)`, `torch.multinomial`), whose Philox offset a captured graph advances on every replay.',
    why='What the host reads from a generator during capture is its state at capture: a seed and offset handed on to a custom kernel as Python numbers are baked into the graph, so every replay draws the same numbers while eager steps draw new ones. Setting the state (`manual_seed`, `set_state`) re-seeds the eager step, but replay skips the Python call, so eager and replay diverge from the first step.',
    example='seed, offset = gen.get_state().view(torch.int64)[:2].tolist()\nsample_kernel(probs, out, seed, offset)',
    instead='u = torch.rand(probs.shape[0], device=probs.device, generator=gen)   # offset advanced on replay\ntok = sample_kernel(probs, u)',
)
# What the runtime layers observe for the same hazard (aten ops and torch callables); `runtime_signatures()`
# maps each to this rule's code, so the static and runtime layers report it under one code. A generator's own
# methods belong to a C type that cannot be wrapped: those only the static layer sees.
RUNTIME: tuple[str, ...] = (
    'torch.get_rng_state', 'torch.set_rng_state', 'torch.manual_seed', 'torch.seed', 'torch.initial_seed',
    'torch.cuda.get_rng_state', 'torch.cuda.get_rng_state_all', 'torch.cuda.set_rng_state',
    'torch.cuda.set_rng_state_all', 'torch.cuda.manual_seed', 'torch.cuda.manual_seed_all', 'torch.cuda.seed',
    'torch.cuda.seed_all', 'torch.cuda.initial_seed')

_MODULES = ("torch.", "torch.random.", "torch.cuda.", "torch.cuda.random.")
_FUNCTIONS = {name.rpartition(".")[2] for name in RUNTIME}      # get_rng_state, manual_seed_all, ...
_METHODS = {"get_state", "set_state", "manual_seed", "initial_seed", "seed"}


def is_generator(node: ast.AST, names: set[str]) -> bool:
    """A torch.Generator by construction (`torch.Generator(...)`, `torch.cuda.default_generators[i]`,
    `torch.default_generator`), by a local bound to one (`names`), or by its name."""
    if isinstance(node, ast.Call):
        return dotted(node.func).split(".")[-1] == "Generator"
    if isinstance(node, ast.Subscript):
        return dotted(node.value).endswith("default_generators")
    if isinstance(node, ast.Name) and node.id in names:
        return True
    last = dotted(node).split(".")[-1].lower()
    return last == "default_generator" or "generator" in last or "rng" in last or last == "gen" \
        or last.startswith("gen_") or last.endswith("_gen")


@on(ast.Call, names=tuple(_FUNCTIONS | _METHODS))
def check(ctx, node: ast.Call) -> None:
    q = ctx.qual(node.func)
    if q:
        mod, _, name = q.rpartition(".")
        if name in _FUNCTIONS and mod + "." in _MODULES:
            ctx.report(RULE.code, node, call=q + "()")
        return
    name = ctx.method(node)
    if name in _METHODS and is_generator(node.func.value, ctx.a.generator_names):
        ctx.report(RULE.code, node, call=f".{name}()")

"""GC6xx — explicit synchronisation and debug guards."""
from __future__ import annotations

import ast

from ._base import Family, Rule
from ..static.inference import dotted

FAMILY = Family("Explicit syncs", [
    Rule("GC601", "device-synchronize", "`{call}` blocks the host until the device is idle", "remove it from the step; synchronise once outside the graph",
         "Flags `torch.cuda.synchronize()` and `torch.accelerator.synchronize()`.",
         "A device-wide sync is illegal during capture and stalls the pipeline eagerly. The CUDA sync-debug mode does "
         "not report it: only the static rules and the portable audit see it.",
         "torch.cuda.synchronize()\nt1 = time.perf_counter()", "start.record(); ...; end.record()   # time with events, outside the step"),
    Rule("GC602", "stream-event-synchronize", "`{call}` blocks the host on a stream or event", "order work with `stream.wait_event(e)` on the device",
         "Flags `.synchronize()` on streams and events.", "Blocking the host on a stream or event is a sync; under capture it "
         "is illegal, and `Event.synchronize()` is invisible to the CUDA sync-debug mode.",
         "done.synchronize()", "torch.cuda.current_stream().wait_event(done)"),
    Rule("GC603", "event-query", "`{call}` polls the device from the host", "order work on the device with `wait_event`",
         "Flags `.query()` on streams and events.", "A query asks the driver about device progress from the host; a graph "
         "cannot record it, and a polling loop is a sync.", "while not ev.query():\n    pass", "stream.wait_event(ev)"),
    Rule("GC604", "nan-guard", "a NaN/Inf debug guard reads a device reduction back to the host", "drop the guard from the step, or record a device flag and check it after replay",
         "Flags `if`/`assert`/`while` conditions built from `torch.isnan`/`isinf`/`isfinite`.",
         "The guard reduces on the device and then reads the bool back: a sync every step, and a capture failure.",
         "if torch.isnan(h).any():\n    raise FloatingPointError", "self.bad_flag |= torch.isnan(h).any()   # device flag, read after the step"),
    Rule("GC605", "cache-allocator-call", "`{call}` talks to the caching allocator from inside the step", "call it between steps, outside capture",
         "Flags `torch.cuda.empty_cache()` and memory statistics calls in the captured region.",
         "Releasing cached blocks synchronises the device and is illegal while a graph's private pool is being captured.",
         "torch.cuda.empty_cache()", "# call once after generation, not per step"),
])
on = FAMILY.on
_MEM = {"empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "mem_get_info", "memory_stats",
        "reset_peak_memory_stats", "ipc_collect"}


@on(ast.Call)
def _calls(ctx, node: ast.Call) -> None:
    name = dotted(node.func)
    s = ctx.scope
    parts = name.split(".") if name else []
    if parts and parts[0] in s.torch_names and len(parts) == 3 and parts[1] in ("cuda", "accelerator", "xpu", "mps"):
        if parts[2] == "synchronize":
            ctx.report("GC601", node, call=name + "()")
            return
        if parts[2] in _MEM:
            ctx.report("GC605", node, call=name + "()")
            return
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in ("synchronize", "query") and not node.args:
        recv = dotted(f.value).lower()
        streamish = any(w in recv for w in ("stream", "event", "ev", "done", "start", "end")) or ctx.is_stream_or_event(f.value)
        if f.attr == "synchronize" and (streamish or isinstance(f.value, ast.Call)):
            ctx.report("GC602", node, call=f".{f.attr}()")
        elif f.attr == "query" and streamish:
            ctx.report("GC603", node, call=f".{f.attr}()")


def _guard(ctx, test: ast.AST) -> None:
    if ctx.mentions_nan_guard(test):
        ctx.report("GC604", test)


@on(ast.If, ast.While, ast.Assert)
def _guards(ctx, node) -> None:
    _guard(ctx, node.test)

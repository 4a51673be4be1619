"""GC0xx — what capture-under-test (CUDA, or its CPU emulation) finds when it runs the step."""
from __future__ import annotations

from ._base import Family, Rule

FAMILY = Family("Capture-under-test", [
    Rule("GC001", "capture-failed", "capture of the step failed: {error}", "fix the op named in the evidence; `graphcheck audit` lists every one",
         "Reports a step that cannot be captured into a CUDA graph (or traced into a frozen graph on CPU), naming "
         "the culprit op and user line found by re-running the step under the portable audit.",
         "CUDA reports `operation failed due to a previous error during capture` without naming the op; graphcheck "
         "re-attributes it.", "n = mask.sum().item()", "keep n on the device"),
    Rule("GC002", "empty-graph", "the captured graph is empty: replay does nothing", "launch custom kernels on `torch.cuda.current_stream()`",
         "Reports a capture that succeeded but recorded no work.",
         "A kernel launched on stream 0 during capture runs once eagerly; the graph has no nodes and every replay is a no-op.",
         "kernel(x, stream=cuda.CUstream(0))", "kernel(x, stream=cuda.CUstream(torch.cuda.current_stream().cuda_stream))"),
    Rule("GC003", "replay-mismatch", "replay differs from eager at step {step}: `{tensor}` (max abs diff {diff})", "make every per-step value a device tensor read from a static buffer",
         "Replays the captured step on fresh inputs and compares outputs and state with eager, bit for bit.",
         "A Python scalar, a host-side position or a rebound buffer is baked in at capture time: replay silently "
         "computes with the old value.", "o.copy_(x * self.scale)      # float baked at capture", "o.copy_(x * self.scale_t)    # 0-d device tensor, updated in place"),
    Rule("GC004", "unstable-graph", "the op trace changes between steps: {detail}", "keep shapes, dtypes and the op sequence fixed across steps",
         "Records the aten op trace of step k and step k+1 on different data; any difference in op, shape, dtype or "
         "state use means one graph cannot serve both steps.",
         "A graph replays exactly the ops and shapes it recorded; a step whose shapes grow or whose branch changes needs a new graph.",
         "k = self.cache[:, :pos + 1]", "k = self.cache   # full capacity, mask positions > pos"),
    Rule("GC005", "state-rebound", "state tensor `{tensor}` is rebound by the step instead of written in place", "write into the existing buffer (`copy_`, `index_copy_`)",
         "Checks that every state tensor keeps its object and storage across an eager step.",
         "Replay writes into the buffers captured at capture time; a state tensor that the step replaces is never updated by replay.",
         "self.cache = torch.cat([self.cache, kv])", "self.cache.index_copy_(0, pos, kv)"),
    Rule("GC006", "target-error", "the target failed to run: {error}", "fix the target factory or step",
         "Reports a target that cannot be imported, built or run eagerly.", "Nothing can be audited until the step runs.",
         "graphcheck audit mypkg.targets:missing", "graphcheck audit mypkg.targets:decode"),
    Rule("GC007", "sync-exemption", "sync allowed by `allow_sync`: {reason}", "remove the exemption once the sync is gone",
         "Reports every `with graphcheck.allow_sync(reason):` block the step entered and what it exempted.",
         "An exemption is an accepted hazard; the report keeps it visible so it can be retired.",
         "with graphcheck.allow_sync('stop check'): done = bool(tok == eos)", "keep the stop check outside the captured step"),
    Rule("GC008", "cuda-sync", "the CUDA sync-debug mode reports a synchronizing call: {detail}", "find the op in the evidence stack; keep it on the device",
         "Counts every warning of `torch.cuda.set_sync_debug_mode('warn')` during the audited steps that the portable "
         "layer did not already explain, attributed to the first user frame.",
         "The CUDA runtime sees syncs torch's Python layer hides (a blocking copy inside a C++ op, a pageable "
         "memcpy); any sync inside a captured region fails the capture.",
         "x = torch.zeros(n).cuda()   # pageable host copy inside the step", "allocate device buffers at load time"),
])

"""Check the portable layer sees a pageable CPU->CUDA copy (GC402) on a real GPU."""
import torch
from graphcheck.runtime.portable import PortableAudit, _DispatchLayer
from graphcheck.runtime.recorder import Recorder
E = torch.arange(8.)
r = Recorder()
seen = []
orig = _DispatchLayer._classify
def spy(func, args, kwargs):
    seen.append((str(func), [getattr(a, "device", None) for a in args[:2]], {k: str(v) for k, v in kwargs.items()}))
    return orig(func, args, kwargs)
_DispatchLayer._classify = staticmethod(spy)
with torch.inference_mode(), PortableAudit(r):
    y = E.to(torch.device("cuda"))
print("findings", [(f.rule, f.line, f.evidence["op"]) for f in r.findings()])
print("dispatch saw", seen)

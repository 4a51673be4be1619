"""Every rule: a positive that must be flagged and look-alike negatives that must not be."""
import pytest

from graphcheck.rules import FAMILIES, RULES

HEAD = "import torch\nimport random\nimport logging\nimport numpy as np\nlog = logging.getLogger(__name__)\n\n"

# code -> (positive body, negative body); bodies run inside `def f(x: torch.Tensor, lst: list, n: int):`
CASES = {
    "GC101": ("v = x.sum().item()", "v = x.sum()\nd = {}.items()"),
    "GC102": ("v = x.tolist()", "v = [1, 2]\nw = list(range(n))"),
    "GC103": ("v = x.cpu()", "v = x.to(x.device)\nw = x.to(torch.float16)"),
    "GC104": ("v = float(x.max())", "v = int(x.shape[0])\nw = float(n)\nk = int(x.numel())"),
    "GC105": ("for i in range(x.sum()):\n        pass", "for i in range(x.shape[0]):\n        pass\nfor j in range(len(x)):\n        pass"),
    "GC106": ("print(f'scores {x}')", "print(f'scores {x.shape} {x.dtype}')\nlog.debug('n=%d', n)"),
    "GC107": ("assert (x >= 0).all()", "assert x.dim() == 2\nassert n > 0"),
    "GC108": ("ok = torch.allclose(x, x)", "ok = x.shape == x.shape"),
    "GC109": ("a = np.asarray(x)", "a = x.cumsum(-1)"),
    "GC201": ("if x.max() > 0:\n        pass", "if x.shape[0] > 1:\n        pass\nif n:\n        pass"),
    "GC202": ("while x.any():\n        x = x - 1", "while n > 0:\n        n -= 1"),
    "GC203": ("y = x if x.any() else x * 2", "y = x if n else x * 2"),
    "GC301": ("i = torch.nonzero(x)", "i = torch.topk(x, 2).indices"),
    "GC302": ("r = torch.where(x > 0)", "r = torch.where(x > 0, x, 0)"),
    "GC303": ("u = torch.unique(x)", "u = torch.sort(x).values"),
    "GC304": ("c = torch.bincount(x)", "c = torch.zeros(8).scatter_add_(0, x, torch.ones_like(x))"),
    "GC305": ("v = x[x > 0]", "v = x[:, 0]\nw = x.masked_fill(x > 0, 0)"),
    "GC306": ("v = torch.masked_select(x, x > 0)", "v = torch.where(x > 0, x, 0)"),
    "GC307": ("r = torch.repeat_interleave(x, x.long())", "r = torch.repeat_interleave(x, x.long(), output_size=16)\ns = x.repeat_interleave(2)"),
    "GC308": ("m = x.sum()\n    v = x[:m]", "v = x[:n]\nw = x[: x.shape[0] // 2]"),
    "GC401": ("t = torch.tensor([1.0, 2.0])", "t = torch.zeros(2)\nu = torch.empty_like(x)"),
    "GC402": ("t = x.cuda()", "t = x.to(x.device)"),
    "GC403": ("t = x.to(x.device, non_blocking=True)", "t = x.to(x.device)"),
    "GC404": ("x[0] = 1.0", "x[0] = x[1]\nx.fill_(1.0)"),
    "GC405": ("w = np.exp(n)", "w = torch.exp(x)"),
    "GC501": ("r = random.random()", "r = torch.rand(2)"),
    "GC502": ("r = np.random.rand(3)", "r = torch.randn(3)"),
    "GC601": ("torch.cuda.synchronize()", "torch.cuda.current_stream()"),
    "GC602": ("ev = torch.cuda.Event()\n    ev.synchronize()", "ev = torch.cuda.Event()\n    torch.cuda.current_stream().wait_event(ev)"),
    "GC603": ("ev = torch.cuda.Event()\n    done = ev.query()", "q = {}.get('query')"),
    "GC604": ("if torch.isnan(x).any():\n        raise ValueError('nan')", "y = torch.nan_to_num(x)"),
    "GC605": ("torch.cuda.empty_cache()", "torch.cuda.current_device()"),
    "GC701": ("s = sum(x)", "s = x.sum()\nt = sum([1, 2])"),
    "GC702": ("for row in x:\n        pass", "for i in range(x.shape[0]):\n        pass"),
    "GC801": None, "GC802": None, "GC803": None, "GC703": None, "GC704": None, "GC406": None,
}


def _body(b: str) -> str:
    lines = b.split("\n")
    return "\n".join("    " + ln.lstrip() if not ln.startswith("    ") else ln for ln in lines)


def _src(body: str) -> str:
    return HEAD + "def f(x: torch.Tensor, lst: list, n: int):\n" + _body(body) + "\n    return x\n"


@pytest.mark.parametrize("code", [c for c, v in CASES.items() if v])
def test_positive(scan_src, code):
    got = [f.rule for f in scan_src(_src(CASES[code][0]))]
    assert code in got, f"{code} not flagged; got {got}"


@pytest.mark.parametrize("code", [c for c, v in CASES.items() if v])
def test_negative(scan_src, code):
    got = [(f.rule, f.line, f.source) for f in scan_src(_src(CASES[code][1]))]
    assert got == [], f"look-alike flagged: {got}"


def test_state_rebind_outside_init(scan_src):
    src = HEAD + """
class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = torch.zeros(4, 8)          # init: fine
    def step(self, kv: torch.Tensor):
        self.k = torch.cat([self.k, kv])    # rebinds every step
    def ok(self, kv: torch.Tensor, pos: torch.Tensor):
        self.k.index_copy_(0, pos, kv)
"""
    got = [(f.rule, f.function) for f in scan_src(src)]
    assert got == [("GC406", "Cache.step")]


def test_module_level_host_tensor_moved_per_call(scan_src):
    src = """
import torch
TABLE = torch.tensor([0.0, 0.5, 1.0])
DEV_TABLE = torch.zeros(3, device="cuda")

def f(x: torch.Tensor):
    a = TABLE.to(x.device)              # pageable H2D copy on every call
    b = TABLE[:2].to(device=x.device)
    c = TABLE.to(torch.float16)         # dtype only: stays on the host
    d = DEV_TABLE.to(x.device)          # already on the device
    return a, b, c, d
"""
    got = [(f.rule, f.line) for f in scan_src(src) if f.rule == "GC402"]
    assert got == [("GC402", 7), ("GC402", 8)]


def test_custom_kernel_rules(scan_src):
    src = """
import torch
import cutlass.cute as cute
from torch.utils import cpp_extension

@cute.jit
def kern(a, stream):
    pass

def step(x: torch.Tensor, compiled):
    kern(x)                                     # GC801: no stream
    kern(x, stream=0)                           # GC803: stream 0
    kern(x, stream=torch.cuda.current_stream().cuda_stream)
    mod = cpp_extension.load_inline("m", "")    # GC802: JIT inside the step
    s = torch.cuda.default_stream()             # GC803
"""
    got = sorted((f.rule, f.line) for f in scan_src(src))
    assert got == [("GC801", 11), ("GC802", 14), ("GC803", 12), ("GC803", 15)]


def test_einops_and_callee_readback(scan_src):
    src = """
import torch
from einops import rearrange

def log_stats(t: torch.Tensor):
    return t.max().item()

def step(x: torch.Tensor):
    n = x.sum()
    y = rearrange(x, '(b n) d -> b n d', n=n)
    log_stats(x)
    z = rearrange(x, '(b n) d -> b n d', n=2)
    return y
"""
    got = sorted((f.rule, f.function) for f in scan_src(src, entry_points=["mod:step"]))
    assert ("GC703", "step") in got and ("GC704", "step") in got and ("GC101", "log_stats") in got
    assert sum(r == "GC703" for r, _ in got) == 1


def test_every_rule_is_documented():
    for fam in FAMILIES:
        for r in fam.rules.values():
            doc = r.doc()
            for section in ("## What it does", "## Why it breaks capture", "## Example", "## Use instead"):
                assert section in doc, (r.code, section)
            assert r.hint and r.message and not r.message.endswith(".")
    assert {c[:4] for c in RULES} >= {"GC00", "GC10", "GC20", "GC30", "GC40", "GC50", "GC60", "GC70", "GC80", "GC90"}

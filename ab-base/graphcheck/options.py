"""The options the commands hand to the layers below them, typed, with their one set of defaults; and the one table
of output formats. The CLI (cli.py, commands.py), the configuration (config.py), the renderer (report/), the
runtime layers (runtime/) and the torchrun entry point all read these names from here. Imports nothing of
graphcheck."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# name -> what it prints (report/render.py renders each)
FORMATS: dict[str, str] = {
    "concise": "path:line:col: CODE message, one line per reported row (greppable, clickable)",
    "full": "the same line, then the source line, the fix and (for run) the per-layer table",
    "json": "the inventory document: every row with its status (schema/inventory.schema.json)",
    "sarif": "SARIF 2.1.0; accepted rows are carried as externally suppressed results",
    "github": "workflow annotations (errors for new and unchecked rows, warnings for exemptions and stale entries)",
    "html": "a static page of the whole inventory",
}
FORMAT_ALIASES: dict[str, str] = {"text": "full"}      # the name before 0.2
DEFAULT_FORMAT = "full"

STEPS = 3        # steps audited or captured after warm-up
WARMUP = 1       # steps run before them
DEVICE = "auto"  # CUDA where there is one, the CPU emulation otherwise
STEP_TIMEOUT = 600.0   # seconds per call of a target's step; 0 or None: no limit (runtime/boundary.py)


def output_format(name: str) -> str:
    """The canonical name of a format or its alias; ValueError naming the valid ones otherwise."""
    name = FORMAT_ALIASES.get(name, name)
    if name not in FORMATS:
        raise ValueError(f"unknown output format {name!r}; expected one of {', '.join(FORMATS)}")
    return name


@dataclass(frozen=True)
class Output:
    """Where and how a Result is written (report/output.py)."""
    format: str = DEFAULT_FORMAT
    file: Path | None = None        # None or "-": stdout
    statistics: bool = False
    quiet: bool = False
    exit_zero: bool = False
    all_regions: bool = False       # --show-all-regions: list the rows outside the gated regions too


@dataclass(frozen=True)
class Runtime:
    """How the runtime layers run a target (audit, capture, and both on several ranks)."""
    steps: int = STEPS
    warmup: int = WARMUP
    device: str = DEVICE            # "auto", "cpu" or "cuda"
    strict: bool = False            # the CUDA sync layer stops at the first sync
    nproc: int = 1
    step_timeout: float | None = STEP_TIMEOUT

"""`[tool.graphcheck]` from the nearest pyproject.toml that has one, or from `--config FILE` (any TOML file with a
`[tool.graphcheck]` table, so several configurations can live side by side). Paths in it are relative to the file's
directory. Unknown keys and wrong types are errors naming the key."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .options import DEFAULT_FORMAT, FORMAT_ALIASES, FORMATS, STEP_TIMEOUT, STEPS, WARMUP


class ConfigError(ValueError):
    """Bad configuration or usage: the CLI prints it on one line and exits 2."""




@dataclass
class Config:
    root: Path = field(default_factory=Path.cwd)
    source: Path | None = None                 # the pyproject.toml it came from
    paths: list[str] = field(default_factory=lambda: ["."])
    exclude: list[str] = field(default_factory=list)
    entry_points: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    steps: int = STEPS
    warmup: int = WARMUP
    baseline: str = "graphcheck-baseline.json"
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    format: str = DEFAULT_FORMAT
    # regions (graphcheck/regions.py, `graphcheck explain regions`)
    per_step_entry_points: list[str] = field(default_factory=list)
    allowed_sync_contexts: list[str] = field(default_factory=list)
    eager_only: list[str] = field(default_factory=list)
    fan_out_limit: int = 8
    # where the code cannot say that a value lives on the host: names/attributes, and field markers
    host_resident: list[str] = field(default_factory=list)
    host_field_markers: list[str] = field(default_factory=list)
    step_timeout: float = STEP_TIMEOUT         # seconds per call of a target's step; 0: no limit (runtime/boundary.py)

    @property
    def baseline_path(self) -> Path:
        return (self.root / self.baseline) if not Path(self.baseline).is_absolute() else Path(self.baseline)


_KEYS = {  # toml key -> (attribute, type)
    "paths": ("paths", list), "exclude": ("exclude", list), "entry-points": ("entry_points", list),
    "targets": ("targets", list), "steps": ("steps", int), "warmup": ("warmup", int), "baseline": ("baseline", str),
    "select": ("select", list), "ignore": ("ignore", list), "format": ("format", str),
    "per-step-entry-points": ("per_step_entry_points", list), "allowed-sync-contexts": ("allowed_sync_contexts", list),
    "eager-only": ("eager_only", list), "fan-out-limit": ("fan_out_limit", int),
    "host-resident": ("host_resident", list), "host-field-markers": ("host_field_markers", list),
    "step-timeout": ("step_timeout", float),
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# what each region key's entries look like: a context's name (or a dotted suffix of it); a module, or mod:Qual
_SHAPES = {
    "allowed-sync-contexts": (lambda v: bool(_DOTTED.fullmatch(v)), "a context manager's name such as 'gpu_sync_allowed'"),
    "eager-only": (lambda v: all(_DOTTED.fullmatch(p) for p in v.split(":")) and v.count(":") <= 1,
                   "'pkg.mod', 'pkg.mod:Class' or 'pkg.mod:Class.method'"),
    "per-step-entry-points": (lambda v: v.count(":") == 1 and all(_DOTTED.fullmatch(p) for p in v.split(":")),
                              "'pkg.mod:Class.method'"),
}


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a TOML file with a [tool.graphcheck] table") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


def _has_table(data: dict) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and "graphcheck" in tool    # `tool = "graphcheck"` is a string, not a table


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.graphcheck] table (one without the table,
    e.g. a nested package's, is passed over, as ruff does)."""
    try:
        start = start.resolve()
    except (OSError, RuntimeError):     # a symlink loop (RuntimeError before Python 3.13): the scan reports the file
        start = start.absolute()
    if start.is_file() or not start.exists():
        start = start.parent
    for d in [start, *start.parents]:
        p = d / "pyproject.toml"
        if p.is_file() and _has_table(_read(p)):
            return p
    return None


def load_config(start: Path | None = None, explicit: Path | None = None) -> Config:
    """`explicit` (--config) must have the table; otherwise the nearest one above `start` (default: the current
    directory); with none, the defaults rooted at the current directory."""
    if explicit is not None:
        data = _read(explicit)
        if not _has_table(data):
            raise ConfigError(f"{explicit}: no [tool.graphcheck] table")
        path = Path(explicit)
    else:
        path = find_config(start or Path.cwd())
        if path is None:
            return Config(root=Path.cwd().resolve())
        data = _read(path)
    section = data["tool"]["graphcheck"]
    cfg = Config(root=Path(path).resolve().parent, source=Path(path))
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [tool.graphcheck] must be a table, found {type(section).__name__}")
    for key, value in section.items():
        if key not in _KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.graphcheck]; expected one of {', '.join(sorted(_KEYS))}")
        attr, typ = _KEYS[key]
        if typ is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a list of strings, found {value!r}")
        elif typ is float:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a non-negative number of seconds "
                                  f"(0: no limit), found {value!r}")
            value = float(value)
        elif typ is int:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a non-negative integer, found {value!r}")
        elif not isinstance(value, str):
            raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a string, found {value!r}")
        if key in _SHAPES:
            ok, want = _SHAPES[key]
            bad = next((v for v in value if not ok(v)), None)
            if bad is not None:
                raise ConfigError(f"{path}: [tool.graphcheck] {key}: expected {want}, found {bad!r}")
        if key in ("host-resident", "host-field-markers"):
            from .static.placement import Placement
            bad = next((p for p in map(lambda v: Placement.problem(key, v), value) if p), None)
            if bad:
                raise ConfigError(f"{path}: [tool.graphcheck] {key}: {bad}")
        setattr(cfg, attr, value)
    if cfg.format not in (*FORMATS, *FORMAT_ALIASES):
        raise ConfigError(f"{path}: [tool.graphcheck] format must be one of {', '.join(FORMATS)}, found {cfg.format!r}")
    if cfg.steps < 1:
        raise ConfigError(f"{path}: [tool.graphcheck] steps must be at least 1, found {cfg.steps}")
    if cfg.select or cfg.ignore:     # checked here, where the file is known: a bad code is the config's error
        from .rules import select_codes
        try:
            select_codes(cfg.select or None, cfg.ignore or None)
        except ValueError as e:
            raise ConfigError(f"{path}: [tool.graphcheck] {e}") from None
    return cfg

"""`[tool.graphcheck]` from the nearest pyproject.toml. Unknown keys and wrong types are errors naming the key."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """Bad configuration or usage: the CLI prints it on one line and exits 2."""


FORMATS = ("text", "json", "sarif", "github")


@dataclass
class Config:
    root: Path = field(default_factory=Path.cwd)
    source: Path | None = None                 # the pyproject.toml it came from
    paths: list[str] = field(default_factory=lambda: ["."])
    exclude: list[str] = field(default_factory=list)
    entry_points: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    steps: int = 3
    warmup: int = 1
    baseline: str = "graphcheck-baseline.json"
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    format: str = "text"

    @property
    def baseline_path(self) -> Path:
        return (self.root / self.baseline) if not Path(self.baseline).is_absolute() else Path(self.baseline)


_KEYS = {  # toml key -> (attribute, type)
    "paths": ("paths", list), "exclude": ("exclude", list), "entry-points": ("entry_points", list),
    "targets": ("targets", list), "steps": ("steps", int), "warmup": ("warmup", int), "baseline": ("baseline", str),
    "select": ("select", list), "ignore": ("ignore", list), "format": ("format", str),
}


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for d in [start, *start.parents]:
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_config(start: Path | None = None, explicit: Path | None = None) -> Config:
    path = explicit or find_pyproject(start or Path.cwd())
    if path is None:
        return Config(root=(start or Path.cwd()).resolve())
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    section = data.get("tool", {}).get("graphcheck", {})
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
        elif typ is int:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a non-negative integer, found {value!r}")
        elif not isinstance(value, str):
            raise ConfigError(f"{path}: [tool.graphcheck] {key} must be a string, found {value!r}")
        setattr(cfg, attr, value)
    if cfg.format not in FORMATS:
        raise ConfigError(f"{path}: [tool.graphcheck] format must be one of {', '.join(FORMATS)}, found {cfg.format!r}")
    if cfg.steps < 1:
        raise ConfigError(f"{path}: [tool.graphcheck] steps must be at least 1, found {cfg.steps}")
    return cfg

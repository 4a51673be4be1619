"""Declared placement: what the user says lives on the host where the code cannot say it (`[tool.graphcheck]`
`host-resident`, `host-field-markers`). Plain data and pure functions of names and class-body syntax; the inference
(inference.py) turns a yes into its HOST kind. Imports nothing of graphcheck, so the config can validate entries."""
from __future__ import annotations

import ast
import fnmatch
import re

_PATTERN = re.compile(r"[\w*?\[\]]+(\.[\w*?\[\]]+)?")
_MARKER = re.compile(r"[A-Za-z_]\w*")


class Placement:
    """Where the code cannot say it, the user declares it (`[tool.graphcheck]`): names and attributes that hold host
    tensors (`host-resident`), and the framework convention that marks a class field host-resident
    (`host-field-markers`: a field declared with `keep_on_cpu=True`, directly or in its `metadata={...}`).

    `host-resident` patterns (shell wildcards): `NAME` a local or parameter so named; `*.ATTR` that attribute of any
    object; `Class.ATTR` that attribute of an instance of the class (its `self.ATTR`, a parameter annotated
    `Class`, a dataclass field). Plain data (tuples of strings): it crosses to the scan's worker processes and into
    the cache key."""

    __slots__ = ("host", "markers", "_names", "_attrs")

    def __init__(self, host: tuple[str, ...] = (), markers: tuple[str, ...] = ()):
        self.host = tuple(host)
        self.markers = tuple(markers)
        self._names = tuple(p for p in self.host if "." not in p)
        self._attrs = tuple(tuple(p.split(".", 1)) for p in self.host if "." in p)

    def __reduce__(self):
        return Placement, (self.host, self.markers)

    def __bool__(self) -> bool:
        return bool(self.host or self.markers)

    def key(self) -> str:
        return repr((self.host, self.markers))

    @staticmethod
    def problem(key: str, value: str) -> str | None:
        """Why a declared entry is malformed (None when it is fine), for the config's one-line error."""
        if key == "host-field-markers":
            return None if _MARKER.fullmatch(value) else f"expected a keyword name such as keep_on_cpu, found {value!r}"
        return None if _PATTERN.fullmatch(value) else \
            f"expected NAME, *.ATTR or Class.ATTR (shell wildcards allowed), found {value!r}"

    def name(self, name: str) -> bool:
        """Whether a local or parameter so named is declared host-resident."""
        return bool(self._names) and any(fnmatch.fnmatchcase(name, p) for p in self._names)

    def attr(self, classes, attr: str) -> bool:
        """Whether `attr` of an instance of one of `classes` (or of any object) is declared host-resident."""
        return any((c == "*" or c in classes) and fnmatch.fnmatchcase(attr, a) for c, a in self._attrs)

    def marked(self, value: ast.AST | None) -> bool:
        """A field declaration carrying a marker: `SomeField(keep_on_cpu=True)`, `field(metadata={"keep_on_cpu":
        True})`; any truthy constant counts."""
        if not self.markers or not isinstance(value, ast.Call):
            return False
        for kw in value.keywords:
            if kw.arg in self.markers and isinstance(kw.value, ast.Constant) and kw.value.value:
                return True
        for v in [*value.args, *(kw.value for kw in value.keywords)]:
            if isinstance(v, ast.Dict):
                for k, x in zip(v.keys, v.values):
                    if isinstance(k, ast.Constant) and k.value in self.markers and isinstance(x, ast.Constant) \
                            and x.value:
                        return True
        return False


NO_PLACEMENT = Placement()

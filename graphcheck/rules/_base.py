"""Rule metadata and the checker protocol shared by every rule family.

A family module (``readback.py``, ``host_branch.py``, ...) declares its ``RULES`` with their documentation in
the house sections (what it does / why it breaks capture / example / use instead) and registers checkers
per AST node type with ``@on(ast.Call)``. The engine walks each file once and calls the checkers.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Rule:
    code: str
    name: str            # kebab-case, names the pattern
    message: str         # short phrase, code in backticks, no final period; may use {placeholders}
    hint: str            # imperative one-line fix
    what: str
    why: str
    example: str
    instead: str
    runtime: bool = True  # whether a runtime layer can also observe it

    @property
    def family(self) -> str:
        return self.code[:3]

    def doc(self) -> str:
        return (
            f"{self.code} {self.name}\n\n## What it does\n{self.what}\n\n## Why it breaks capture\n{self.why}\n\n"
            f"## Example\n```python\n{self.example.strip()}\n```\n\n## Use instead\n```python\n{self.instead.strip()}\n```\n"
        )


Checker = Callable[["object", ast.AST], None]


class Family:
    """Collects one family's rules and its node checkers."""

    def __init__(self, title: str, rules: list[Rule]):
        self.title = title
        self.rules = {r.code: r for r in rules}
        self.checkers: dict[type, list[Checker]] = {}

    def on(self, *node_types: type) -> Callable[[Checker], Checker]:
        def register(fn: Checker) -> Checker:
            for t in node_types:
                self.checkers.setdefault(t, []).append(fn)
            return fn
        return register

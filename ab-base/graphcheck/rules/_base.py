"""Rule metadata and the checker registration every rule module uses.

A rule module (``gc101_tensor_item.py``, ...) holds one rule: ``RULE`` with its documentation in the house
sections (what it does / why it breaks capture / example / use instead), ``RUNTIME`` (the aten ops and torch
callables the runtime layers attribute to the same hazard) and its checkers, registered per AST node type with
``@on(ast.Call)``. The engine walks each file once and calls them. Nothing here imports torch.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable

from ..vocab import dotted  # noqa: F401  (the rules' checkers import it from here)


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

    @property
    def template(self) -> str:
        """The message with its placeholders shown as such (`at step <step>`), for listings: dropping the braces
        printed `at step step` and `max abs diff diff`."""
        import re
        return re.sub(r"\{(\w+)\}", r"<\1>", self.message)

    def doc(self) -> str:
        return (
            f"{self.code} {self.name}\n\n## What it does\n{self.what}\n\n## Why is this bad?\n{self.why}\n\n"
            f"## Example\n```python\n{self.example.strip()}\n```\n\n## Use instead\n```python\n{self.instead.strip()}\n```\n"
        )


Checker = Callable[[object, ast.AST], None]


def on(*node_types: type, names: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> Callable[[Checker], Checker]:
    """Mark a rule module's function as the checker for these node types. For calls, ``names`` restricts it to
    calls whose function or method name (or the last part of its qualified name) is one of them, and ``prefixes``
    to calls whose qualified name starts with one of them: the engine dispatches on them instead of calling
    every checker on every call."""
    def mark(fn: Checker) -> Checker:
        fn.node_types = node_types  # type: ignore[attr-defined]
        fn.names = tuple(names)  # type: ignore[attr-defined]
        fn.prefixes = tuple(prefixes)  # type: ignore[attr-defined]
        return fn
    return mark


class Family:
    """A titled group of rules sharing a code prefix (GC1 = host readback, ...), for listings."""

    def __init__(self, title: str, rules: list[Rule]):
        self.title = title
        self.rules = {r.code: r for r in rules}

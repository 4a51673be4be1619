"""Vocabulary the static engine, its inference and the rules all speak, in a module that imports nothing of
graphcheck: the rule catalogue (``rules/``) and the static core (``static/``) both depend on it, and it depends on
neither, so each of them imports on its own and neither can close an import cycle through the other."""
from __future__ import annotations

import ast


def dotted(node: ast.AST) -> str:
    """'torch.cuda.synchronize' for an attribute chain, '' if it is not a plain chain."""
    if isinstance(node, ast.Name):      # the most common case, without building a list
        return node.id
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""

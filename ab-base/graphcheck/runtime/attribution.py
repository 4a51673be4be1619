"""Attribute a runtime event to the user: the first frame outside torch, graphcheck and a few stdlib helpers."""
from __future__ import annotations

import linecache
import os
import sys
import types
from pathlib import Path

import torch

def _launcher_dirs() -> list[str]:
    """What runs graphcheck rather than the user's step: the environment's console scripts (`bin/graphcheck`, whose
    absolute path ended every evidence stack) and pytest's and pluggy's own frames around a test body."""
    dirs = [os.path.join(sys.prefix, "bin"), os.path.join(sys.prefix, "Scripts")]
    for name in ("_pytest", "pluggy"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            dirs.append(os.path.dirname(mod.__file__))
    return dirs


_SKIP_DIRS = tuple(str(Path(p).resolve()) + os.sep for p in (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)),
                                                              *_launcher_dirs()))
_SKIP_FILES = {"contextlib.py", "functools.py", "warnings.py", "threading.py", "_contextlib.py", "runpy.py"}
_internal: dict[str, bool] = {}
MAX_STACK = 12


def is_internal(filename: str) -> bool:
    hit = _internal.get(filename)
    if hit is None:
        full = os.path.realpath(filename) if not filename.startswith("<") else filename
        hit = full.startswith(_SKIP_DIRS) or os.path.basename(filename) in _SKIP_FILES or filename.startswith("<frozen")
        _internal[filename] = hit
    return hit


def add_internal_dir(path: str | os.PathLike) -> None:
    """Treat frames under `path` as library frames, like torch's: a kernel DSL's own packing and launch code
    (CuTeDSL's `cutlass` package) is not where the user can fix anything."""
    global _SKIP_DIRS
    d = str(Path(path).resolve()) + os.sep
    if d not in _SKIP_DIRS:
        _SKIP_DIRS = (*_SKIP_DIRS, d)
        _internal.clear()


_root: list[str] = []


def set_root(root: str | os.PathLike | None) -> None:
    """Paths in runtime findings are made relative to this (the project root), like the scan's."""
    _root[:] = [os.path.abspath(root)] if root is not None else []


def relpath(filename: str) -> str:
    if filename.startswith("<"):
        return filename
    try:
        rel = os.path.relpath(os.path.abspath(filename), _root[0] if _root else os.getcwd())
    except ValueError:
        return Path(filename).as_posix()
    return Path(rel if not rel.startswith("..") else filename).as_posix()


def user_stack(frame: types.FrameType | None = None) -> list[tuple[str, int, str]]:
    """Innermost-first user frames as (path, line, qualified function)."""
    f = frame or sys._getframe(1)
    out: list[tuple[str, int, str]] = []
    while f is not None and len(out) < MAX_STACK:
        co = f.f_code
        if not is_internal(co.co_filename):
            out.append((co.co_filename, f.f_lineno, getattr(co, "co_qualname", co.co_name)))
        f = f.f_back
    return out


def first_user_frame(frame: types.FrameType | None) -> tuple[str, int, str] | None:
    """The innermost user frame only (what per-op records need), without walking the rest of the stack."""
    f = frame
    while f is not None:
        co = f.f_code
        if not is_internal(co.co_filename):
            return co.co_filename, f.f_lineno, getattr(co, "co_qualname", co.co_name)
        f = f.f_back
    return None


def stack_from_traceback(tb: types.TracebackType | None) -> list[tuple[str, int, str]]:
    """Innermost-first user frames of an exception's traceback (where a strict-mode sync raised)."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    out = []
    for fr, line in reversed(frames):
        co = fr.f_code
        if not is_internal(co.co_filename):
            out.append((co.co_filename, line, getattr(co, "co_qualname", co.co_name)))
    return out


def source_line(filename: str, line: int) -> str:
    return linecache.getline(filename, line).strip()

"""Enough of git's ignore rules for file discovery: `.gitignore` files from the scanned directory up to the
repository root and below it, with `*`, `**`, `?`, character classes, a leading `/` (anchored), a trailing `/`
(directories only) and `!` (re-include). No git binary needed."""
from __future__ import annotations

import os
import re
from pathlib import Path


def _compile(pat: str) -> re.Pattern:
    out = []
    i = 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                out.append("[" + pat[i + 1:j].replace("!", "^", 1) + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + "$")


class _Rules:
    def __init__(self, base: Path, lines: list[str]):
        self.base = base
        self.rules: list[tuple[re.Pattern, bool, bool, bool]] = []   # regex, negated, dir only, anchored
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            if neg:
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            line = line.lstrip("/")
            if line:
                self.rules.append((_compile(line), neg, dir_only, anchored))

    def match(self, rel: str, is_dir: bool) -> bool | None:
        verdict = None
        name = rel.rsplit("/", 1)[-1]
        for rx, neg, dir_only, anchored in self.rules:
            if dir_only and not is_dir:
                continue
            if rx.match(rel if anchored else name):
                verdict = not neg
        return verdict


class GitIgnore:
    """`ignored(path, is_dir)` for paths under ``top``; the .gitignore files of ``top``'s parents up to the
    repository root apply too."""

    def __init__(self, top: Path):
        self.top = Path(os.path.abspath(top))
        self._by_dir: dict[Path, _Rules | None] = {}
        self._chains: dict[str, list] = {}
        self.parents: list[Path] = []
        d = self.top
        while True:
            self.parents.append(d)
            if (d / ".git").exists() or d.parent == d:
                break
            d = d.parent
        self.parents.reverse()

    def _rules(self, d: Path) -> _Rules | None:
        if d not in self._by_dir:
            try:
                with open(d / ".gitignore", encoding="utf-8", errors="replace") as fh:
                    self._by_dir[d] = _Rules(d, fh.readlines())
            except OSError:
                self._by_dir[d] = None
        return self._by_dir[d]

    def _chain(self, d: str) -> list[tuple[str, _Rules]]:
        """The rules that apply inside directory ``d`` (absolute), outermost first."""
        hit = self._chains.get(d)
        if hit is None:
            if d == str(self.top) or not d.startswith(str(self.top) + os.sep):
                hit = [(str(p), r) for p in self.parents if (r := self._rules(p)) is not None]
            else:
                hit = list(self._chain(os.path.dirname(d)))
                r = self._rules(Path(d))
                if r is not None:
                    hit.append((d, r))
            self._chains[d] = hit
        return hit

    def ignored(self, path: Path, is_dir: bool) -> bool:
        ap = os.path.abspath(path)
        verdict = False
        for base, rules in self._chain(os.path.dirname(ap)):
            rel = ap[len(base) + 1:].replace(os.sep, "/")
            v = rules.match(rel, is_dir)
            if v is not None:
                verdict = v
        return verdict

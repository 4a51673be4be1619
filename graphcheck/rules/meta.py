"""GC9xx — findings about the scan itself: suppressions and files it could not read."""
from __future__ import annotations

from ._base import Family, Rule

FAMILY = Family("Scan hygiene", [
    Rule("GC901", "suppression-without-reason", "suppression of `{codes}` gives no reason", "add ` -- why this is safe` after the codes",
         "Flags `# graphcheck: ignore[...]` (or `# noqa: GCxxx`) comments with no `-- reason`.",
         "A suppression is a claim that a hazard is safe here; without the reason nobody can re-check it when the code changes.",
         "x = t.item()  # graphcheck: ignore[GC101]", "x = t.item()  # graphcheck: ignore[GC101] -- load time, runs once", runtime=False),
    Rule("GC902", "unused-suppression", "suppression of `{codes}` matches no finding", "remove the stale suppression",
         "Flags suppressions that suppress nothing on their line or the line below.",
         "Stale suppressions hide the next real hazard written on that line.", "y = x + 1  # graphcheck: ignore[GC101] -- old", "y = x + 1", runtime=False),
    Rule("GC903", "parse-error", "file could not be parsed: {error}", "fix the syntax error",
         "Reports files that are not valid Python.", "Nothing in the file can be checked, so its hazards go unseen.", "def f(:", "def f():", runtime=False),
    Rule("GC904", "unreadable-file", "file could not be read: {error}", "make the file readable UTF-8, or exclude it",
         "Reports files that cannot be opened or decoded.", "Nothing in the file can be checked, so its hazards go unseen.", "# (binary or latin-1 bytes)", "# -*- coding: utf-8 -*-", runtime=False),
    Rule("GC905", "unknown-suppression-code", "suppression names unknown code(s) `{codes}`", "use a code from `graphcheck rules`",
         "Flags suppressions naming codes that do not exist.", "A typo in a suppression silently suppresses nothing.",
         "# graphcheck: ignore[GC10] -- x", "# graphcheck: ignore[GC101] -- x", runtime=False),
])

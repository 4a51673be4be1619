"""The one-line verdict every output format ends with (or, for html, heads its page): its own module because both
the renderer and the html page use it, and the renderer dispatches to the html page (render -> html -> render would
be an import cycle)."""
from __future__ import annotations

from ..result import Result


def summary_line(result: Result, all_regions: bool = False) -> str:
    c = result.counts()
    rep = len(result.reported())
    st = result.layers.get("static")
    where = f" in {st['files']} file(s)" if st else ""
    targets = sum(1 for k in ("sync", "capture") if k in result.layers) and result.targets
    where += f", {len(result.targets)} target(s)" if targets else ""
    partial = bool(st and (st.get("unresolved_calls") or st.get("scope_warnings")))
    if result.baseline is None:
        # never "All checks passed" beside "NOT CHECKED": a run with problems checked only part of what it was asked
        head = (f"Found {rep} finding(s){where}" if rep else
                f"No findings in the part of the scope it could resolve{where}" if partial else
                f"No findings in what could be checked{where}" if result.problems else f"All checks passed{where}")
    else:
        head = (f"{len(result.findings)} row(s){where}; baseline {result.baseline}: {c['accepted']} accepted, "
                f"{c['new']} new, {c['stale']} stale")
        if result.unexamined:
            head += f", {result.unexamined} not examined by this run"
    if partial:
        n = st.get("unresolved_calls", 0)
        head += f" ({n} call(s) in scope could not be resolved; --show-scope lists them)" if n else ""
    other = result.by_region()
    if other:
        n = sum(other.values())
        head += (f"; {n} row(s) outside the gated regions ({', '.join(f'{r} {k}' for r, k in other.items())}"
                 + ("" if all_regions else "; --show-all-regions lists them") + ")")
    if c["unchecked"] or result.problems:
        head += f"; {len(result.problems)} thing(s) could not be checked"
    verdict = "NOT CHECKED" if result.problems else ("FAILED" if result.failed() else "PASSED")
    return f"{head}. {verdict}" if result.baseline is not None or result.problems else head + "."


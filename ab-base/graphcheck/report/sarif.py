"""SARIF 2.1.0 for code-scanning UIs: one result per row, rules with their full documentation. Accepted
(baselined) rows are results with an external suppression, so a code-scanning UI closes them instead of
reopening them; rows outside the gated regions are notes (`properties.region` names the region of every row);
what could not be checked is a failed invocation with one notification per problem."""
from __future__ import annotations

from ..result import Result
from ..rules import RULES

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def to_sarif(result: Result, version: str) -> dict:
    used = sorted({f.rule for f in result.findings})
    index = {code: i for i, code in enumerate(used)}
    rules = []
    for code in used:
        r = RULES.get(code)
        rules.append({
            "id": code, "name": r.name if r else code,
            "shortDescription": {"text": r.template if r else code},
            "fullDescription": {"text": r.what if r else code},
            "help": {"text": r.doc() if r else code, "markdown": r.doc() if r else code},
            "helpUri": f"https://github.com/graphcheck/graphcheck/blob/main/README.md#{code.lower()}",
            "properties": {"tags": ["cuda-graphs", "sync"]},
        })
    results = []
    for f in result.findings:
        status = result.status[f.fingerprint]
        region = {"startLine": max(f.line, 1), "startColumn": f.col + 1}
        if f.source:
            region["snippet"] = {"text": f.source}
        res = {
            "ruleId": f.rule, "ruleIndex": index[f.rule],
            "level": {"exempt": "warning", "ungated": "note"}.get(status, "error"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": f.path or "unknown"}, "region": region},
                           **({"logicalLocations": [{"fullyQualifiedName": f.function, "kind": "function"}]} if f.function else {})}],
            "properties": {"kind": f.kind, "count": f.count, "status": status, "region": f.region},
        }
        if status == "accepted":
            reason = result.reasons.get(f.fingerprint, "")
            res["suppressions"] = [{"kind": "external", "status": "accepted",
                                    "justification": f"accepted in the graphcheck baseline: {reason}" if reason
                                    else "accepted in the graphcheck baseline"}]
        if f.fingerprint:
            res["partialFingerprints"] = {"graphcheck/v1": f.fingerprint}
        chain = (f.evidence or {}).get("call_chain") or []
        if chain:
            # the static scan's path from the entry point: each call site is a related location, and the whole
            # path a code flow ending at the finding
            steps = [_loc(c["path"], c["line"], f"{c['function']} calls on", i) for i, c in enumerate(chain, 1)]
            res["relatedLocations"] = steps
            flow = [{"location": {k: v for k, v in s.items() if k != "id"}} for s in steps]
            flow.append({"location": {"physicalLocation": res["locations"][0]["physicalLocation"],
                                      "message": {"text": f.message}}})
            res["codeFlows"] = [{"threadFlows": [{"locations": flow}]}]
        results.append(res)
    invocation = {"executionSuccessful": not result.problems,
                  "toolExecutionNotifications": [{"level": "error", "message": {"text": p}} for p in result.problems]}
    return {"$schema": SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "graphcheck", "version": version, "informationUri":
                                          "https://github.com/graphcheck/graphcheck", "rules": rules}},
                      "invocations": [invocation], "results": results}]}


def _loc(path: str, line: int, text: str, i: int) -> dict:
    return {"id": i, "physicalLocation": {"artifactLocation": {"uri": path or "unknown"}, "region": {"startLine": max(line, 1)}},
            "message": {"text": text}}

"""SARIF 2.1.0 for code-scanning UIs: one result per row, rules with their full documentation. Accepted
(baselined) rows are results with an external suppression, so a code-scanning UI closes them instead of
reopening them; what could not be checked is a failed invocation with one notification per problem."""
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
            "shortDescription": {"text": r.message.replace("{", "").replace("}", "") if r else code},
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
            "ruleId": f.rule, "ruleIndex": index[f.rule], "level": "warning" if status == "exempt" else "error",
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": f.path or "unknown"}, "region": region},
                           **({"logicalLocations": [{"fullyQualifiedName": f.function, "kind": "function"}]} if f.function else {})}],
            "properties": {"kind": f.kind, "count": f.count, "status": status},
        }
        if status == "accepted":
            res["suppressions"] = [{"kind": "external", "justification": "accepted in the graphcheck baseline"}]
        if f.fingerprint:
            res["partialFingerprints"] = {"graphcheck/v1": f.fingerprint}
        results.append(res)
    invocation = {"executionSuccessful": not result.problems,
                  "toolExecutionNotifications": [{"level": "error", "message": {"text": p}} for p in result.problems]}
    return {"$schema": SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "graphcheck", "version": version, "informationUri":
                                          "https://github.com/graphcheck/graphcheck", "rules": rules}},
                      "invocations": [invocation], "results": results}]}

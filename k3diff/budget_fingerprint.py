"""The fingerprint of the budget table in force (k3diff/budgets.py): a short hash of every number
that decides a verdict (each row's rtol, atol multiple, accumulation constant, whole-tensor
multiples, bitwise flag, and the module's numeric constants), reasons left out, so rewording a
row keeps it and loosening one changes it. The results file's run record carries it; the report
shows it, and `k3diff report --compare` flags two runs judged under different tables: a loosened
tolerance in the same change would otherwise show only as "shares of budget went down".
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

PREFIX = "sha256:"
DIGITS = 16


def table() -> dict:
    """The numbers of the budget table, as plain JSON (what the fingerprint hashes)."""
    from k3diff import budgets

    def row(b):
        return {k: v for k, v in dataclasses.asdict(b).items() if k != "reason"}

    constants = {name: value for name, value in vars(budgets).items()
                 if name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)}
    rows = {f"{stage}/{tensor}": row(b) for (stage, tensor), b in budgets.TABLE.items()}
    return {"default": row(budgets.DEFAULT), "rows": rows, "constants": constants}


def fingerprint(numbers: dict | None = None) -> str:
    """`sha256:` and the first DIGITS hex digits of the table's canonical JSON."""
    text = json.dumps(table() if numbers is None else numbers, sort_keys=True, separators=(",", ":"))
    return PREFIX + hashlib.sha256(text.encode()).hexdigest()[:DIGITS]

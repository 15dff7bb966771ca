"""Distinct failures of a run: one per failing test item, its Hypothesis shrink steps folded under
the minimal case (the one saved as a seed, marked), grouped by stage and failing tensor.

A results file tags each case with its test item and phase (k3diff/results.py): after an item's
first failure every case it judges is a shrink step. Records without the tags (format 1) are each
their own failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3diff.report import tables


@dataclass
class Failure:
    stage: str
    tensor: str                       # the worst failing tensor, or crash/hang/error
    minimal: dict                     # the case record Hypothesis shrank to (the saved seed's case)
    saved: dict | None = None         # the "failure" line: seed path, replay command, headline
    steps: list = field(default_factory=list)    # every other record of the item after its first failure
    first: dict | None = None         # the failure as first drawn, before shrinking

    @property
    def failing_steps(self) -> int:
        return sum(map(tables.failed, self.steps))

    def replay(self, run_failures) -> str:
        return self.saved["replay"] if self.saved else tables.replay_command(self.minimal, run_failures)


def _tensor(c) -> str:
    err = c.get("error") or ""
    for kind in ("crash", "hang"):
        if err.startswith(kind + ":"):
            return kind
    if c.get("worst") and c["worst"][1] is not None and c["worst"][1] > 1:
        return tables.tensor_name("", c["worst"][0]).lstrip("/")
    head = (c.get("failure") or err or "error").split()
    return head[1].split("/", 1)[-1] if len(head) > 1 and head[0] == "FAIL" else "other"


def _saved_for(item, minimal_id, saved_lines):
    for f in saved_lines:
        if f.get("item") == item and item is not None:
            return f
    for f in saved_lines:
        if minimal_id and str(f.get("path", "")).endswith(f"-{minimal_id}.json"):
            return f
    return None


def distinct(run) -> list[Failure]:
    items = {}
    for c in run.cases:
        key = (c["stage"], c.get("item") or c["id"])
        items.setdefault(key, []).append(c)
    out = []
    for (stage, item), recs in items.items():
        failing = [c for c in recs if tables.failed(c)]
        if not failing:
            continue
        tagged = any("phase" in c for c in recs)
        saved = _saved_for(item if tagged else None, None, run.failures)
        if saved and saved.get("id"):
            ids = [c for c in failing if c["id"] == saved["id"]]
            minimal = ids[-1] if ids else failing[-1]
        elif saved is None:
            minimal = failing[-1]
            saved = _saved_for(None, minimal["id"], run.failures)
        else:
            minimal = failing[-1]
        first = failing[0]
        steps = [c for c in recs if tables.is_shrink(c) and c is not minimal]
        out.append(Failure(stage, _tensor(minimal), minimal, saved, steps, first if first is not minimal else None))
    # two items (chunks) that shrink to one case are one failing case: steps merged
    merged = {}
    for f in out:
        key = (f.stage, f.minimal["id"])
        if key in merged:
            merged[key].steps += f.steps
        else:
            merged[key] = f
    return sorted(merged.values(), key=lambda f: (f.stage, f.tensor, f.minimal["label"]))


def grouped(failures) -> dict:
    """(stage, tensor) -> [Failure], in order."""
    out = {}
    for f in failures:
        out.setdefault((f.stage, f.tensor), []).append(f)
    return out

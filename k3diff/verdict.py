"""A Verdict: everything k3diff concluded about one case, in the form a seed file records.

A pass needs judged evidence: a verdict over zero tensors (a candidate that provided nothing to
compare, or whose outputs were never judged) is a failure with its own reason, never `all([])`.
A skipped verdict (the case does not apply to this backend) judged nothing by definition and is
neither a pass nor a failure: the nothing-judged rule of the run counts it (k3diff.plugin).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3diff.budgets import pct
from k3diff.case import Case
from k3diff.divergence import TensorReport
from k3diff.routing import RoutingReport

NOTHING_JUDGED = ("nothing judged: the candidate provided no tensor to compare with the reference "
                  "(provides() empty, or changed since load); a pass needs judged evidence")


@dataclass
class Verdict:
    case: Case
    backend: str
    reports: list = field(default_factory=list)       # TensorReport
    routing: RoutingReport | None = None
    tie_flips: int = 0
    forced_replay: bool = False
    notes: list = field(default_factory=list)          # control findings that are not failures
    error: str | None = None                           # the candidate raised
    skipped: str | None = None                         # the case does not apply to this backend
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)         # seconds per phase (runner.PhaseClock)
    routed: dict | None = None                         # expert-id ranges routed to (k3diff.coverage)

    @property
    def nothing_judged(self) -> bool:
        """Judged, yet no tensor was compared: not a pass (a skipped case was not judged at all)."""
        return not self.skipped and not self.error and not self.reports

    @property
    def ok(self) -> bool:
        if self.error or self.nothing_judged:
            return False
        if self.routing is not None and not self.routing.ok:
            return False
        return all(r.ok for r in self.reports)

    def failures(self) -> list[str]:
        out = [f"ERROR {self.error}"] if self.error else []
        if self.nothing_judged:
            out.append(NOTHING_JUDGED)
        if self.routing is not None and not self.routing.ok:
            out.append(self.routing.line())
        out += [r.line() for r in self.reports if not r.ok]
        return out

    def worst(self) -> TensorReport | None:
        graded = [r for r in self.reports if r.bound > 0]
        return max(graded, key=lambda r: r.ratio) if graded else None

    def headline(self) -> str:
        if self.skipped:
            return f"SKIP {self.case.label()}: {self.skipped}"
        if self.ok:
            w = self.worst()
            worst = f"; worst {w.stage}/{w.tensor} at {pct(w.ratio)} of budget" if w else ""
            return f"PASS {self.case.label()}{worst}"
        return f"FAIL {self.case.label()}: {self.failures()[0]}"

    def to_dict(self) -> dict:
        """Everything a seed file records: plain JSON, identical for identical runs."""
        return {
            "ok": self.ok, "backend": self.backend, "error": self.error, "skipped": self.skipped,
            "tie_flips": self.tie_flips, "forced_replay": self.forced_replay, "notes": list(self.notes),
            "routing": None if self.routing is None else {
                "ok": self.routing.ok, "tie_flips": self.routing.tie_flips,
                "mismatched_tokens": list(self.routing.mismatched_tokens), "note": self.routing.note},
            "reports": [r.to_dict() for r in self.reports],
        }

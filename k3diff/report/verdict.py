"""The run's verdict, one function for everything that says it: the page's banner and meta tag,
`k3diff report`'s line and exit status, the markdown job summary. fail (a distinct failing case),
else incomplete (a results file cut short: killed, or still running), else pass.
"""
from __future__ import annotations

from k3diff import exit_codes

WORDS = {"fail": "FAIL", "incomplete": "INCOMPLETE", "pass": "PASS"}
# the verdict -> `k3diff report`'s exit status: the page and the status say the same
STATUS = {"pass": exit_codes.PASS, "fail": exit_codes.FAIL, "incomplete": exit_codes.INCOMPLETE}


def verdict(run, distinct) -> str:
    """`distinct`: the run's distinct failing cases (k3diff.report.failures.distinct)."""
    return "fail" if distinct else "incomplete" if run.truncated else "pass"


def of(run) -> str:
    """The verdict of a loaded run, its distinct failures found here."""
    from k3diff.report.failures import distinct

    return verdict(run, distinct(run))

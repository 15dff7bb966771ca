"""The run's verdict, one function for everything that says it: the page's banner and meta tag,
`k3diff report`'s line and exit status, the markdown job summary. fail (a distinct failing case),
else incomplete (a results file cut short: killed, or still running; or a run whose own exit
status was neither a pass nor a failure: interrupted, a case too large for its machine, nothing
judged: its end record says so, and a page must not read PASS where the run did not), else pass.
"""
from __future__ import annotations

from k3diff import exit_codes

WORDS = {"fail": "FAIL", "incomplete": "INCOMPLETE", "pass": "PASS"}
# the verdict -> `k3diff report`'s exit status: the page and the status say the same
STATUS = {"pass": exit_codes.PASS, "fail": exit_codes.FAIL, "incomplete": exit_codes.INCOMPLETE}


def verdict(run, distinct) -> str:
    """`distinct`: the run's distinct failing cases (k3diff.report.failures.distinct)."""
    return "fail" if distinct else "incomplete" if run.truncated or not_whole(run) else "pass"


def not_whole(run) -> list[str]:
    """Per results file whose run ended with a status other than 0 (passed) or 1 (a candidate
    failed), why: "FILE: the run exited 11 (not on this machine)"."""
    out = []
    for end in run.ends:
        status = end.get("exitstatus")
        if isinstance(status, int) and status not in (exit_codes.PASS, exit_codes.FAIL):
            out.append(f"{end.get('file', '?')}: the run exited {status} "
                       f"({exit_codes.MEANING.get(status, 'unknown status')})")
    return out


def of(run) -> str:
    """The verdict of a loaded run, its distinct failures found here."""
    from k3diff.report.failures import distinct

    return verdict(run, distinct(run))

"""The exit rule: one status per outcome, the same numbers for `pytest --k3diff` and `k3diff ...`.

A CI step reads the status without parsing text, so 1 means "the candidate is wrong" and nothing
else: every input k3diff cannot use has its own number and one line on stderr. The numbers below 6
are pytest's own (it owns 2, 4 and 5); `k3diff` follows them except that Ctrl-C and SIGTERM exit
130 and 143, as a shell expects of a tool.

A bad input found before any case runs ends the run at once. One found mid-run (a seed under
--k3diff-replay that cannot be read, a case too big for this GPU) fails its own test with the line,
the other cases still run, and the run exits with that input's number unless a candidate failed
(then 1: a wrong kernel outranks everything else). A fuzz search, and `k3diff hunt`, go on past a
case too big for this GPU (k3diff.search.skip_too_large) and end with the line and 11 unless they
found a failure.
"""
from __future__ import annotations

PASS = 0
FAIL = 1             # a candidate failed: a failing, crashing or hanging case
INTERRUPTED = 2      # pytest's: Ctrl-C (`k3diff`: 130, or 143 on SIGTERM)
USAGE = 4            # the command was wrong: an unknown option, a bad value, an impossible combination
NO_TESTS = 5         # pytest's: nothing collected (a -k that matched nothing)
NOTHING_JUDGED = 6   # the candidate refused (stages, supports()) every case of a stage it claims
OUTPUT_LOST = 7      # the results file, the report or stdout could not be written mid-run
BACKEND = 8          # the candidate cannot be used: unknown, or it raises, exits, crashes or hangs while
                     # imported, built or asked available(), or it breaks the backend contract
SEED = 9             # a seed or case cannot be read: no such file, not JSON, unknown fields, a case
                     # version this k3diff does not read, a backend name not registered here
PATH = 10            # an output k3diff cannot write: --k3diff-save, --k3diff-report (a folder, not
                     # writable, another run writing it)
MACHINE = 11         # this machine cannot judge it: no such device, a case too big for its GPU (by
                     # the estimate, or out of memory twice: k3diff.judge), more xdist workers than
                     # its GPUs hold
INCOMPLETE = 12      # the evidence is not whole: `k3diff report` of a results file cut short (no end
                     # record: killed, or still running); `k3diff report --compare` where NEW covers
                     # less than BASE (cases, boundaries crossed, expert-id ranges routed) or was
                     # judged under another budget table (its fingerprint differs): as loud as a new
                     # failure, but not "the candidate is wrong"

MEANING = {PASS: "passed", FAIL: "a candidate failed", INTERRUPTED: "interrupted", USAGE: "bad command",
           NO_TESTS: "nothing collected", NOTHING_JUDGED: "nothing judged", OUTPUT_LOST: "output lost",
           BACKEND: "bad backend", SEED: "bad seed", PATH: "bad output path", MACHINE: "not on this machine",
           INCOMPLETE: "incomplete"}


def status_of(exc: BaseException) -> int:
    """The exit status of one of k3diff's one-line errors: its class says (`exit_code`), else USAGE."""
    return getattr(exc, "exit_code", USAGE)


def worst(statuses) -> int:
    """One run's status from its bad inputs: FAIL first, then the lowest number (stable across shards)."""
    statuses = set(statuses)
    return FAIL if FAIL in statuses else min(statuses, default=PASS)

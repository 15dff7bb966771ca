"""A run stopped mid-item (Ctrl-C, a CI step's time limit) still counts the cases it judged: the
item in flight never gets a report, so its cases were missing from the summary's table, and the
`next:` line called the stop a failure."""
import pytest

SUITE = "from k3diff.suite import test_fuzz  # noqa\n"
# the third judged case's record stops the run, as a Ctrl-C mid-item does (in k3diff's own process)
STOP_AT_THIRD = '''
import k3diff.plugin as plugin

_write = plugin._write_report
_seen = []


def _stopping(config, record):
    _write(config, record)
    if record.get("kind") == "case":
        _seen.append(record)
        if len(_seen) == 3:
            raise KeyboardInterrupt


plugin._write_report = _stopping
'''


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(STOP_AT_THIRD)
    return pytester


def test_the_cases_of_the_item_in_flight_are_counted(project):
    result = project.runpytest_subprocess("--k3diff", "--k3diff-backend", "torch-blocked", "--k3diff-seed", "3",
                                           "--k3diff-profile", "ci", "-k", "fuzz and moe", "--k3diff-replay-saved",
                                           "off", "-p", "no:cacheprovider", "-p", "no:randomly")
    out = result.stdout.str()
    assert result.ret == 2, out                                     # pytest's interrupted status
    summary = out[out.index("k3diff summary"):]
    row = [ln.split() for ln in summary.splitlines() if ln.startswith("moe ")]
    assert row and int(row[0][1]) == 3, summary                     # the three judged cases, counted
    nxt = [ln for ln in summary.splitlines() if ln.startswith("next:")]
    assert nxt and "stopped" in nxt[0] and "3 judged case(s)" in nxt[0] and "--k3diff-seed 3" in nxt[0], nxt
    assert "the run failed" not in summary

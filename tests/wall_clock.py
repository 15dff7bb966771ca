"""The one wall-clock limit rule of the project's tests.

A test's limit on a subprocess (a pytest run, a compile, a CLI call) is a guard against a true
hang, never a speed check: a fixed 600 s on the compile tests failed scripts/test on a busy 2-core
machine while nothing hung. So `limit(seconds)` takes what the step needs on an idle 2-core box
with room to spare, and scales it by how loaded this machine is when the test starts (the 1-minute
load average per core, at least 1) and by 4 on top: a box shared by eight runs gets a limit past
CI's own job timeout (90 min), which is then the guard. K3DIFF_TEST_NO_LIMIT=1: no limit at all.
"""
import os


def limit(seconds: float) -> float | None:
    if os.environ.get("K3DIFF_TEST_NO_LIMIT") == "1":
        return None
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:                 # no load average on this platform
        load = 1.0
    return seconds * 4 * max(1.0, load)

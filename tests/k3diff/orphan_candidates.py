"""Candidates that misbehave as processes rather than as kernels, for the process-parent tests
(tests/k3diff/test_orphans.py): one closes its own stdout and stderr, one daemonises a child in a
session of its own (double fork + setsid, as a daemon does) that would outlive the run, and an EP
candidate whose rank does.

Each wraps the correct `torch-blocked` candidate and misbehaves only on one batch size. Loaded by
name (`orphan_candidates:Daemonises`) in a fresh child process, like any `module:object` backend.
"""
import os
import subprocess
import sys

from k3diff.backends.blocked_ep import BlockedEPRank
from k3diff.distributed import candidate

from crashing_candidates import _OnBatch     # the same misbehave-on-one-batch wrapper

# where the daemon's pid is written, so the test can look for it after the run
PIDFILE = "K3DIFF_TEST_DAEMON_PIDFILE"


class ClosesOutput(_OnBatch):
    """Closes file descriptors 1 and 2 (as a library that daemonises itself would) and writes on."""
    name = "orphan_candidates:ClosesOutput"

    def misbehave(self):
        sys.stdout.flush()
        sys.stderr.flush()
        os.close(1)
        os.close(2)
        print("after closing its own output")         # into whatever now holds fd 1
        print("after closing its own output", file=sys.stderr)


def start_daemon():
    """A `sleep` in a session of its own whose parent has exited: an orphan, adopted by the nearest
    subreaper (else by init), in no process group of ours. Its pid goes to $K3DIFF_TEST_DAEMON_PIDFILE."""
    code = ("import os, subprocess, sys\n"
            "p = subprocess.Popen(['sleep', '300'], start_new_session=True,\n"
            "                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "open(os.environ['%s'], 'w').write(str(p.pid))\n"
            "os._exit(0)\n" % PIDFILE)
    subprocess.run([sys.executable, "-c", code], check=True)      # the middle process exits: orphaned


class Daemonises(_OnBatch):
    """Leaves a daemonised `sleep` behind on the bad batch, then answers correctly."""
    name = "orphan_candidates:Daemonises"

    def misbehave(self):
        start_daemon()


class DaemonisesThenDies(_OnBatch):
    """Leaves a daemonised `sleep` behind, then dies itself (os._exit): nobody kills its group."""
    name = "orphan_candidates:DaemonisesThenDies"

    def misbehave(self):
        start_daemon()
        os._exit(3)


class DaemonisingRank(BlockedEPRank):
    """Rank 1 leaves a daemonised `sleep` behind in each step, then answers correctly."""

    def run_rank(self, stage, cfg, p, inputs, ctx):
        if ctx.rank == 1:
            start_daemon()
        return super().run_rank(stage, cfg, p, inputs, ctx)


DaemonisingRanks = candidate("ep-rank-daemonises", "orphan_candidates:DaemonisingRank")

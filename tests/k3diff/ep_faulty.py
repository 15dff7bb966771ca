"""Distributed candidates whose rank 1 dies or hangs mid-step (tests/k3diff/test_distributed.py):
rank 0 is then inside the dispatch all-to-all, waiting for a peer that never comes. Each rank
writes its pid into $K3DIFF_TEST_PIDS (a folder) so a test can see that none outlived a teardown."""
import os
import signal
import time

from k3diff.backends.blocked_ep import BlockedEPRank
from k3diff.distributed import candidate


class _Faulty(BlockedEPRank):
    fault = ""

    def prepare_rank(self, cfg, stage, shard, ctx):
        folder = os.environ.get("K3DIFF_TEST_PIDS")
        if folder:
            with open(os.path.join(folder, f"rank{ctx.rank}-{os.getpid()}"), "w"):
                pass
        return super().prepare_rank(cfg, stage, shard, ctx)

    def run_rank(self, stage, cfg, p, inputs, ctx):
        if ctx.rank == 1 and self.fault == "die":
            os.kill(os.getpid(), signal.SIGSEGV)
        if ctx.rank == 1 and self.fault == "hang":
            time.sleep(10_000)
        if ctx.rank == 1 and self.fault == "raise":
            raise ValueError("planted failure of rank 1")
        return super().run_rank(stage, cfg, p, inputs, ctx)


class DieRank(_Faulty):
    fault = "die"


class HangRank(_Faulty):
    fault = "hang"


class RaiseRank(_Faulty):
    fault = "raise"


Dies = candidate("ep-rank-dies", "ep_faulty:DieRank")
Hangs = candidate("ep-rank-hangs", "ep_faulty:HangRank")
Raises = candidate("ep-rank-raises", "ep_faulty:RaiseRank")

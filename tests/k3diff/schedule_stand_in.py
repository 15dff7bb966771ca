"""A CPU stand-in for a scheduled run, for the isolation test of the schedule dimension.

Loaded by name (`schedule_stand_in:OtherBitsUnderPressure`) in the candidate's own process, this
module replaces k3diff.schedule.fill there: a co-runner needs a GPU, so the scheduled run is
instead the candidate run once more, told which schedule it is under. The candidate gives the
eager run's bits twice over and other bits under any schedule, as the planted pressure bugs do
beside a co-runner (k3diff/schedule_mutants.py); the judging process must see them.
"""
from k3diff import schedule
from k3diff.backends.blocked import TorchBlockedBackend


def _fill_here(backend, stage, cfg, prepared, call) -> dict:
    backend.under = call["schedule"]
    try:
        backend.run(stage, cfg, prepared, call["inputs"], call["out"])
    finally:
        backend.under = ""
    return {}


schedule.fill = _fill_here


class OtherBitsUnderPressure(TorchBlockedBackend):
    stages = ("moe",)
    name = "schedule_stand_in:OtherBitsUnderPressure"
    under = ""

    def run(self, stage, cfg, prepared, inputs, out) -> None:
        super().run(stage, cfg, prepared, inputs, out)
        if self.under and "router_logits" in out:
            out["router_logits"].mul_(1.0 + 2.0 ** -20)     # a few ulps: wrong only bit for bit

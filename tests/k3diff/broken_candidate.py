"""A deliberately broken candidate for the plugin's own tests: the router's correction bias also
enters the combine weights (it must only steer the selection)."""
from k3diff.mutants import BY_NAME, MutantBackend


class BiasInWeights(MutantBackend):
    def __init__(self):
        super().__init__(BY_NAME["bias_in_weights"])
        self.name = "broken_candidate:BiasInWeights"


class ScaledFromStep1:
    """Correct at a multi-step case's step 0, then every step after it scales its output by 1.01:
    a uniform 1% error the max-element rule can let by, which only the whole-tensor rule at the
    later steps catches (k3diff.budgets.L2_RTOL_CHAINED). It knows a later step as a call whose
    carried state (cache or recurrent state) is bitwise one it wrote itself, the way a kernel that
    takes another path on a warm cache would; a case's first step, and its rerun, never are."""

    name = "broken_candidate:ScaledFromStep1"
    stages = ("mla", "kda", "layer")
    _STATE = ("kv_cache", "conv_state", "recurrent_state")

    def __init__(self):
        from k3diff.backends.blocked import TorchBlockedBackend

        self._inner = TorchBlockedBackend()
        self._written = set()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @staticmethod
    def _print(t):
        import hashlib

        import torch

        return hashlib.sha1(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()

    def run(self, stage, cfg, prepared, inputs, out):
        later = any(k in inputs and self._print(inputs[k]) in self._written for k in self._STATE)
        result = self._inner.run(stage, cfg, prepared, inputs, out)
        for k in self._STATE:
            if k in out:
                self._written.add(self._print(out[k]))
            elif k in inputs:               # a state the stage updates in place
                self._written.add(self._print(inputs[k]))
        if later:
            out["delta" if stage == "layer" else "out"].mul_(1.01)     # the stage's final output
        return result


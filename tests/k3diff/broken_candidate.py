"""A deliberately broken candidate for the plugin's own tests: the router's correction bias also
enters the combine weights (it must only steer the selection)."""
from k3diff.mutants import BY_NAME, MutantBackend


class BiasInWeights(MutantBackend):
    def __init__(self):
        super().__init__(BY_NAME["bias_in_weights"])
        self.name = "broken_candidate:BiasInWeights"

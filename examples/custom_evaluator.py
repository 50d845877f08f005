"""Add an evaluator: score candidates by parameters per layer of depth (a toy objective).

Run: ``python examples/custom_evaluator.py``; it registers the evaluator, scores three
random AdaBERT cells and prints each result.
"""

from evaluators import EVALUATORS, EvalResult, Evaluator, Objective, run_evaluation
from nas.cost import count_costs
from nas.space import get_space


@EVALUATORS.register("params-per-layer")
class ParamsPerLayer(Evaluator):
    """Fewer encoder parameters per cell is better (minimised)."""

    objectives = (Objective("params_per_layer", "minimize"),)

    def __init__(self, space, seq_len: int = 64):
        self.space, self.seq_len = space, seq_len

    def evaluate(self, arch, trial=None):
        costs = count_costs(self.space, arch, self.seq_len)
        value = costs.params_by_group["encoder"] / arch["depth"]
        if trial is not None:
            trial.report(0, value)  # an intermediate value: a pruner may stop here
        return EvalResult(values=(value,), costs={"params": costs.params,
                                                  "flops": costs.flops})


if __name__ == "__main__":
    space = get_space("adabert")
    evaluator = EVALUATORS.get("params-per-layer")(space)
    for seed in range(3):
        arch = space.sample(seed)
        result = run_evaluation(evaluator, arch)  # times it; a crash becomes "failed"
        print(arch.id, result.status, f"{result.values[0]:.0f}", result.costs["params"])

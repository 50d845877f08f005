"""Evaluators: score candidate architectures (cost model, efficiency penalties; the
warm-up-KD supernet evaluator plugs in the same way).

Importing the package registers the built-in evaluators in ``EVALUATORS``; none of
these modules imports torch at import time.
"""

from evaluators import costs, inherited, penalty, retrain, transfer, warmup_kd  # noqa: F401
from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    EvaluatorError,
    NullTrial,
    Objective,
    OptunaTrial,
    Status,
    Trial,
    TrialPruned,
    run_evaluation,
)

__all__ = ["EVALUATORS", "EvalResult", "Evaluator", "EvaluatorError", "NullTrial", "Objective",
           "OptunaTrial", "Status", "Trial", "TrialPruned", "run_evaluation"]

"""Evaluators: score candidate architectures (cost model, efficiency penalties, and the
training evaluators on one template, :mod:`evaluators.training`).

Importing the package registers the built-in evaluators in ``EVALUATORS``; none of
these modules imports torch at import time. :func:`build_evaluator` builds one by name.
"""

from evaluators import (  # noqa: F401  (registration)
    blockwise,
    costs,
    inherited,
    inherited_kd,
    penalty,
    retrain,
    tabular,
    transfer,
    warmup_kd,
)
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
from evaluators.build import build_evaluator
from evaluators.training import Trained, TrainingEvaluator

__all__ = ["EVALUATORS", "EvalResult", "Evaluator", "EvaluatorError", "NullTrial", "Objective",
           "OptunaTrial", "Status", "Trained", "Trial", "TrainingEvaluator", "TrialPruned",
           "build_evaluator", "run_evaluation"]

"""The objectives of a study: the method's evaluator plus the cost objectives that the
``multi_trial`` settings ask for and the searcher can take (docs/reference.md#optuna)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from evaluators.base import Evaluator
from evaluators.penalty import PenaltyEvaluator
from searchers.base import SEARCHERS, MultiTrialSearcher, SearcherError
from searchers.settings import StudySettings

if TYPE_CHECKING:
    from nas.space import SearchSpace

log = logging.getLogger("nas.study")


def study_evaluator(inner: Evaluator, space: SearchSpace, settings: StudySettings,
                    searcher: str | MultiTrialSearcher, seq_len: int = 128,
                    latency_fn: Callable[[Mapping[str, Any]], float] | None = None
                    ) -> Evaluator:
    """The evaluator a study optimises: ``inner`` plus the cost objectives that
    ``settings`` asks for and the searcher can take.

    * a searcher that handles several objectives with ``extra_objectives``: the inner
      objective(s) and the costs, minimised (a Pareto front);
    * otherwise, with ``targets``: the inner objective with the soft penalty (one line in
      the log says that the extra objectives were scalarised);
    * a single-objective searcher with extra objectives and no targets: refused.

    ``latency_fn`` (``arch -> ms``, a latency model): the latency objective, ceiling and
    target read it instead of the inner result's measured ``latency_ms``. ``searcher``: a
    registered name, or a built factory (:mod:`searchers.queued`).
    """
    if isinstance(searcher, MultiTrialSearcher):
        multi, searcher = searcher.multi_objective, searcher.name
    else:
        cls = SEARCHERS.get(searcher)
        multi = issubclass(cls, MultiTrialSearcher) and cls.multi_objective
    if settings.extra_objectives and multi:
        return PenaltyEvaluator(inner, space, seq_len=seq_len,
                                extra_objectives=settings.extra_objectives,
                                latency_fn=latency_fn)
    if settings.extra_objectives and not settings.targets:
        raise SearcherError(
            f"searcher {searcher!r} is single-objective, and the experiment asks for the "
            f"objectives {[*inner.objective_names, *settings.extra_objectives]} with no "
            "multi_trial.targets to scalarise them; add targets (e.g. {latency_ms: 2.0}) "
            "or use --searcher lamoo, nsga2, tpe or gp")
    if settings.targets:
        if settings.extra_objectives:
            log.info("%s is single-objective: optimising %s with a penalty past the "
                     "targets %s instead of the objectives %s", searcher,
                     inner.objective_names[0], settings.targets,
                     [*inner.objective_names, *settings.extra_objectives])
        return PenaltyEvaluator(inner, space, seq_len=seq_len, targets=settings.targets,
                                penalty_weight=settings.penalty_weight, latency_fn=latency_fn)
    return inner

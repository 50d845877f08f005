"""A study whose trials a method or a planned searcher chose: the architectures are queued
on the study before it runs and evaluated by the usual loop
(:func:`searchers.loop.run_study`), so they are trials like any searcher's (the run
folder's ``trials/``, the report, the Pareto front, ``nas export --run``, ``--resume``).

A planned searcher (:class:`searchers.base.PlannedSearcher`: method compress's
``knapsack``, the blockwise knapsack of Puzzle, Bercovich et al. 2025, §4, over
:mod:`evaluators.blockwise_knapsack`; ``truncation``) proposes its list, and the study
scores each pick with the run's evaluator. Such a study samples nothing of its own:
its sampler refuses to draw, and it runs exactly its queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from optuna.samplers import BaseSampler

from searchers.base import MultiTrialSearcher, SearcherError

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from searchers.optuna_bridge import SpaceBridge


class _QueueOnly(BaseSampler):
    """A sampler that never draws: every parameter of a queued trial is fixed by the
    queue (Optuna answers those without asking the sampler)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        raise SearcherError(f"searcher {self.name!r} proposes only the architectures it "
                            f"queued; trial {trial.number} asked for {param_name!r} beyond "
                            "them (run as many trials as were queued)")


class QueuedSearcher(MultiTrialSearcher):
    """The sampler factory of a study that runs the architectures a method queued
    (module docstring); ``name`` is what the study and its report call the search."""

    multi_objective: ClassVar[bool] = True

    def __init__(self, name: str) -> None:
        super().__init__()
        # an instance's own name: the registry's class-level name does not apply here
        self.name = name  # type: ignore[misc]  # a ClassVar on the class, set per instance here

    def sampler(self, seed: int, bridge: SpaceBridge | None = None) -> BaseSampler:
        return _QueueOnly(self.name)


__all__ = ["QueuedSearcher"]

"""The ``tabular`` evaluator: a tabular benchmark's recorded value, optionally noisy
(``nas/pool.py``).

On a finite-pool space (:class:`nas.pool.PoolSpace`: NAS-Bench-BERT, HW-GPT-Bench) a
candidate is scored by looking up its recorded row, so every searcher runs through the
same study loop, bridge, budget and reports as a real search, in milliseconds, against
a known answer. Real evaluations are noisy, so seeded noise can be added to the scores
(never to the costs): absolute for a score in points (``noise_sd``, e.g. 0.4 points, the
seed noise measured on SST-2) and relative for perplexity (``noise_rel``, e.g. 0.01).
The noise of an architecture depends only on ``(seed, architecture id)``: evaluating it
again, in any order or process, gives the same value, as a re-read of one measurement.

Objective values are the (noisy) scores; ``metrics`` holds every recorded score without
noise (what regret is measured on) and ``costs`` the recorded costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    EvaluatorError,
    Objective,
    ScoringData,
    Trial,
    TrialPruned,
    check_objectives,
)
from nas.architecture import Architecture

if TYPE_CHECKING:
    from nas.pool import PoolSpace


@dataclass(frozen=True)
class TabularSettings:
    """``tabular``: the recorded quantities to optimise (empty: the benchmark's first
    score), the absolute noise sd of scores in points and the relative noise sd of
    scores such as perplexity."""

    objectives: list[str] = field(default_factory=list)
    noise_sd: float = 0.0
    noise_rel: float = 0.0


@EVALUATORS.register("tabular")
class TabularEvaluator(Evaluator):
    """Looks up a recorded architecture's values (module docstring).

    ``objectives``: names of the benchmark's recorded quantities (scores or costs), each
    with the benchmark's direction; ``seed``: the noise's seed.
    """

    def __init__(self, space: PoolSpace, objectives: Sequence[str] = (),
                 noise_sd: float = 0.0, noise_rel: float = 0.0, seed: int = 0) -> None:
        from nas.pool import PoolSpace

        if not isinstance(space, PoolSpace):
            raise EvaluatorError(f"tabular evaluator: space {space.name!r} is not a tabular "
                                 "benchmark; use nas-bench-bert or hw-gpt-bench")
        known = list(space.metric_info)
        names = list(objectives) or space.names("score")[:1]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise EvaluatorError(f"tabular evaluator: {space.name} records no {unknown[0]!r}; "
                                 f"choose from {', '.join(known)}")
        for name, value in (("noise_sd", noise_sd), ("noise_rel", noise_rel)):
            if not (isinstance(value, int | float) and value >= 0):
                raise EvaluatorError(f"tabular evaluator: {name} must be a number >= 0, "
                                     f"got {value!r}")
        self.space = space
        self.noise_sd = float(noise_sd)
        self.noise_rel = float(noise_rel)
        self.seed = int(seed)
        self.objectives = check_objectives(
            [Objective(n, space.metric_info[n].direction) for n in names], "tabular evaluator")

    @classmethod
    def settings_type(cls) -> type:
        return TabularSettings

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, *, space: PoolSpace,  # type: ignore[override]  # takes the parts it names; build_evaluator checks them
                      seed: int = 0) -> TabularEvaluator:
        return cls(space, settings.objectives, settings.noise_sd, settings.noise_rel, seed)

    def noisy(self, arch: Architecture, recorded: dict[str, float]) -> dict[str, float]:
        """The scores of ``recorded`` with this evaluator's noise for ``arch`` (costs and
        proxies unchanged)."""
        rng = np.random.default_rng([self.seed, int(arch.id, 16)])
        out = dict(recorded)
        for name in self.space.names("score"):  # a fixed order: the same draw per name
            draw = float(rng.standard_normal())
            if self.space.metric_info[name].noise == "relative":
                out[name] = recorded[name] * (1.0 + self.noise_rel * draw)
            else:
                out[name] = recorded[name] + self.noise_sd * draw
        return out

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        row = self.space.row_of(arch)
        if row is None:
            raise EvaluatorError(
                f"architecture {self.space.validate(arch).id} is not a recorded row of "
                f"{self.space.name}; search it through the study loop, which maps a "
                "proposal to the nearest recorded row")
        recorded = self.space.record(row)
        observed = self.noisy(arch, recorded)
        values = tuple(observed[o.name] for o in self.objectives)
        if trial is not None:
            for step, (o, value) in enumerate(zip(self.objectives, values, strict=True)):
                trial.report(step, value)
                if trial.should_prune():
                    raise TrialPruned(f"pruned on {o.name} = {value:g}")
        scores = {k: recorded[k] for k in self.space.names("score")}
        costs = {k: recorded[k] for k in self.space.cost_names}
        return EvalResult(values=values, metrics=scores, costs=costs)

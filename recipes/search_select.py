"""The final selection of ``method: search``: which of a study's trials get the final
retrain (``final.select``: the best, the Pareto front, the front points nearest given
speed-ups over the teacher, or all)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nas.errors import NasError
from recipes.search_config import FinalSettings


def select_trials(study: Any, trials: list[Any], final: FinalSettings,
                  teacher_ms: float | None = None) -> list[Any]:
    """The trials ``final`` retrains (see :class:`FinalSettings`), in a stable order."""
    from searchers.results import pareto_front

    first = study.directions[0]
    sign = 1.0 if first.name == "MAXIMIZE" else -1.0
    by_score = sorted(trials, key=lambda t: (-sign * t.values[0], t.number))
    if final.select == "all":
        return sorted(trials, key=lambda t: t.number)
    if final.select == "best" or len(study.directions) == 1:
        return by_score[:final.n]
    front = sorted(pareto_front(study), key=lambda t: (t.values[1], t.number))
    if final.select == "pareto":
        if len(front) <= final.n:
            return front
        picks = np.linspace(0, len(front) - 1, final.n).round().astype(int)
        return [front[i] for i in dict.fromkeys(picks.tolist())]
    if teacher_ms is None:
        raise NasError("final.select latency_ratios needs the teacher's measured latency "
                       "(teacher.json of the run folder)")
    index = study.metric_names.index("latency_ms") if study.metric_names else 1
    chosen: list[Any] = []
    for ratio in final.ratios:
        target = teacher_ms / float(ratio)
        best = min(front, key=lambda t: (abs(math.log(t.values[index] / target)), t.number))
        if best not in chosen:
            chosen.append(best)
    return chosen


__all__ = ["select_trials"]

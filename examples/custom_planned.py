"""Add a planned searcher: evaluate a list of architectures of your own, in a dozen lines.

A planned searcher proposes a fixed list from what the run hands it (the parts its
``plan`` names: the ``space`` and the study's ``budget`` here; method compress also hands
the sorted teacher's blockwise ``table`` and ``truncations``). The method queues the list
on its study, so each architecture is a trial scored by the run's evaluator, and the
Pareto front, the final retrain, the report and ``--resume`` treat it as any searcher's.
Its settings are a dataclass, checked like an evaluator's.

Run: ``python examples/custom_planned.py`` (the plan on the small AdaBERT space), or in a
search: ``nas run examples/custom_search.yaml --plugin examples/custom_planned.py --set
'searcher={name: my-list, settings: {archs: [{a: skip}, {a: std_conv_3}]}}'``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from searchers.base import SEARCHERS, Plan, PlannedSearcher, SearcherError


@dataclass
class ListSettings:
    """``archs``: the architectures to evaluate, each a mapping of some choices (the
    space's defaults give the rest); none: the space's default alone."""

    archs: list = field(default_factory=list)


@SEARCHERS.register("my-list")
class MyList(PlannedSearcher):
    """Your own architectures, in order, those within the run's constraints."""

    name = "my-list"

    @classmethod
    def settings_type(cls):
        return ListSettings

    def plan(self, space, budget):
        archs = [space.validate({**space.default(), **a}) for a in self.settings.archs or [{}]]
        queue = [(f"mine-{i}", arch) for i, arch in enumerate(archs)
                 if budget.violation(budget.costs(space, arch)) is None]
        if not queue:
            raise SearcherError("searcher my-list: no architecture of settings.archs fits "
                                "the constraints; list some, or loosen the constraints")
        return Plan(queue)


if __name__ == "__main__":
    from nas.space import get_space, small_config
    from searchers.base import resolve_searcher
    from searchers.optuna_bridge import Budget

    space = get_space("adabert", **small_config("adabert"))
    first = space.choices()[0]
    mine = resolve_searcher({"name": "my-list", "settings": {"archs": [
        {first.name: value} for value in first.values[:2]]}})
    plan = mine.build().plan(space=space, budget=Budget(seq_len=16))
    for tag, arch in plan.queue:
        print(tag, arch.id)

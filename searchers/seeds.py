"""Seed architectures a multi-trial search evaluates first: the space's
default, its largest and smallest architectures, and published ones from files.

"Largest" and "smallest" are by parameter count from the graph (:func:`nas.cost.
count_costs`), found by coordinate search from the default: each choice in turn takes
the valid value that most increases (decreases) the count with the others fixed, until
a pass changes nothing. That is exact for spaces whose parameters add up over choices
(widths, stack numbers, op choices of independent layers) and a good approximation
otherwise. Within a budget, "largest" stays within it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nas.architecture import Architecture, load_architecture
from nas.errors import ArchitectureError, NasError
from searchers.optuna_bridge import Budget

if TYPE_CHECKING:
    from nas.space import SearchSpace

log = logging.getLogger("nas.study")

KEYWORDS = ("default", "largest", "smallest")


def extreme_architecture(space: SearchSpace, largest: bool, budget: Budget | None = None,
                         seq_len: int = 128, max_passes: int = 5) -> Architecture:
    """The architecture with the most (``largest``) or fewest parameters, by coordinate
    search from the default (module docstring)."""
    from nas.cost import count_costs
    from nas.graph import position_limit

    seq_len = min(seq_len, position_limit(space.graph) or seq_len)
    sign = 1 if largest else -1

    def score(arch: Architecture) -> tuple[int, int]:
        c = count_costs(space, arch, seq_len)
        return sign * c.params, sign * c.flops

    def allowed(arch: Architecture) -> bool:
        return not largest or budget is None or budget.violation(
            budget.costs(space, arch)) is None

    best = space.default()
    best_score = score(best)
    for _ in range(max_passes):
        changed = False
        for choice in space.choices():
            for value in choice.values:
                try:
                    candidate = space.validate(best.replace(**{choice.name: value}))
                except ArchitectureError:
                    continue
                s = score(candidate)
                if s > best_score and allowed(candidate):
                    best, best_score, changed = candidate, s, True
        if not changed:
            break
    return best


def seed_architectures(space: SearchSpace, names: Sequence[str],
                       budget: Budget | None = None) -> list[tuple[str, Architecture]]:
    """``(tag, architecture)`` per seed name: a keyword of :data:`KEYWORDS` or the path of
    an architecture JSON file (a partial one takes the default for the other choices).
    Repeats are dropped; the tag of a file is its stem."""
    seeds: list[tuple[str, Architecture]] = []
    for name in names:
        if name == "default":
            arch = space.default()
        elif name in ("largest", "smallest"):
            arch = extreme_architecture(space, name == "largest", budget)
        else:
            if not Path(name).is_file():
                raise NasError(f"seed architecture {name!r}: neither one of {list(KEYWORDS)} "
                               "nor an architecture JSON file")
            loaded = load_architecture(name)
            assert loaded is not None  # noqa: S101 (a path always loads or raises)
            if loaded.space not in (None, space.name):
                raise NasError(f"seed architecture {name}: it is for space {loaded.space!r}, "
                               f"not {space.name!r}")
            arch = space.validate({**space.default(), **loaded})
            name = Path(name).stem
        if all(arch.id != a.id for _, a in seeds):
            seeds.append((name, arch))
        else:
            log.info("seed %s is the same architecture as an earlier seed; skipped", name)
    return seeds

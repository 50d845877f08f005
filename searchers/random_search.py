"""Random search: uniform samples of valid architectures, the baseline every searcher
must beat (SPEC §2's random baseline; Li & Talwalkar, 2019)."""

from __future__ import annotations

from typing import Any

from nas.architecture import Architecture
from searchers.base import SEARCHERS, MultiTrialSearcher


@SEARCHERS.register("random")
class RandomSearcher(MultiTrialSearcher):
    """Uniform valid samples (the space's rejection sampler, drawn from ``self.rng``)
    without repeats while the space has unseen architectures (deduplicated by id).

    Once every architecture was asked, repeats are allowed. Rejection sampling gives up
    after ``max_tries`` draws and repeats one, which only happens when almost all of a
    large space was asked already.
    """

    max_tries = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._size: int | None = None

    def propose(self) -> tuple[Architecture, dict[str, Any]]:
        if self._size is None:
            self._size = self.space.size()
        exhausted = len(self.asked_ids) >= self._size
        for _ in range(self.max_tries):
            arch = self.space.sample(self.rng)
            if exhausted or not self.seen(arch):
                break
        return arch, {}

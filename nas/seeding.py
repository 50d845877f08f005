"""Per-stage seeds: every stage of a run starts from a seed derived from the run's seed
and the stage's name, never from whatever RNG state earlier stages left behind.

Why: a search that consumed the global RNG derived a different architecture depending on
whether the teacher came from the cache (fine-tuning on a cache miss drew from it). With
a seed per stage, a stage's result depends only on (run seed, stage name, its inputs):
the same with a cold or a warm cache, and the same after a resume at any stage.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np

#: The largest seed a run, a stage section or ``--seed`` takes: numpy's legacy seeding and
#: the samplers seeded from it take [0, 2**32 - 1], and a value outside would fail there,
#: after the stages before it ran.
MAX_SEED = 2**32 - 1
#: what a seed may be, for the one-line errors that refuse another
SEED_RANGE = f"an integer in [0, {MAX_SEED}]"


def is_seed(value: object) -> bool:
    """Whether ``value`` is a seed this engine takes (an integer in [0, :data:`MAX_SEED`];
    ``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED


def stage_seed(run_seed: int, stage: str) -> int:
    """A 63-bit seed from a hash of the run's seed and the stage's name (stable across
    Python versions and processes, unlike ``hash()``)."""
    digest = hashlib.sha256(f"{int(run_seed)}:{stage}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


#: The stage whose seed draws a run's sample of its report split (``data.max_report_examples``):
#: the recipes draw it, ``nas evaluate RUN`` draws it again.
REPORT_SAMPLE_STAGE = "report-subset"


def sample_rows(total: int, n: int | None, run_seed: int, stage: str) -> list[int] | None:
    """The rows of a seeded sample of ``n`` out of ``total`` for ``stage``, in file order
    (``None``: all of them, when ``n`` is ``None`` or not smaller). One definition for the
    recipes' capped splits and for ``nas evaluate`` scoring the sample a run scored."""
    if not n or n >= total:
        return None
    rng = np.random.default_rng(stage_seed(run_seed, stage))
    return np.sort(rng.permutation(total)[:n]).tolist()


def seed_stage(run_seed: int, stage: str) -> int:
    """Re-seed every global RNG (torch, numpy, random) for ``stage`` and return its seed.

    The global RNGs are re-seeded as well as the stage's own generators because dropout
    and parameter initialisation take no generator. Use the returned seed for the stage's
    private generators (``torch.Generator().manual_seed(seed)``,
    ``np.random.default_rng(seed)``).
    """
    import torch

    seed = stage_seed(run_seed, stage)
    torch.manual_seed(seed)
    np.random.seed(seed % (1 << 32))
    random.seed(seed)
    return seed

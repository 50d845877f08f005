"""Searchers: propose candidate architectures, one module per searcher behind the small
base classes of :mod:`searchers.base` (random search, differentiable GDAS/AdaBERT).

Importing the package registers the torch-free searchers and *declares* the ones whose
module imports torch (loaded on first use), so listing searchers stays cheap.
"""

from searchers import random_search  # noqa: F401  (registration)
from searchers.base import SEARCHERS

SEARCHERS.declare("differentiable", "searchers.differentiable", kind="one-shot")

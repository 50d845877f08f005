"""Searchers: propose candidate architectures, one module per searcher behind the small
base classes of :mod:`searchers.base`: the multi-trial searchers on Optuna (``random``,
``random-params``, ``tpe``, ``nsga2``, ``gp``, ``lanas``, ``lamoo``;
:mod:`searchers.optuna_searchers`; ``local-search``, ``regularized-evolution``:
:mod:`searchers.evolution`; ``wl-bo``: :mod:`searchers.wl_bo`), the
differentiable GDAS/AdaBERT search and EfficientBERT's sampled-supernet search
(one-shot), and the planned ``knapsack`` and ``truncation`` of method compress.

Importing the package *declares* the searchers (each module is loaded on first use), so
listing searchers imports neither optuna nor torch.
"""

from searchers.base import SEARCHERS

for _name in ("random", "random-params", "tpe", "nsga2", "gp", "lanas", "lamoo"):
    SEARCHERS.declare(_name, "searchers.optuna_searchers", kind="multi-trial")
for _name in ("local-search", "regularized-evolution"):
    SEARCHERS.declare(_name, "searchers.evolution", kind="multi-trial")
SEARCHERS.declare("wl-bo", "searchers.wl_bo", kind="multi-trial")
SEARCHERS.declare("differentiable", "searchers.differentiable", kind="one-shot")
SEARCHERS.declare("sampled-supernet", "searchers.sampled_supernet", kind="one-shot")
SEARCHERS.declare("knapsack", "searchers.knapsack", kind="planned")
SEARCHERS.declare("truncation", "searchers.truncation", kind="planned")

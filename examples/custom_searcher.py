"""Add a searcher: Optuna's default, univariate TPE (Bergstra et al., 2011), next to the
built-in multivariate ``tpe`` (Falkner et al., 2018), in a dozen lines.

A multi-trial searcher is a sampler factory: it builds the Optuna sampler of a study, and
the study stores every trial. Subclassing ``PerTrialSearcher`` rebuilds the sampler for
every trial from a seed derived from the trial's number, so that a resumed search
proposes what the uninterrupted one would have.

Run: ``python examples/custom_searcher.py`` (a 20-trial study on a toy objective), or in a
search: ``nas run examples/tour.yaml --plugin examples/custom_searcher.py --set
searcher=tpe-univariate --run-dir runs/tour-univariate``.
"""

from __future__ import annotations

import optuna

from searchers.base import SEARCHERS
from searchers.optuna_searchers import PerTrialSearcher


@SEARCHERS.register("tpe-univariate")
class UnivariateTPE(PerTrialSearcher):
    """Each choice modelled on its own (TPE's original form); constraint-aware like ``tpe``."""

    name = "tpe-univariate"
    constraint_aware = True  # the study's budget reaches the sampler as constraints_func

    def build(self, seed, bridge):
        return optuna.samplers.TPESampler(seed=seed, **self.constraint_options(bridge),
                                          **self.options)


if __name__ == "__main__":
    # A bare Optuna study: without a space's bridge the sampler works on whatever the
    # trials suggest (as in Optuna's own sampler tests). The same seed gives the same trials.
    def objective(trial: optuna.Trial) -> float:
        op = trial.suggest_categorical("op", ["std_conv_3", "max_pool_3", "skip"])
        return (op == "std_conv_3") + trial.suggest_int("depth", 1, 8) / 8

    sampler = SEARCHERS.get("tpe-univariate")().sampler(seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=20)
    print("best:", study.best_params, "value", study.best_value)

"""Searchers: propose candidate architectures (differentiable, LaNAS tree, Optuna)."""

"""Recipes: one module per method, each a thin composition of data, teacher, searcher,
evaluator, training loop and export (registered through the ``nas.methods`` entry points)."""

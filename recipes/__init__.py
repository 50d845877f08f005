"""Recipes: one module per method, each a thin composition of data, teacher, searcher,
evaluator, training loop and export.

This package is the built-in plug-in of the ``nas.methods`` entry-point group: importing
it imports every built-in recipe, whose ``@register_method`` runs. A new recipe adds its
import here (no reinstall needed, unlike a new entry point).
"""

from recipes import (  # noqa: F401  (registration)
    adabert,
    compress,
    efficientbert,
    mixedvocab,
    mobilebert,
    search,
    tinybert,
)

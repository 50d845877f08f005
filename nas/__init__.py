"""NAS engine for compact Transformers: one graph IR, one supernet and child builder.

The public names below are imported on first use (PEP 562), so that ``import nas`` and
the command line start without importing torch; a cached answer stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run": "nas.api", "search": "nas.api", "RunResult": "nas.api", "SearchResult": "nas.api",
    "Architecture": "nas.architecture", "load_architecture": "nas.architecture",
    "Categorical": "nas.choices", "IntChoice": "nas.choices", "per_layer": "nas.choices",
    "ArchitectureError": "nas.errors", "NasError": "nas.errors",
    "RegistryError": "nas.errors", "SpaceDefinitionError": "nas.errors",
    "ActiveIf": "nas.graph", "ChoiceRef": "nas.graph", "ChoiceValue": "nas.graph",
    "Dim": "nas.graph",
    "GraphBuilder": "nas.graph",
    "SPACES": "nas.space", "Constraint": "nas.space", "SearchSpace": "nas.space",
    "get_space": "nas.space", "list_spaces": "nas.space", "register_space": "nas.space",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'nas' has no attribute {name!r}")

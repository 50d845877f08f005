"""NAS engine for compact Transformers: one graph IR, one supernet and child builder."""

from nas.architecture import Architecture, load_architecture
from nas.choices import Categorical, IntChoice, per_layer
from nas.errors import ArchitectureError, NasError, RegistryError, SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceRef, Dim, GraphBuilder
from nas.space import SPACES, Constraint, SearchSpace, get_space, list_spaces, register_space

__all__ = [
    "ActiveIf", "Architecture", "ArchitectureError", "Categorical", "ChoiceRef", "Constraint",
    "Dim", "GraphBuilder", "IntChoice", "NasError", "RegistryError", "SPACES", "SearchSpace",
    "SpaceDefinitionError", "get_space", "list_spaces", "load_architecture", "per_layer",
    "register_space",
]
__version__ = "0.1.0"

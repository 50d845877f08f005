"""Error types for bad input.

Every error a user can cause (a bad architecture, an unknown name, a broken file)
is a ``ValueError`` subclass whose message states the rule, the bad value and the
fix, so the CLI can print it as one line instead of a traceback.
"""

from __future__ import annotations


class NasError(ValueError):
    """Base class of every user-facing error of the engine."""


class ArchitectureError(NasError):
    """An architecture does not fit its search space (unknown choice, bad value, broken JSON)."""


class RegistryError(NasError, KeyError):
    """A name is unknown to a registry, or registered twice."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SpaceDefinitionError(NasError):
    """A search space's graph or choices are inconsistent (a bug in the space's declaration)."""


class DataError(NasError):
    """A data file, task name or data directory is missing or malformed (names file and line)."""


class ExportError(NasError):
    """An exported model directory is missing a file, names an unknown op or does not fit
    its weights (the message names the file and the problem), or a model cannot be
    exported in the asked format."""

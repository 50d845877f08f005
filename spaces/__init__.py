"""Search-space families, one module each, registered by name (``nas spaces list``)."""

from spaces import adabert, efficientbert  # noqa: F401  (registration)

"""Search-space families, one module each, registered by name (``nas spaces list``)."""

from spaces import adabert, bert, efficientbert, mobilebert  # noqa: F401  (registration)

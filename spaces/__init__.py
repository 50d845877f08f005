"""Search-space families, one module each, registered by name (``nas spaces list``).

This package is the built-in plug-in of the ``nas.spaces`` entry-point group
(``pyproject.toml``): :data:`nas.space.SPACES` imports it on its first lookup, and the
imports below run each family's ``@register_space``. The core never imports ``spaces``;
an installed package adds its own families the same way (``docs/plugins.md``).
"""

from spaces import (  # noqa: F401  (registration)
    adabert,
    bert,
    bert_subnet,
    efficientbert,
    hw_gpt_bench,
    mobilebert,
    nasbench_bert,
)

"""``python -m nas.cli``: the same as the ``nas`` command."""

import sys

from nas.cli import main

sys.exit(main())

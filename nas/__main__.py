"""``python -m nas ...``: the ``nas`` command, for an environment without its script."""

import sys

from nas.cli import main

sys.exit(main())

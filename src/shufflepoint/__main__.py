"""``python -m shufflepoint``: the same command as the ``shufflepoint`` console script."""

import sys

from shufflepoint._tools.cli import main

sys.exit(main())

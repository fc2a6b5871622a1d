"""``python -m shufflepoint._tools.demo PHASE OUT VARIANT...``: the demo's worker, under torchrun."""

import sys

from shufflepoint._tools.demo.worker import worker_main

sys.exit(worker_main(sys.argv[1:]))

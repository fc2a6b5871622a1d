"""The phases of a simulated job in ``make bench-locality``: every rank of every node stops between phases
(an index built, an epoch read, a stop), so the orchestrator can read the proxy's byte counters in between.

Imported by the workers, ours and the peers' (benchmarks/_locality_worker.py, _locality_peer_worker.py), in
whichever venv they run: it needs only torch.distributed.
"""

from __future__ import annotations

import os
import time

import torch.distributed as dist


def phase(marks: str, name: str) -> None:
    """Every rank done with ``name``; rank 0 writes ``<marks>/<name>`` and waits for ``<name>.go`` (the
    orchestrator has read the counters); then everyone goes on."""
    dist.barrier()
    if dist.get_rank() == 0:
        open(os.path.join(marks, name), "w").close()
        while not os.path.exists(os.path.join(marks, name + ".go")):
            time.sleep(0.02)
    dist.barrier()

"""Python's cyclic garbage collector held off while a process builds many small acyclic objects.

Reading the index of 1e5 shards (a listing, a 4 MB JSON index, a record per shard) allocates about a
million lists, strings and tuples. Each 700 allocations start a young collection, and every tenth of
those an older one, which walks every object the process holds: torch alone keeps ~170k. Measured at
1e5 shards: ~1,300 collections, about half of ``Shards()``'s CPU time, freeing nothing (none of these
objects form cycles). Held off for those few lines, the garbage is the same and is collected later.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside the block; the collector is left as it was found (nested pauses
    and a user's own ``gc.disable()`` are kept). Only for blocks that allocate but do not wait: the
    pause is process-wide, so another thread's garbage waits for it too."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()

"""A worker's decode threads (``DataLoader(decode_threads=k)``): one pool per process, mapping in order.

A batch's per-sample work (reading a sample, or decoding one already read in a batch) is handed to k
threads and comes back in the order asked, so a batch holds the same samples in the same places as
without threads; a sample's failure is raised where it would be (the first failing sample, in order).
The pool is made in the process that uses it (a DataLoader worker) and never pickled into it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class SamplePool:
    """``map(fn, items)`` in ``threads`` threads of this process, results in the order of ``items``."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool: tuple[int, ThreadPoolExecutor] | None = None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        if self._pool is None or self._pool[0] != os.getpid():  # a forked worker makes its own
            self._pool = (os.getpid(), ThreadPoolExecutor(self.threads, thread_name_prefix="shufflepoint-sample"))
        return list(self._pool[1].map(fn, items))

    def __getstate__(self) -> dict[str, Any]:
        return {"threads": self.threads, "_pool": None}

    def __repr__(self) -> str:
        return f"SamplePool(threads={self.threads})"

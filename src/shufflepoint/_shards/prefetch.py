"""Background downloads of the shards this rank reads next, so a steady loop never waits on storage.

The loader announces each chunk of upcoming indices one chunk early; the dataset turns them into
shard URLs and schedules them here. A small daemon thread pool calls ``lookup(url)`` (which fetches
into the node cache); URLs already done or in flight are skipped. A failure in the background is
kept, not raised: the foreground read of that shard calls the same lookup and raises the clear
``ShardError`` itself, so nothing is lost and nothing is reported twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor


class Prefetcher:
    """At most ``max_ahead`` shards downloading at once; ``schedule`` never blocks."""

    def __init__(self, lookup: Callable[[str], str], max_ahead: int, threads: int = 2) -> None:
        self._lookup = lookup
        self._max_ahead = max(1, int(max_ahead))
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="shufflepoint-prefetch")
        self._lock = threading.Lock()
        self._pending: dict[str, Future[str]] = {}
        self._done: set[str] = set()
        self.errors: dict[str, BaseException] = {}

    def schedule(self, urls: Sequence[str]) -> None:
        with self._lock:
            for url in urls:
                if url in self._done or url in self._pending:
                    continue
                if len(self._pending) >= self._max_ahead:
                    break
                future = self._pool.submit(self._lookup, url)
                self._pending[url] = future
                future.add_done_callback(self._callback(url))

    def _callback(self, url: str) -> Callable[[Future[str]], None]:
        return lambda future: self._finished(url, future)

    def _finished(self, url: str, future: Future[str]) -> None:
        with self._lock:
            self._pending.pop(url, None)
            error = future.exception()
            if error is None:
                self._done.add(url)
            else:
                self.errors[url] = error

    def forget(self, urls: Sequence[str]) -> None:
        """Shards evicted or released: fetch them again if they are scheduled later."""
        with self._lock:
            self._done.difference_update(urls)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

"""Background downloads of the shards this rank reads next, so a steady loop never waits on storage.

The loader announces each chunk of upcoming indices one chunk early; the dataset turns them into
jobs and schedules them here: a shard URL (downloaded whole), or for a shard read by byte range the
ranges that chunk's rows of it need (``Shards._ranged_job``). A few daemon threads call
``lookup(key)`` (which fetches into the node cache), in the order announced; keys in flight or
recently done are skipped, and at most ``max_ahead`` are outstanding (the rest are announced again
with a later chunk, or read when the loader gets to them). A failure in the
background is kept, not raised or printed: the foreground read of that shard calls the same
lookup and raises the clear ``ShardError`` itself, so nothing is lost and nothing is reported twice.

Daemon threads, so a download in flight never holds up the interpreter's exit (the node cache
ignores the temporary file it leaves). A copy forked into a DataLoader worker has no threads and
does nothing: each process makes its own ``Prefetcher``.

Words: docs/glossary.md (prefetch, chunk, shard, node cache).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from shufflepoint._errors import refusal


class Prefetcher:
    """At most ``max_ahead`` jobs (shards, or ranges of one) queued or running at once; ``schedule``
    never blocks."""

    def __init__(self, lookup: Callable[[Any], object], max_ahead: int, threads: int = 2) -> None:
        if isinstance(max_ahead, bool) or not isinstance(max_ahead, int) or max_ahead < 1:
            raise ValueError(refusal("prefetch", max_ahead, "an int >= 1 (shards ahead)",
                                     "pass how many shards to fetch ahead"))
        self._lookup, self._max_ahead = lookup, max_ahead
        self._threads_wanted = max(1, min(int(threads), max_ahead))
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._queue: queue.SimpleQueue[Hashable | None] = queue.SimpleQueue()
        self._pending: set[Hashable] = set()  # queued or downloading
        self._done: OrderedDict[Hashable, None] = OrderedDict()  # recently done, oldest first
        self._remember = max(64, 8 * max_ahead)
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.errors: dict[Hashable, BaseException] = {}  # the last background failure per key, for tests and logs

    def _usable(self) -> bool:
        return not self._closed and os.getpid() == self._pid

    def schedule(self, urls: Sequence[Hashable]) -> list[Hashable]:
        """Queue ``lookup(key)`` for the keys not in flight or done, up to ``max_ahead`` outstanding; the
        keys queued (each reaches ``lookup`` once, unless ``close`` drops it first)."""
        if not self._usable():
            return []
        queued: list[Hashable] = []
        with self._cond:
            for url in urls:
                if url in self._pending or url in self._done:
                    continue
                if len(self._pending) >= self._max_ahead:
                    break
                self._pending.add(url)
                self._queue.put(url)
                queued.append(url)
            while len(self._threads) < min(self._threads_wanted, len(self._pending)):
                thread = threading.Thread(target=self._run, name="shufflepoint-prefetch", daemon=True)
                self._threads.append(thread)
                thread.start()
        return queued

    def _run(self) -> None:
        while True:
            url = self._queue.get()
            if url is None:
                return
            error: BaseException | None = None
            try:
                if not self._closed:  # after close(), what is still queued is dropped
                    self._lookup(url)
            except Exception as caught:  # kept for the foreground read to meet again
                error = caught
            with self._cond:
                self._pending.discard(url)
                if error is None:
                    self.errors.pop(url, None)
                    self._done[url] = None
                    self._done.move_to_end(url)
                    while len(self._done) > self._remember:
                        self._done.popitem(last=False)
                else:
                    self.errors[url] = error
                    while len(self.errors) > self._remember:
                        self.errors.pop(next(iter(self.errors)))
                self._cond.notify_all()

    def forget(self, urls: Sequence[Hashable]) -> None:
        """Shards evicted or released: fetch them again if they are scheduled later."""
        if not self._usable():
            return
        with self._cond:
            for url in urls:
                self._done.pop(url, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or downloading (True), or ``timeout`` seconds pass (False)."""
        if not self._usable():
            return True
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds in all for the threads to end (after ``close``: their current lookup)."""
        if os.getpid() != self._pid:  # a forked copy has none of these threads
            return
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Drop what is queued and let the threads end after their current lookup (never waits; a
        no-op in a forked copy, whose threads do not exist)."""
        if not self._usable():
            return
        self._closed = True
        with self._cond:
            for _ in self._threads:
                self._queue.put(None)

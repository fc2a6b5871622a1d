"""The per-node shard cache: remote shards downloaded once per machine, shared by its processes.

Every local rank and DataLoader worker of a node uses the same folder, so its bookkeeping lives in
the filesystem, not in one process: an entry is a complete file named by a hash of (url, version);
its mtime is its last use. A download goes to a temporary file in the same folder under a per-entry
``flock`` and is published by ``os.replace``, so no process ever opens a half-written shard, and
one that was SIGKILLed mid-download leaves only a temporary file that no one reads (and that is
cleaned once stale). Before a download the cache evicts least recently used entries until the new
one fits in ``max_bytes``; ``release`` marks an entry as done for this epoch, so it goes first.
Evicting is an unlink, which is safe on POSIX for a process that still has the file open or
mapped: it keeps reading its copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator

from shufflepoint._core.errors import ShardError

_SUFFIX = ".shard"
_STALE_TMP_S = 3600.0


def _key(url: str, version: str) -> str:
    return hashlib.sha256(f"{url}\0{version}".encode()).hexdigest()[:32]


class NodeCache:
    """Complete shards in ``directory``, at most ``max_bytes`` of them (None: unbounded)."""

    def __init__(self, directory: str, max_bytes: int | None = None) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes < 1):
            raise ValueError(f"cache_limit: found {max_bytes!r}, expected an int >= 1 (bytes) or None")
        self.directory, self.max_bytes = directory, max_bytes
        os.makedirs(directory, exist_ok=True)

    def entry(self, url: str, version: str) -> str:
        suffix = os.path.splitext(url.split("?", 1)[0])[1][:16]
        return os.path.join(self.directory, _key(url, version) + suffix + _SUFFIX)

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        with open(os.path.join(self.directory, name + ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def path_for(self, url: str, version: str, size: int, fetch: Callable[[str], None]) -> str:
        """A local path holding the complete shard, downloading it with ``fetch(tmp)`` on a miss."""
        path = self.entry(url, version)
        if self._complete(path, size):
            return path
        with self._lock(os.path.basename(path)):
            if self._complete(path, size):  # another process fetched it while we waited
                return path
            self._make_room(size)
            handle, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            os.close(handle)
            try:
                fetch(tmp)
                got = os.path.getsize(tmp)
                if got != size:
                    raise ShardError(url, f"downloaded {got} bytes, the index says {size}")
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        return path

    def _complete(self, path: str, size: int) -> bool:
        try:
            if os.path.getsize(path) != size:
                return False
            os.utime(path)  # last use: what LRU eviction orders by
            return True
        except FileNotFoundError:
            return False

    def release(self, url: str, version: str) -> None:
        """A hint: this node is done with the shard for this epoch; evict it first."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.entry(url, version), (0, 0))

    def entries(self) -> list[tuple[float, int, str]]:
        """(last use, bytes, path) of every complete entry; stale temporary files are removed."""
        found = []
        now = time.time()
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            if name.endswith(_SUFFIX):
                found.append((stat.st_mtime, stat.st_size, path))
            elif name.startswith(".tmp-") and now - stat.st_mtime > _STALE_TMP_S:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # left by a process killed mid-download
        return found

    def bytes_used(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def _make_room(self, incoming: int) -> None:
        if self.max_bytes is None:
            return
        entries = sorted(self.entries())
        used = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if used + incoming <= self.max_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            used -= size

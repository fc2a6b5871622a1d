"""The per-node shard cache: remote shards downloaded once per machine, shared by its processes.

Every local rank and DataLoader worker of a node uses the same folder, so all bookkeeping lives
in the filesystem, never in one process's memory:

- ``<key><ext>.shard``: a complete shard, named by a hash of (url, version); its mtime is its last
  use (a hit touches it), which is what LRU eviction orders by. ``release`` sets it to 0: first out.
- ``.tmp-<key>-<size>-*``: a download in flight, written under the entry's lock and published by
  ``os.replace``, so no process ever sees half a shard. A process SIGKILLed mid-download leaves
  only this file; the kernel drops its lock, and the next scan removes a temporary file whose
  entry lock is free. Until then its ``<size>`` counts against the byte limit (room is reserved).
- ``<key><ext>.part`` and ``<key>.ranges``: a partial entry, a sparse file holding the byte ranges
  of a shard its record lists (``ranged``: row groups read without the whole file); it counts by
  the blocks it holds on disk and is evicted like a complete one.
- ``<key>.lock``: the per-entry ``flock``: one process downloads, the others wait, then find the
  entry complete. ``evict.lock`` serialises making room, so the accounting is consistent.

Before a download, least recently used complete entries are evicted until the new one fits in
``max_bytes`` (one shard larger than the limit is still served, the cache then holding just it).
Eviction is an unlink, which is safe on POSIX for a process that still has the file open or
mmapped: it keeps reading its copy, and the space is freed when it closes it (so the disk can hold
more than ``max_bytes`` while evicted shards are still open). Entries used since the eviction scan
are spared while older ones can go instead. So a path returned by ``path_for`` can be evicted
before the caller opens it only when the shards in use at once do not fit in the limit; the caller
then simply asks again (``FileNotFoundError`` on open means exactly that).

Words: docs/glossary.md (node cache, partial entry, shard, byte range).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator

from shufflepoint._errors import ShardError, refusal

_SUFFIX = ".shard"
_PARTIAL = ".part"  # a sparse file holding some byte ranges of a shard (``ranged``), with a record:
_RECORD = ".ranges"  # ``<key>.ranges``, the ranges it holds; it counts by the blocks it has on disk
_TMP = ".tmp-"
_EVICT = "evict"
_KEY_CHARS = 32


def _key(url: str, version: str) -> str:
    return hashlib.sha256(f"{url}\0{version}".encode()).hexdigest()[:_KEY_CHARS]


class NodeCache:
    """Complete shards in ``directory``, at most ``max_bytes`` of them (None: unbounded)."""

    def __init__(self, directory: str, max_bytes: int | None = None) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes < 1):
            raise ValueError(refusal("cache_limit", max_bytes, "an int >= 1 (bytes) or None",
                                     "pass the cache's size in bytes, or None for no limit"))
        self.directory, self.max_bytes = directory, max_bytes
        self._kept_bytes, self._scanned = 0, False  # what keep() added since its last scan for room
        os.makedirs(directory, exist_ok=True)

    def entry(self, url: str, version: str) -> str:
        """Where the complete shard (url, version) lives once cached."""
        suffix = os.path.splitext(url.split("?", 1)[0])[1][:16]
        return os.path.join(self.directory, _key(url, version) + suffix + _SUFFIX)

    def path_for(self, url: str, version: str, size: int, fetch: Callable[[str], None]) -> str:
        """A local path holding the complete shard (``size`` bytes); on a miss ``fetch(tmp)`` writes
        it to a temporary path first, once per node however many processes ask at the same time."""
        path = self.entry(url, version)
        if _hit(path, size):
            return path
        key = _key(url, version)
        with self._locked(key):
            if _hit(path, size):  # another process fetched it while we waited
                return path
            tmp = self._reserve(size, key)
            try:
                fetch(tmp)
                try:
                    got = os.path.getsize(tmp)
                except FileNotFoundError:
                    raise ShardError(url, "the download left no file behind") from None
                if got != size:
                    raise ShardError(url, f"downloaded {got} bytes, the index says {size}")
                os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from other users of a shared cache
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        return path

    def partial(self, url: str, version: str) -> tuple[str, str, str]:
        """(data file, record file, key) of the partial entry (url, version): see ``ranged``."""
        key = _key(url, version)
        data = self.entry(url, version)[: -len(_SUFFIX)] + _PARTIAL
        return data, os.path.join(self.directory, key + _RECORD), key

    def entry_lock(self, key: str) -> contextlib.AbstractContextManager[bool]:
        """The entry's lock, held while a partial entry's ranges are fetched and recorded."""
        return self._locked(key)

    @staticmethod
    def same_file(handle: int, path: str) -> bool:
        """Whether the open ``handle`` is still the file at ``path`` (not evicted since)."""
        return _same_file(handle, path)

    def make_room(self, incoming: int, own: str) -> None:
        """Evict LRU entries until ``incoming`` more bytes fit (a partial entry growing), under
        ``evict.lock``; the caller holds its entry's lock, so its own entry is never evicted."""
        if self.max_bytes is None:
            return
        with self._locked(_EVICT):
            self._evict_until(self.max_bytes - incoming - self._in_flight(own))

    def find(self, url: str, version: str) -> str | None:
        """The complete entry (url, version), marked used, or None: for entries whose size is known
        only once they are made (``kept_ids``); entries are published whole, so one found is complete."""
        path = self.entry(url, version)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        except OSError:  # another user's file in a shared cache: still a hit
            return path if os.path.exists(path) else None
        return path

    def keep(self, url: str, version: str, size: int, write: Callable[[str], None]) -> None:
        """Publish an entry made on this node (``write(tmp)`` writes its ``size`` bytes): a temporary
        file, then ``os.replace``, as ``path_for`` does, but room is made (the LRU scan, a stat per
        entry) only each time this process has kept ``max_bytes / 64`` more bytes, not per entry: many
        small entries (``kept_ids``: one per decoded unit) would make every keep a scan of them all.
        The cache may so exceed its limit by that much per process between scans. Two processes
        keeping the same entry write the same bytes; the last replace wins."""
        path = self.entry(url, version)
        if os.path.exists(path):
            return
        self._kept_bytes += size
        if self.max_bytes is not None and (self._kept_bytes >= self.max_bytes // 64 or not self._scanned):
            with self._locked(_EVICT):
                self._evict_until(self.max_bytes - self._kept_bytes)
            self._kept_bytes, self._scanned = 0, True
        handle, tmp = tempfile.mkstemp(prefix=f"{_TMP}{_key(url, version)}-{size}-", dir=self.directory)
        os.close(handle)
        try:
            write(tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def release(self, url: str, version: str) -> None:
        """A hint: this node is done with the shard for this epoch; evict it first."""
        path = self.entry(url, version)
        for found in (path, path[: -len(_SUFFIX)] + _PARTIAL):
            with contextlib.suppress(OSError):
                os.utime(found, ns=(0, 0))

    def entries(self) -> list[tuple[float, int, str]]:
        """(last use, bytes, path) of every entry (a partial one: the bytes it holds on disk)."""
        return [(mtime_ns / 1e9, size, path) for mtime_ns, size, path in self._complete_entries()]

    def bytes_used(self) -> int:
        """Bytes held by complete and partial entries (downloads in flight not included)."""
        return sum(size for _, size, _ in self._complete_entries())

    # -- locks -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, name: str, blocking: bool = True) -> Iterator[bool]:
        """Hold ``<name>.lock`` (yields True), or yield False at once if ``blocking`` is off and it is
        taken. An evicted entry's lock file is unlinked by its holder, so a waiter that wakes up on
        an unlinked file opens the new one and locks again."""
        path = os.path.join(self.directory, name + ".lock")
        while True:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(handle)
                handle = -1
                break
            if _same_file(handle, path):
                break
            os.close(handle)
        try:
            yield handle >= 0
        finally:
            if handle >= 0:
                os.close(handle)  # releases the flock

    def _busy(self, name: str) -> bool:
        with self._locked(name, blocking=False) as got:
            return not got

    # -- room ----------------------------------------------------------------------------------
    def _complete_entries(self) -> list[tuple[int, int, str]]:
        found = []
        for name in os.listdir(self.directory):
            if name.endswith(_SUFFIX) or name.endswith(_PARTIAL):
                path = os.path.join(self.directory, name)
                with contextlib.suppress(FileNotFoundError):
                    stat = os.stat(path)
                    size = stat.st_size if name.endswith(_SUFFIX) else min(stat.st_size, stat.st_blocks * 512)
                    found.append((stat.st_mtime_ns, size, path))
        return found

    def _in_flight(self, own: str) -> int:
        """Bytes reserved by downloads in flight; removes the temporary files of dead ones (and any
        of our own entry, ``own``, whose lock we hold: no one else can be writing it)."""
        reserved = 0
        for name in os.listdir(self.directory):
            if not name.startswith(_TMP):
                continue
            key, _, rest = name[len(_TMP):].partition("-")
            size = rest.partition("-")[0]
            if key != own and size.isdigit() and self._busy(key):
                reserved += int(size)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.directory, name))
        return reserved

    def _reserve(self, incoming: int, own: str) -> str:
        """Make room for ``incoming`` bytes and create the temporary file that reserves it, both under
        ``evict.lock``, so two processes making room at once never count the same free space."""
        with self._locked(_EVICT):
            reserved = self._in_flight(own)
            if self.max_bytes is not None:
                self._evict_until(self.max_bytes - incoming - reserved)
            handle, tmp = tempfile.mkstemp(prefix=f"{_TMP}{own}-{incoming}-", dir=self.directory)
            os.close(handle)
            return tmp

    def _evict_until(self, budget: int) -> None:
        """Evict LRU entries until at most ``budget`` bytes are left: first sparing the ones used since
        the scan, then, if that was not enough, those too (never one being downloaded)."""
        entries = sorted(self._complete_entries())
        used = sum(size for _, size, _ in entries)
        for recent_too in (False, True):
            for mtime_ns, size, path in entries:
                if used <= budget:
                    return
                if os.path.exists(path) and self._evict(path, None if recent_too else mtime_ns):
                    used -= size

    def _evict(self, path: str, mtime_ns: int | None) -> bool:
        """Unlink one entry unless it is being downloaded, or was used since the scan (its mtime is
        no longer ``mtime_ns``; None: evict it anyway)."""
        key = os.path.basename(path)[:_KEY_CHARS]
        with self._locked(key, blocking=False) as got:
            if not got:
                return False
            try:
                if mtime_ns is not None and os.stat(path).st_mtime_ns != mtime_ns:
                    return False
                os.unlink(path)
            except FileNotFoundError:
                return False
            if path.endswith(_PARTIAL):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.directory, key + _RECORD))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.directory, key + ".lock"))  # while we hold it; see _locked
            return True


def _hit(path: str, size: int) -> bool:
    """A complete entry: mark it used (LRU) and take it."""
    try:
        if os.stat(path).st_size != size:
            return False
    except FileNotFoundError:
        return False
    with contextlib.suppress(OSError):  # another user's file in a shared cache: still a hit
        os.utime(path)
    return True


def _same_file(handle: int, path: str) -> bool:
    try:
        return os.fstat(handle).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False

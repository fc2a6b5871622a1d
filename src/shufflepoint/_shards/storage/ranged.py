"""Remote shards read by byte range: a fresh node fetches the bytes it reads, not whole shards.

A Parquet shard's rows need its footer and the column chunks of their row groups; fetching the
whole file first makes a node's first batch wait for every shard it touches. Here the node cache
holds a *partial entry* per shard (``NodeCache.partial``): a sparse file of the shard's size and a
small record of the byte ranges it holds. ``PartialShard.ensure(ranges)`` fetches only what the
record lacks (under the entry's lock, so the node's processes fetch each range once) and adds it;
``RangedFile`` is the file object a reader opens, reading through ``ensure``. A later read of the
same rows, in any process of the node, fetches nothing.

Integrity is the storage's: each fetch opens the object at the size and version the index
recorded (``Storage.ranges``: a HEAD, then ranged GETs that must match it), so a shard rewritten
under a job is a ``ShardError``, never a mix of two versions. The entry is named by (url, version)
like a whole one. ``verify="checksum"`` needs the whole file to hash: those shards are downloaded
whole, as before. Read-ahead of the ranges upcoming rows need is ``ranged_ahead``.

Words: docs/glossary.md (byte range, ranged read, partial entry, node cache, read-ahead, stretch).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import io
import json
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from shufflepoint import _settings as settings
from shufflepoint._errors import ShardError
from shufflepoint._shards.readers.base import TilesShards
from shufflepoint._shards.storage.cache import NodeCache

# SHUFFLEPOINT_RANGED_READS: unset (or empty), the default: the formats in DEFAULT_FORMATS are read by
# range: a fresh node's first batch waits for its rows, the loop after it in a cold first epoch runs at
# 0.8-1.1x whole shards' rate in make bench-ranged (a whole cold epoch with 4 workers over 16 MiB token
# shards behind 30 ms GETs: 1.64x the time) and a complete shard at the same rate (Parquet, token .bin
# shards; docs/benchmarks-shards.md, ranged reads). "1": the same
# (every format that can); "0": none, every remote shard is downloaded whole before its first row is read.
# verify="checksum" shards are always downloaded whole (the hash needs every byte).
DEFAULT_FORMATS = frozenset({"parquet", "tokens"})
# A rank reading at least this share of the positions its reads cover (a stretch of its own: 1.0; strided on
# 2 ranks: 0.5) reads the bytes between its rows of a shard next (``spans``: all of them), so its fetches
# join them in where a reader's rows tile the shard (``join_gap``); below it they are other ranks' rows.
DENSE = 0.9


def enabled_for(format: str) -> bool:
    """Whether remote shards of ``format`` (a reader's name) are read by range."""
    chosen = settings.ranged_reads()  # read at each use: never at import
    return format in DEFAULT_FORMATS if chosen is None else chosen


def join_gap(reader: object, density: float) -> int:
    """The widest gap a fetch of ``reader``'s rows joins in for a rank reading at ``density`` (0: the default,
    up to the wanted ranges' mean size): its ``TilesShards.dense_gap`` where the rank reads densely, as
    read-ahead joins them; so a DataLoader worker that reads ahead of read-ahead fetches a shard in a few
    GETs, not a GET per window."""
    return reader.dense_gap() if density >= DENSE and isinstance(reader, TilesShards) else 0


ByteRange = tuple[int, int]  # [start, end) bytes of one object (docs/glossary.md, byte range)
ReadRanges = Callable[[], Any]  # a context manager yielding read(start, end) -> bytes (Storage.ranges)
_GAP = 256 << 10  # ranges at most this close (and their mean size) are one GET: a request costs more
_MOST_PER_GET = 8 << 20  # the most one GET asks for
_LANES = 8  # GETs in flight at once for one shard's missing ranges
_LOOK_S = 0.05  # how often a reader looks whether its shard became complete (``complete``)
_REFETCH = 16 << 10  # a held range at most this long may be fetched again inside a joined GET


_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (pid, the process's lane threads)


def _lane_pool() -> ThreadPoolExecutor:
    """The process's threads for a fetch's lanes, made once (a pool per ``ensure`` started 8 threads per
    fetch: under read-ahead's jobs, a hundred threads at once) and again in a forked process (a fork
    has none of its parent's threads). A lane never waits on another, so a shared pool cannot deadlock."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(4 * _LANES, thread_name_prefix="shufflepoint-ranged"))
    return _POOL[1]


def identity(url: str, version: str) -> str:
    """The key of a remote shard's content for the kept ids: its URL and version (its local copy's
    mtime changes as ranges arrive, so ``kept_ids.file_key`` of the path would never hit)."""
    return "r" + hashlib.sha256(f"{url}\0{version}".encode()).hexdigest()[:31]


def merged(ranges: Sequence[ByteRange], gap: int = 0) -> list[ByteRange]:
    """``ranges`` sorted and joined where they overlap or lie less than ``gap`` bytes apart."""
    out: list[ByteRange] = []
    for start, end in sorted(s for s in ranges if s[1] > s[0]):
        if out and start <= out[-1][1] + gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def missing(held: Sequence[ByteRange], start: int, end: int) -> list[ByteRange]:
    """The parts of [start, end) that ``held`` (merged, sorted) does not cover. From the first held
    range that could cover ``start`` (a bisection: a shard read window by window holds thousands)."""
    found, at = [], start
    for first, last in held[max(0, bisect.bisect_right(held, (start, end)) - 1):]:
        if last <= at:
            continue
        if first >= end:
            break
        if first > at:
            found.append((at, min(first, end)))
        at = max(at, last)
        if at >= end:
            break
    if at < end:
        found.append((at, end))
    return found


class PartialShard:
    """The byte ranges of one remote shard (``size`` bytes at ``version``) this node holds, fetched
    on demand with ``read_ranges`` and kept in the node cache."""

    def __init__(self, cache: NodeCache, url: str, version: str, size: int, read_ranges: ReadRanges,
                 gap: int = 0) -> None:
        self._cache, self._url, self._version, self.size = cache, url, version, size
        self._gap = gap  # the widest gap a joined fetch takes in (``join_gap``); 0: up to the wanted mean size
        self._read_ranges = read_ranges
        self._data, self._record, self._key = cache.partial(url, version)
        self._fd = -1
        self._held: list[ByteRange] = []
        self._starts = self._ends = np.empty(0, np.int64)  # _held as arrays, for a batch's many windows
        self._map: mmap.mmap | None = None
        self._generation, self._mapped = 0, -1  # the data file opened, and the one mapped
        self._thread_lock = threading.Lock()  # the flock excludes processes; this, threads swapping _fd
        self._next_look = 0.0  # when ``complete`` may read the record again
        if not self._open_existing():
            with cache.entry_lock(self._key):
                self._open_locked()

    def _open_existing(self) -> bool:
        """Open the entry an earlier open made, without the entry lock (a shard reopened, the common
        case): its data file at its size, then its record, which is the file's while the file is
        still the one at the path (records are replaced whole; a new entry's empty record is written
        before its file reaches its size). False: no such file, make it under the lock."""
        try:
            handle = os.open(self._data, os.O_RDWR)
        except FileNotFoundError:
            return False
        held = self._load_record() if os.fstat(handle).st_size == self.size else None
        if held is None or not self._cache.same_file(handle, self._data):
            os.close(handle)
            return False
        self._fd, self._generation = handle, self._generation + 1
        self._set_held(held)
        with contextlib.suppress(OSError):
            os.utime(self._data)  # used: last out of the LRU
        return True

    def _open_locked(self) -> None:
        """Open (or create, sparse) the data file and read its record; the entry lock is held."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self._data, os.O_RDWR | os.O_CREAT, 0o644)
        self._generation += 1
        if os.fstat(self._fd).st_size != self.size:  # a new entry, or a stale or foreign file: start empty
            self._write_record([])  # first: a file at its size never has another's record (_open_existing)
            os.ftruncate(self._fd, 0)
            os.ftruncate(self._fd, self.size)
        self._set_held(self._load_record())
        with contextlib.suppress(OSError):
            os.utime(self._data)  # used: last out of the LRU

    def _load_record(self) -> list[ByteRange]:
        try:
            with open(self._record, "rb") as handle:
                found = json.loads(handle.read() or b"[]")
            ranges = [(int(a), int(b)) for a, b in found]
        except (FileNotFoundError, ValueError, TypeError):
            return []
        return merged([(a, b) for a, b in ranges if 0 <= a < b <= self.size])

    def _write_record(self, ranges: list[ByteRange]) -> None:
        handle, tmp = tempfile.mkstemp(prefix=f".tmp-{self._key}-0-", dir=os.path.dirname(self._record))
        try:
            with os.fdopen(handle, "w") as out:
                json.dump([list(s) for s in ranges], out)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self._record)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _set_held(self, ranges: list[ByteRange]) -> None:
        self._held = ranges
        self._starts = np.fromiter((a for a, _ in ranges), np.int64, len(ranges))
        self._ends = np.fromiter((b for _, b in ranges), np.int64, len(ranges))

    def _covers(self, ranges: np.ndarray) -> bool:
        """Whether ``ranges`` ((n, 2) array) are all held (per this process's view of the record)."""
        if not self._held:
            return not ranges.size
        inside = np.searchsorted(self._starts, ranges[:, 0], side="right") - 1
        return bool(np.all((inside >= 0) & (ranges[:, 1] <= self._ends[np.maximum(inside, 0)])))

    def ensure(self, ranges: Sequence[ByteRange] | np.ndarray, join: bool = True) -> None:
        """Hold every byte of ``ranges`` locally: fetch (in few GETs) what neither this process nor
        another of the node has fetched yet. Held already (the common case): two array lookups; held
        since by another thread or process (read-ahead): the record read again, without the lock
        (it is replaced whole), so a read never waits on a read-ahead of other ranges. ``join=False``:
        never fetch bytes between the ranges (a rank reading 1/k of a shard: they are other ranks')."""
        found = np.asarray(ranges, dtype=np.int64).reshape(-1, 2).clip(0, self.size)
        found = found[found[:, 1] > found[:, 0]]
        if self._covers(found):
            return
        fresh = self._load_record()
        if self._cache.same_file(self._fd, self._data):  # the record is of the file we have open
            self._set_held(fresh)
            if self._covers(found):
                return
        wanted = merged([(a, b) for a, b in found.tolist()])
        with self._thread_lock, self._cache.entry_lock(self._key):
            if not self._cache.same_file(self._fd, self._data):  # evicted since: start a new entry
                self._open_locked()
            else:
                self._set_held(self._load_record())
            # Joined across gaps up to the wanted ranges' mean size (a GET saved, at most ~2x the bytes), or the
            # reader's dense gap where the rank reads the bytes between next anyway (``join_gap``).
            gap = (self._gap or min(_GAP, sum(b - a for a, b in wanted) // len(wanted))) if join else 0
            need = merged([m for a, b in wanted for m in missing(self._held, a, b)], gap)
            # ... but never across a held range worth a GET: read ahead in wide ranges, a shard's next
            # chunk would otherwise fetch again the range its last one fetched.
            kept = [held for held in self._held if held[1] - held[0] > _REFETCH]
            need = [m for a, b in need for m in missing(kept, a, b)]
            if not need:
                return
            self._cache.make_room(sum(b - a for a, b in need), self._key)
            most = _MOST_PER_GET
            gets = [(at, min(end, at + most)) for start, end in need for at in range(start, end, most)]
            lanes = [gets[k::_LANES] for k in range(min(_LANES, len(gets)))]
            if len(lanes) == 1:
                self._fetch(lanes[0])
            else:  # a batch's row groups: round trips side by side, not one after another
                list(_lane_pool().map(self._fetch, lanes))
            self._set_held(merged([*self._held, *need]))
            self._write_record(self._held)

    def _fetch(self, gets: list[ByteRange]) -> None:
        """Write the ranges ``gets`` of the object in place, over one look-up of it (its version checked)."""
        with self._read_ranges() as read:
            for start, end in gets:
                os.pwrite(self._fd, read(start, end), start)

    def pread(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the shard, fetched first where they are not held."""
        end = min(end, self.size)
        if end <= start:
            return b""
        self.ensure([(start, end)])
        with self._thread_lock:
            return os.pread(self._fd, end - start, start)

    def holding(self, ranges: Sequence[ByteRange] | np.ndarray, join: bool = True) -> memoryview:
        """``ensure(ranges)``, then the map (``view``) of the very copy that holds them: a C reader
        (pyarrow) may then read ``ranges`` from it without a call back into Python. Checked under the
        thread lock: another thread's ``ensure`` may have started a new copy (the entry evicted by
        another process) between the two, and the old map lacks what the new copy fetched, while a
        hole reads as zeros, never as an error. So never a view whose copy is not known to hold them."""
        with self._thread_lock:
            if self._fd >= 0 and self._held == [(0, self.size)]:  # every byte held: nothing to check
                return self._view_locked()
        found = np.asarray(ranges, dtype=np.int64).reshape(-1, 2).clip(0, self.size)
        found = found[found[:, 1] > found[:, 0]]
        for _ in range(8):
            with self._thread_lock:
                if self._fd >= 0 and self._covers(found):
                    return self._view_locked()
            self.ensure(found, join)
        raise ShardError(self._url, "its partial copy in the node cache was evicted over and over while being read; "
                                    "raise cache_limit")

    def held(self) -> list[ByteRange]:
        return list(self._held)

    @property
    def path(self) -> str:
        """The partial copy's path in the node cache."""
        return self._data

    def inode(self) -> int:
        """The inode of the copy this process has open (another after an eviction and a new start)."""
        return os.fstat(self._fd).st_ino

    def held_bytes(self) -> int:
        """The bytes this process has seen held (the record may hold more since)."""
        return int((self._ends - self._starts).sum())

    def complete(self) -> bool:
        """Whether every byte of the shard is held (then nothing is fetched again, nothing checked). Not
        yet: the record is read again at most every ``_LOOK_S`` seconds, so a reader learns soon that
        another thread or process (read-ahead) fetched the rest, and stops checking its windows."""
        if self._held != [(0, self.size)] and time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + _LOOK_S
            fresh = self._load_record()
            with self._thread_lock:  # the record is of the copy open here, or of a newer one: not ours
                if fresh == [(0, self.size)] and self._fd >= 0 and self._cache.same_file(self._fd, self._data):
                    self._set_held(fresh)
        return self._held == [(0, self.size)]

    def view(self) -> memoryview:
        """The local copy mapped, to read ranges ``ensure`` made held (the rest reads as zeros): a
        token window is then a slice, not a syscall. Mapped again when the entry was evicted and
        started over (``ensure`` then writes to a new file)."""
        with self._thread_lock:
            return self._view_locked()

    def _view_locked(self) -> memoryview:
        if self._mapped != self._generation:
            self._map = mmap.mmap(self._fd, self.size, prot=mmap.PROT_READ) if self.size else None
            self._mapped = self._generation
        return memoryview(self._map if self._map is not None else b"")

    def close(self) -> None:
        with self._thread_lock:
            self._map = None  # unmapped once no view of it is left
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over a ``PartialShard``: what pyarrow opens in place of a path."""

    def __init__(self, shard: PartialShard) -> None:
        super().__init__()
        self.shard, self._at = shard, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self.shard.size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def size(self) -> int:
        return self.shard.size

    def pread(self, start: int, end: int) -> bytes:
        """Bytes [start, end), the position unmoved (a token window)."""
        return self.shard.pread(start, end)

    def view(self) -> memoryview:
        """The local copy, mapped (``PartialShard.view``): read only what ``ensure`` made held."""
        return self.shard.view()

    def holding(self, ranges: Sequence[ByteRange] | np.ndarray, join: bool = True) -> memoryview:
        """The local copy mapped, holding ``ranges`` (``PartialShard.holding``)."""
        return self.shard.holding(ranges, join)

    def complete(self) -> bool:
        return self.shard.complete()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.shard.pread(self._at, self._at + len(view))
        view[:len(data)] = data
        self._at += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        end = self.shard.size if size is None or size < 0 else self._at + size
        data = self.shard.pread(self._at, end)
        self._at += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self.shard.close()
        super().close()


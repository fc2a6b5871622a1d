"""Decoded token ids kept in the node's cache folder, so a later epoch slices a flat file instead of
decoding Parquet again.

``Packed`` over Parquet reads a ``list<int>`` column; pyarrow decodes it at ~5-8 ns a token every
epoch (a shard's decoded groups are let go when it closes), which the ``.bin`` token windows never
pay. After the first decode of a unit (a row group, or a run of small ones) its values and offsets
are written here once; the next open of the same file maps them (``np.memmap``: the page cache's
copy, no decode). What a later epoch then reads is what the ``.bin`` windows read: flat tokens.

One entry per (file, column, unit), ``<cache_dir>/ids/<key>.ids.shard`` (a ``NodeCache``: LRU, at
most ``SHUFFLEPOINT_KEPT_IDS_BYTES``, default 8 GiB; 0 keeps nothing). The key hashes the file's
path, size, mtime, inode and last 64 KiB (the footer), so a rewritten file (or a re-downloaded copy)
is decoded afresh. An
entry: a 32-byte header (magic, the values' dtype, rows, values), ``rows + 1`` int64 offsets, then
the values, as uint16 where every value fits (half of int32's bytes, as the ``.bin`` windows hold
them), else as decoded. Published whole (a temporary file, then ``os.replace``); one whose size
disagrees with its header is ignored and decoded again, never read.

Words: docs/glossary.md (kept ids, node cache, decode unit, token window).
"""

from __future__ import annotations

import contextlib
import hashlib
import os

import numpy as np

from shufflepoint import _settings as settings
from shufflepoint._shards.storage.cache import NodeCache

ENV = settings.KEPT_IDS_BYTES
_MAGIC = b"SPIDS1\0\0"
_HEADER = 32
_NARROW = np.dtype("<u2")
_TAIL = 64 << 10


def file_key(path: str) -> str:
    """The identity of one local file's content as this node sees it: path, size, mtime, inode, and its
    last ``_TAIL`` bytes (a Parquet footer: the row groups' sizes and statistics), since a file rewritten
    in place within the filesystem's timestamp granularity keeps its mtime."""
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        tail = os.pread(handle.fileno(), _TAIL, max(0, stat.st_size - _TAIL))
    text = f"{os.path.realpath(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}\0"
    return hashlib.sha256(text.encode() + tail).hexdigest()[:32]


class KeptIds:
    """Decoded ids under ``directory`` (see the module): ``load`` and ``save`` by key."""

    def __init__(self, directory: str) -> None:
        limit = settings.kept_ids_bytes()
        self._cache: NodeCache | None = None
        if limit > 0:
            with contextlib.suppress(OSError):  # a cache folder that cannot be written: decode every epoch
                self._cache = NodeCache(directory, limit)

    @property
    def enabled(self) -> bool:
        return self._cache is not None

    @staticmethod
    def file_key(path: str) -> str:
        return file_key(path)

    def load(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(values, offsets) of entry ``key`` as read-only maps of its file, or None (absent, damaged)."""
        if self._cache is None:
            return None
        path = self._cache.find(key + ".ids", "")
        if path is None:
            return None
        try:
            with open(path, "rb") as handle:
                header = handle.read(_HEADER)
            if len(header) < _HEADER or header[:8] != _MAGIC:
                return None
            dtype = np.dtype(header[8:16].rstrip(b"\0").decode("ascii"))
            rows, count = (int.from_bytes(header[o:o + 8], "little") for o in (16, 24))
            values_at = _HEADER + 8 * (rows + 1)
            if os.path.getsize(path) != values_at + count * dtype.itemsize:
                return None
            offsets = np.memmap(path, np.int64, "r", _HEADER, (rows + 1,))
            values = np.memmap(path, dtype, "r", values_at, (count,)) if count else np.empty(0, dtype)
            values = np.asarray(values)  # a plain view: slicing a memmap runs Python per slice
        except (OSError, ValueError, TypeError):
            return None
        return values, np.asarray(offsets)

    def save(self, key: str, values: np.ndarray, offsets: np.ndarray) -> None:
        """Keep ``values`` (1-D integers) and ``offsets`` (rows + 1, ascending from 0) as entry ``key``.
        Nothing is kept where the disk refuses (full, read-only): the next epoch decodes again."""
        if self._cache is None:
            return
        narrow = values.dtype != _NARROW and values.size and values.dtype.kind in "iu" and \
            int(values.min()) >= 0 and int(values.max()) <= np.iinfo(_NARROW).max
        stored = values.astype(_NARROW) if narrow else values.astype(values.dtype.newbyteorder("<"), copy=False)
        stored_offsets = np.ascontiguousarray(offsets, dtype="<i8")
        name = stored.dtype.str.encode("ascii").ljust(8, b"\0")
        header = _MAGIC + name + (stored_offsets.size - 1).to_bytes(8, "little") + stored.size.to_bytes(8, "little")
        size = _HEADER + stored_offsets.nbytes + stored.nbytes

        def write(tmp: str) -> None:
            with open(tmp, "wb") as handle:
                handle.write(header)
                handle.write(stored_offsets.data)
                handle.write(np.ascontiguousarray(stored).data)

        with contextlib.suppress(OSError):
            self._cache.keep(key + ".ids", "", size, write)


_STORES: dict[str, KeptIds] = {}


def store(cache_dir: str) -> KeptIds:
    """The kept ids of the cache folder ``cache_dir`` (one object per folder and process)."""
    found = _STORES.get(cache_dir)
    if found is None:
        found = _STORES[cache_dir] = KeptIds(os.path.join(cache_dir, "ids"))
    return found


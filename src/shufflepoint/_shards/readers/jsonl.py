"""JSON Lines shards: one JSON value a line, plain, gzip (``.gz``) or zstandard (``.zst``).

Row i is ``json.loads`` of the i-th non-blank line. Blank lines (empty, or a lone ``\\r``) are not
rows: they are skipped wherever they are, so a final newline, a trailing empty line or a stray gap
counts nothing. Any other line that is not one JSON value (whitespace only included) raises a
``ShardError`` naming the shard and its 1-based line number when that row is read.

A plain file is memory-mapped and its line starts are found once at open with numpy; a row is a
slice of the map. Compressed files have no random access, so the whole shard is decompressed into
memory once at open (plan memory for the largest decompressed shard times the open shards). The
compression is recognised by the file's magic bytes, not its name.

Words: docs/glossary.md (shard, row).
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import zlib
from typing import Any

import numpy as np

from shufflepoint._errors import ShardError, shard_error
from shufflepoint._shards.corpora.shards.batch import Rows
from shufflepoint._shards.readers._common import check_row, check_rows, extra, in_sorted_order

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 26  # bytes scanned for newlines at a time: bounds the temporary mask to 64 MiB
_NL, _CR = 10, 13


def _newlines(buf: np.ndarray) -> np.ndarray:
    """Positions of every ``\\n`` in ``buf``, scanned in chunks."""
    parts = [np.flatnonzero(buf[i:i + _CHUNK] == _NL) + i for i in range(0, buf.size, _CHUNK)]
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


def row_bounds(buf: np.ndarray) -> np.ndarray:
    """``bounds`` with row i in ``buf[bounds[i]:bounds[i + 1]]``: starts of the non-blank lines, then
    the end. A row's slice runs to the next row's start; the newline and blank lines it takes along
    are whitespace to ``json.loads``."""
    newlines = _newlines(buf)
    starts = np.empty(newlines.size + 1, np.int64)
    starts[0] = 0
    starts[1:] = newlines + 1
    ends = np.append(newlines, buf.size)
    lengths = ends - starts
    keep = lengths > 0
    single = np.flatnonzero(lengths == 1)
    keep[single] = buf[starts[single]] != _CR
    return np.append(starts[keep], buf.size)


def _unzstd(raw: bytes, shard: str) -> bytes:
    """Every frame of a zstandard stream; a frame cut short raises (the stream reader would not)."""
    zstandard = extra("zstandard", "zstd")
    parts: list[bytes] = []
    try:
        while raw:
            frame = zstandard.ZstdDecompressor().decompressobj()
            parts.append(frame.decompress(raw))
            if not frame.eof:
                raise ShardError(shard, f"truncated: the zstandard stream ends inside a frame, after "
                                        f"{sum(map(len, parts))} decompressed bytes")
            raw = frame.unused_data
    except zstandard.ZstdError as e:
        raise shard_error(shard, "corrupt zstandard data", "a zstandard stream", why=str(e)) from e
    return b"".join(parts)


def _ungzip(raw: bytes, shard: str) -> bytes:
    try:
        return gzip.decompress(raw)
    except EOFError as e:
        raise shard_error(shard, "a gzip stream that ends before its end marker (truncated)", "a whole gzip "
                          "stream", why=str(e)) from e
    except (OSError, zlib.error) as e:
        raise shard_error(shard, "corrupt gzip data", "a gzip stream", why=str(e)) from e


def _load(path: str, shard: str) -> tuple[bytes | mmap.mmap, int]:
    """The shard's text, as a memory map (plain) or decompressed bytes, and its size."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
            if magic.startswith(_GZIP_MAGIC) or magic == _ZSTD_MAGIC:
                f.seek(0)
                raw = f.read()
                data = _ungzip(raw, shard) if magic.startswith(_GZIP_MAGIC) else _unzstd(raw, shard)
                return data, len(data)
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b"", 0
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), size
    except ShardError:
        raise
    except OSError as e:
        raise shard_error(shard, "a file that cannot be read", "a readable file", why=str(e)) from e


class OpenJsonl:
    """One JSON Lines shard, its row bounds found; rows decoded on demand."""

    def __init__(self, path: str, shard: str) -> None:
        self._shard = shard
        self._data, size = _load(path, shard)
        buf = np.frombuffer(self._data, np.uint8) if size else np.empty(0, np.uint8)
        self._bounds = row_bounds(buf)
        del buf  # a view into the map would keep it from closing

    def __len__(self) -> int:
        return int(self._bounds.size - 1)

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        start, end = int(self._bounds[row]), int(self._bounds[row + 1])
        try:
            return json.loads(self._data[start:end])
        except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
            line = int(np.count_nonzero(np.frombuffer(self._data, np.uint8, count=start) == _NL)) + 1
            raise shard_error(self._shard, f"line {line} (row {row}), not valid JSON", "one JSON value a line",
                              why=str(e)) from e

    def take(self, rows: np.ndarray) -> Rows:
        """Rows decoded in the order of their byte offsets; a line that is not JSON is reported as
        the per-row read reports it (the first bad row in the order asked)."""
        rows = check_rows(rows, len(self))
        bounds, data = self._bounds, self._data
        try:
            return Rows(in_sorted_order(rows, lambda row: json.loads(data[int(bounds[row]):int(bounds[row + 1])])))
        except (ValueError, UnicodeDecodeError):
            return Rows([self[row] for row in rows.tolist()])

    def locate(self, row: int) -> dict[str, Any]:
        """Where row ``row`` lies: its 1-based line, and its bytes (in the decompressed text of a
        compressed shard: ``decompressed`` says so). Counting the line reads the text up to the row."""
        row = check_row(row, len(self))
        start, end = int(self._bounds[row]), int(self._bounds[row + 1])
        line = int(np.count_nonzero(np.frombuffer(self._data, np.uint8, count=start) == _NL)) + 1
        return {"line": line, "byte_offset": start, "bytes": end - start,
                "decompressed": not isinstance(self._data, mmap.mmap) and end > 0}

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()
        self._data = b""


class JsonlReader:
    """JSON Lines, plain or compressed; a row is whatever the line decodes to (usually a dict)."""

    name: str = "jsonl"
    suffixes: tuple[str, ...] = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.zstd", ".ndjson",
                                 ".json.gz", ".json.zst", ".json.zstd")
    takes: tuple[str, ...] = ()

    def open(self, path: str, shard: str) -> OpenJsonl:
        return OpenJsonl(path, shard)

    def options(self) -> dict[str, Any]:
        return {}

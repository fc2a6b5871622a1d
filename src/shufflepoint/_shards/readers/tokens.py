"""Pre-tokenized shards: a flat stream of token ids, cut into training windows.

``.npy`` (``np.save``; its header carries the dtype, which must match ``dtype=``) or ``.bin`` (raw
little-endian ids, nanoGPT's and Megatron's ``.bin``, read with ``dtype=``). Both are memory-mapped.

Row i is the window ``tokens[i * seq_len : i * seq_len + seq_len + 1]``, seq_len + 1 tokens as
nanoGPT and Megatron train on them (inputs ``w[:-1]``, targets ``w[1:]``): consecutive windows
share one token, so a shard of n tokens has ``(n - 1) // seq_len`` rows and the tail that does not
fill a window is not read. Windows never cross shards. A row is a ``torch.int64`` tensor, so the
default collate stacks a batch into ``(batch, seq_len + 1)``.

Words: docs/glossary.md (token window, shard, row, ranged read).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from shufflepoint._errors import ShardError, refusal, shard_error
from shufflepoint._shards.corpora.shards.batch import Stacked
from shufflepoint._shards.readers._common import check_row, check_rows, suffix_of
from shufflepoint._shards.readers.base import Ranged

DTYPES = ("uint16", "uint32", "int32", "int64")
_SEQ_LEN = "pass seq_len= (the tokens of a row, without the one more its labels read)"
_NPY_MAGIC = b"\x93NUMPY"


def _is_npy(path: str, shard: str) -> bool:
    """By the shard's name, else the local file's, else its magic bytes."""
    for name in (shard, path):
        suffix = suffix_of(name)[-4:]  # once per name: a resume's first batch opens ~110 shards
        if suffix == ".npy":
            return True
        if suffix == ".bin":
            return False
    with open(path, "rb") as f:
        return f.read(len(_NPY_MAGIC)) == _NPY_MAGIC


_MAP_AFTER = 64  # windows a shard serves by pread before it is memory-mapped
_LITTLE = {name: np.dtype(name).newbyteorder("<") for name in DTYPES}  # a raw .bin's ids


def _npy_contents(size: int, path: str, shard: str, dtype: str) -> tuple[np.dtype[Any], int, int]:
    """(dtype, byte offset of the data, tokens) of a ``.npy`` shard, from its header, checked."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, found = (np.lib.format.read_array_header_2_0(f) if version[0] >= 2
                                     else np.lib.format.read_array_header_1_0(f))
            offset = f.tell()
    except ShardError:  # the storage's own account (rewritten, vanished): never re-said
        raise
    except (ValueError, OSError, EOFError) as e:
        raise shard_error(shard, "a file that is not readable .npy (truncated or corrupt?)", "a .npy file",
                          why=str(e)) from e
    if len(shape) != 1:
        raise ShardError(shard, f"holds an array of shape {shape}, expected a 1-D array of token ids")
    if found.name != dtype:
        raise ShardError(shard, f"dtype: the .npy holds {found.name}, the reader expects {dtype}; "
                                f"pass dtype={found.name!r} if that is right")
    if offset + shape[0] * found.itemsize > size:
        raise ShardError(shard, f"is not a readable .npy file (truncated or corrupt?): its header says {shape[0]} "
                                f"tokens ({offset + shape[0] * found.itemsize} bytes), the file has {size}")
    return found, offset, int(shape[0])


def _bin_contents(size: int, path: str, shard: str, dtype: str) -> tuple[np.dtype[Any], int, int]:
    """(dtype, byte offset of the data, tokens) of a raw ``.bin`` shard, from its size, checked."""
    item = _LITTLE[dtype]
    if size % item.itemsize:
        raise ShardError(shard, f"truncated: {size} bytes is not a whole number of {dtype} tokens "
                                f"({item.itemsize} bytes each); check the file and dtype=")
    return item, 0, size // item.itemsize


class OpenTokens:
    """One token stream, cut into windows of seq_len + 1.

    Its first windows are read by ``os.pread``, the file memory-mapped only once it has served
    ``_MAP_AFTER`` of them: a map costs ~60 us to set up, a window ~3 us to read, and the first
    batch of a resume reads a few windows of each of the ~130 shards of a block (shards of 500
    windows, the default block of 65,536): 10 ms of maps, 1 ms of reads. Later batches find the
    shards of their block mapped."""

    def __init__(self, fd: int, path: str, shard: str, dtype: np.dtype[Any], offset: int, tokens: int,
                 seq_len: int, ranged: Ranged | None = None) -> None:
        self._path, self._shard, self._dtype, self._offset = path, shard, dtype, offset
        self._ranged = ranged  # a remote .bin read by range: its windows fetched, then read from its partial copy
        self._windows: tuple[Any, np.ndarray, bool] | None = None  # (the partial copy's map, its windows, complete)
        self._size, self._seq_len = tokens, seq_len
        self._rows = max(0, (tokens - 1) // seq_len)
        self._fd: int | None = fd  # None: closed; -1: handed over to the map
        self._tokens: np.ndarray | None = None  # the map, once made
        self._preads = 0

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, row: int) -> torch.Tensor:
        start = check_row(row, self._rows) * self._seq_len
        if (self._preads < _MAP_AFTER or self._ranged is not None) and self._tokens is None:
            return torch.from_numpy(self._read_windows([start // self._seq_len])[0])
        return torch.from_numpy(self._mapped()[start:start + self._seq_len + 1].astype(np.int64))

    def take(self, rows: np.ndarray) -> Stacked:
        """The windows as one (rows, seq_len + 1) int64 tensor: one fancy index into the map."""
        rows = check_rows(rows, self._rows)
        if self._tokens is None and (self._preads + rows.size <= _MAP_AFTER or self._ranged is not None):
            return Stacked(torch.from_numpy(self._read_windows(rows.tolist())))
        tokens = self._mapped()
        step = tokens.strides[0]  # the windows as rows of a strided view: a row gather copies
        windows = as_strided(tokens, shape=(self._rows, self._seq_len + 1),  # 65 tokens at once,
                             strides=(step * self._seq_len, step), writeable=False)  # 4x an index per token
        return Stacked(torch.from_numpy(windows[rows].astype(np.int64)))

    def take_into(self, out: np.ndarray, where: np.ndarray, rows: np.ndarray) -> None:
        """``take(rows)`` written into rows ``where`` of ``out`` ((n, seq_len + 1), int64 or the shards'
        token type): a batch across many shards is filled in place (``Shards._read_windows``), no array per
        shard, no join, no reorder; in the token type a pread writes the window's bytes where they go."""
        rows = check_rows(rows, self._rows)
        if self._ranged is not None:  # arrays, not lists: a fancy index of the partial copy's windows
            self._read_windows(rows, out, where)
            return
        if self._tokens is None and self._preads + rows.size <= _MAP_AFTER:
            self._read_windows(rows.tolist(), out, where.tolist())
            return
        tokens = self._mapped()
        step = tokens.strides[0]
        windows = as_strided(tokens, shape=(self._rows, self._seq_len + 1),
                             strides=(step * self._seq_len, step), writeable=False)
        out[where] = windows[rows]

    def locate(self, row: int) -> dict[str, Any]:
        """Where window ``row`` lies: its first token, and its bytes in the file (header included)."""
        start = check_row(row, self._rows) * self._seq_len
        item = self._dtype.itemsize
        return {"token_offset": start, "tokens": self._seq_len + 1, "byte_offset": self._offset + start * item,
                "bytes": (self._seq_len + 1) * item}

    def _read_windows(self, rows: list[int] | np.ndarray, out: np.ndarray | None = None,
                      where: list[int] | np.ndarray | None = None) -> np.ndarray:
        """Windows ``rows`` by ``os.pread``, as int64 rows of a new array, or into rows ``where`` of ``out``."""
        if self._fd is None:
            raise ValueError("the shard is closed")
        width, item = self._seq_len + 1, self._dtype.itemsize
        if out is None or where is None:
            out, where = np.empty((len(rows), width), dtype=np.int64), list(range(len(rows)))
        if self._ranged is not None:  # the windows' bytes fetched first (few GETs), then read from the partial copy
            view = None
            if self._windows is None or not self._windows[2]:  # the whole file held: nothing to fetch again
                at = self._offset + np.asarray(rows, np.int64) * (self._seq_len * item)
                view = self._ranged.source.holding(np.stack([at, at + width * item], axis=1))
            out[where] = self._held_windows(view)[rows]
        elif out.dtype == self._dtype:  # rows of the shard's own type: the bytes go straight into place
            for i, row in zip(where, rows, strict=True):
                if os.preadv(self._fd, [out[i]], self._offset + row * self._seq_len * item) != width * item:
                    self._truncated(row)
        else:
            for i, row in zip(where, rows, strict=True):
                data = os.pread(self._fd, width * item, self._offset + row * self._seq_len * item)
                if len(data) != width * item:
                    self._truncated(row)
                out[i] = np.frombuffer(data, self._dtype)
        self._preads += len(rows)
        return out

    def _held_windows(self, view: memoryview | None) -> np.ndarray:
        """The windows of a shard read by range, over ``view``, the map of the partial copy that holds
        the windows read (``PartialShard.holding``): made once per copy of the file (a new one after an
        eviction, which the map of the old one would read as zeros where the new one fetched since)."""
        assert self._ranged is not None
        if self._windows is not None and self._windows[2]:  # complete: its map never changes again
            return self._windows[1]
        assert view is not None
        if self._windows is None or self._windows[0] is not view.obj:
            held = np.frombuffer(view, self._dtype)
            step = held.strides[0]
            self._windows = (view.obj, as_strided(held, shape=(self._rows, self._seq_len + 1),
                                                  strides=(step * self._seq_len, step), writeable=False), False)
        if self._ranged.source.complete():  # an evicted copy stays readable while mapped
            self._windows = (self._windows[0], self._windows[1], True)
        return self._windows[1]

    def _truncated(self, row: int) -> None:
        raise ShardError(self._shard, f"truncated: window {row} ends past the file's end; it changed since it was "
                                      "opened")

    def _mapped(self) -> np.ndarray:
        if self._tokens is None:
            if self._fd is None:
                raise ValueError("the shard is closed")
            if self._size == 0:
                self._tokens = np.empty(0, self._dtype)
            else:  # a plain ndarray view of the map (it keeps the map alive): slicing a np.memmap
                # runs its __array_finalize__ on every window, a third of the per-sample time.
                mapped = np.memmap(self._path, dtype=self._dtype, mode="r", offset=self._offset, shape=(self._size,))
                self._tokens = mapped.view(np.ndarray)
            os.close(self._fd)  # the map keeps its own: one descriptor per open shard, not two
            self._fd = -1
        return self._tokens

    # Bound at class creation: at interpreter exit ``__del__`` may run after this module's globals
    # (``os``) were cleared, and each shard still open printed an ignored AttributeError.
    _close_fd = staticmethod(os.close)

    def close(self) -> None:
        self._tokens = None  # the last reference to the memmap: dropping it unmaps the file
        if self._fd is not None and self._fd >= 0:
            self._close_fd(self._fd)
        self._fd = None
        if self._ranged is not None:
            self._ranged.source.close()

    def __del__(self) -> None:
        # Dropped unclosed (its Shards garbage-collected, or a forked worker letting its parent's go):
        # the descriptor goes too, as a dropped memmap's does.
        if getattr(self, "_fd", None) is not None:
            self.close()


class TokensReader:
    """Token files; ``seq_len`` (required) is the window length, ``dtype`` the ids' type (uint16
    unless given: GPT-2-sized vocabularies fit it, as in nanoGPT)."""

    name: str = "tokens"
    suffixes: tuple[str, ...] = (".bin", ".npy")
    takes: tuple[str, ...] = ("seq_len", "dtype")

    def __init__(self, seq_len: int | None = None, dtype: Any = None) -> None:
        if seq_len is None:
            raise ValueError(refusal("seq_len", None, "an int >= 1: the tokens reader needs it", _SEQ_LEN,
                                     why="each row is a window of seq_len + 1 tokens"))
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
            raise ValueError(refusal("seq_len", seq_len, "an int >= 1", _SEQ_LEN))
        try:
            name = "uint16" if dtype is None else np.dtype(dtype).name
        except TypeError:
            name = ""
        if name not in DTYPES:
            raise ValueError(refusal("dtype", dtype, f"one of {', '.join(DTYPES)} (default uint16)",
                                     "pass the dtype the token file was written with"))
        self.seq_len = int(seq_len)
        self.dtype = name

    @property
    def token_type(self) -> np.dtype[Any]:
        """The type a ``.bin`` shard holds its tokens in (little-endian): what a batch is read in first."""
        found: np.dtype[Any] = _LITTLE[self.dtype]
        return found

    @property
    def window_width(self) -> int:
        """Tokens a row holds (seq_len + 1): every row of every shard is an int64 row this wide."""
        return self.seq_len + 1

    def open(self, path: str, shard: str) -> OpenTokens:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise shard_error(shard, "a file that cannot be read", "a readable file", why=str(e)) from e
        try:
            size = os.fstat(fd).st_size  # the descriptor in hand, not a second lookup of the path
        except BaseException:
            os.close(fd)
            raise
        return self.open_descriptor(fd, path, shard, size)

    def open_descriptor(self, fd: int, path: str, shard: str, size: int) -> OpenTokens:
        """``open`` of a descriptor already open on ``path`` whose size is known (``Storage.open_local``
        checked it against the index); the shard owns ``fd`` from here, closed on any error."""
        try:
            contents = _npy_contents if _is_npy(path, shard) else _bin_contents
            dtype, offset, tokens = contents(size, path, shard, self.dtype)
            return OpenTokens(fd, path, shard, dtype, offset, tokens, self.seq_len)
        except BaseException as e:
            os.close(fd)
            if isinstance(e, OSError):
                raise shard_error(shard, "a file that cannot be read", "a readable file", why=str(e)) from e
            raise

    def ranged_for(self, shard: str) -> bool:
        """A ``.bin`` shard is read by range (its size says where each window lies); a ``.npy`` is fetched whole."""
        return suffix_of(shard).endswith(".bin")

    def open_ranged(self, ranged: Ranged, shard: str) -> OpenTokens:
        """A remote ``.bin`` read by range (``_shards/storage/ranged``): each window's bytes as it is read."""
        item = _LITTLE[self.dtype]
        size = ranged.source.size()
        if size % item.itemsize:
            raise ShardError(shard, f"truncated: {size} bytes is not a whole number of {self.dtype} tokens "
                                    f"({item.itemsize} bytes each); check the file and dtype=")
        return OpenTokens(-1, "", shard, item, 0, size // item.itemsize, self.seq_len, ranged)

    def dense_gap(self) -> int:
        """Read-ahead's widest joined gap for a rank reading densely (``TilesShards``): every byte of a
        ``.bin`` is some window's, so a gap is read next anyway, and a GET's round trip (~30 ms on an object
        store) costs what ~3 MB take at 100 MB/s: a 1 MiB gap is cheaper fetched than skipped."""
        return 1 << 20

    def ranged_plan(self, ranged: Ranged, shard: str) -> Callable[[np.ndarray], list[tuple[int, int]]]:
        """What read-ahead fetches for windows of a remote ``.bin`` (``_shards/storage/ranged``): their bytes,
        from arithmetic alone (no read)."""
        item = _LITTLE[self.dtype].itemsize
        step, width = self.seq_len * item, (self.seq_len + 1) * item

        def plan(rows: np.ndarray) -> list[tuple[int, int]]:
            return [(start, start + width) for start in (np.unique(rows) * step).tolist()]
        return plan

    def rows_from_size(self, shard: str, size: int) -> int | None:
        """The windows of a raw ``.bin`` shard follow from its size, so indexing a bucket of them
        downloads nothing; None for anything else (a ``.npy`` header says) or a size that is not
        whole tokens (the read reports it)."""
        item = np.dtype(self.dtype).itemsize
        if not suffix_of(shard).endswith(".bin") or size % item:
            return None
        return max(0, (size // item - 1) // self.seq_len)

    def rows_from_metadata(self, read: Callable[[int, int], bytes], size: int, shard: str) -> int | None:
        """The windows of a ``.npy`` shard from its header (two small ranged reads: the preamble,
        then the header), checked as ``open`` checks it; None for a ``.bin`` (see rows_from_size)."""
        if not suffix_of(shard).endswith(".npy"):
            return None
        preamble = read(0, min(size, 12))
        if preamble[:6] != _NPY_MAGIC or len(preamble) < 10:
            raise ShardError(shard, f"is not a readable .npy file: no NumPy header in its first bytes ({size} bytes)")
        wide = preamble[6] >= 2  # format 2.0 and 3.0: a 4-byte header length
        start = 12 if wide else 10
        length = int.from_bytes(preamble[8:start], "little")
        if start + length > size:
            raise ShardError(shard, f"truncated: its .npy header needs {start + length} bytes, the file has {size}")
        header = io.BytesIO(preamble[:start] + read(start, start + length))
        try:
            version = np.lib.format.read_magic(header)
            shape, _, dtype = (np.lib.format.read_array_header_2_0(header) if version[0] >= 2
                               else np.lib.format.read_array_header_1_0(header))
        except ValueError as e:
            raise shard_error(shard, "a file that is not readable .npy", "a .npy file", why=str(e)) from e
        if len(shape) != 1:
            raise ShardError(shard, f"holds an array of shape {shape}, expected a 1-D array of token ids")
        if dtype.name != self.dtype:
            raise ShardError(shard, f"dtype: the .npy holds {dtype.name}, the reader expects {self.dtype}; "
                                    f"pass dtype={dtype.name!r} if that is right")
        if start + length + shape[0] * dtype.itemsize != size:
            raise ShardError(shard, f"truncated or corrupt: its header says {shape[0]} tokens "
                                    f"({start + length + shape[0] * dtype.itemsize} bytes), the file has {size}")
        return max(0, (int(shape[0]) - 1) // self.seq_len)

    def options(self) -> dict[str, Any]:
        return {"seq_len": self.seq_len, "dtype": self.dtype}

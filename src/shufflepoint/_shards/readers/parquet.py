"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). The footer alone also gives
the rows of a shard that is not downloaded (``rows_from_metadata``: two ranged reads). Decoded row groups are kept
(see ``OpenParquet``), so the rows of a shuffled block decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shufflepoint._core.errors import ShardError
from shufflepoint._shards.readers._common import check_columns, check_row, extra, missing_columns


def _pyarrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    return (pa.ArrowException, OSError, ValueError)


_MAGIC = b"PAR1"
_KEEP_BYTES = 32 << 20  # decoded row groups kept per open file (at least one)


class OpenParquet:
    """One Parquet file, its footer read; row groups decoded on demand and kept, least recently
    used first out, up to ``_KEEP_BYTES``: a shuffled block asks for its rows in any order, and
    keeping only the last group decoded one group per sample (74 µs for 100 rows of 1 KiB)."""

    def __init__(self, path: str, shard: str, columns: list[str] | None) -> None:
        pa = extra("pyarrow", "parquet")
        parquet = extra("pyarrow.parquet", "parquet")
        self._shard, self._columns, self._errors = shard, columns, _pyarrow_errors(pa)
        try:
            self._file = parquet.ParquetFile(path, memory_map=True)
            meta = self._file.metadata
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            names = list(self._file.schema_arrow.names)
        except self._errors as e:
            raise ShardError(shard, f"is not a readable Parquet file: {e}") from e
        wrong = missing_columns(shard, columns, names)
        if wrong:
            raise ShardError(shard, wrong)
        self._ends = np.cumsum(np.asarray(sizes, np.int64))
        self._tables: OrderedDict[int, Any] = OrderedDict()
        self._held = 0

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        group = int(np.searchsorted(self._ends, row, side="right"))
        offset = row - (int(self._ends[group - 1]) if group else 0)
        return self._group(group).slice(offset, 1).to_pylist()[0]  # fresh objects: safe to mutate

    def _group(self, group: int) -> Any:
        table = self._tables.get(group)
        if table is not None:
            self._tables.move_to_end(group)
            return table
        try:
            table = self._file.read_row_group(group, columns=self._columns)
        except self._errors as e:
            raise ShardError(self._shard, f"row group {group} cannot be decoded: {e}") from e
        self._tables[group] = table
        self._held += table.nbytes
        while self._held > _KEEP_BYTES and len(self._tables) > 1:
            self._held -= self._tables.popitem(last=False)[1].nbytes
        return table

    def close(self) -> None:
        self._tables.clear()
        self._held = 0
        self._file.close()


class ParquetReader:
    """Parquet files; ``columns=`` reads only those columns (all by default)."""

    name: str = "parquet"
    suffixes: tuple[str, ...] = (".parquet", ".pq")
    takes: tuple[str, ...] = ("columns",)

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = check_columns(columns)

    def open(self, path: str, shard: str) -> OpenParquet:
        return OpenParquet(path, shard, self.columns)

    def rows_from_metadata(self, read: Callable[[int, int], bytes], size: int, shard: str) -> int:
        """The rows the footer records, read as the last 8 bytes (footer length, magic), then the
        footer: a shard is indexed without downloading it. Checks the columns as ``open`` does."""
        pa = extra("pyarrow", "parquet")
        parquet = extra("pyarrow.parquet", "parquet")
        tail = read(size - 8, size) if size >= 12 else b""
        length = int.from_bytes(tail[:4], "little") if tail[4:] == _MAGIC else -1
        if not 0 < length <= size - 12:
            raise ShardError(shard, f"is not a readable Parquet file: no footer at the end of its {size} bytes "
                                    "(truncated, or not Parquet)")
        try:
            meta = parquet.read_metadata(pa.BufferReader(_MAGIC + read(size - 8 - length, size - 8) + tail))
            names = list(meta.schema.to_arrow_schema().names)
            rows = sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
        except _pyarrow_errors(pa) as e:
            raise ShardError(shard, f"is not a readable Parquet file: {e}") from e
        wrong = missing_columns(shard, self.columns, names)
        if wrong:
            raise ShardError(shard, wrong)
        return int(rows)

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). The footer alone also gives
the rows of a shard that is not downloaded (``rows_from_metadata``: two ranged reads). Decoded row groups are kept
(see ``_decoded``), so the rows of a shuffled block decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shufflepoint._core.errors import ShardError
from shufflepoint._shards.batch import Batch, Columns, Rows, gather
from shufflepoint._shards.readers._common import check_columns, check_row, check_rows, extra, missing_columns
from shufflepoint._shards.readers._decoded import GROUPS
from shufflepoint._shards.readers._flat import FlatColumns
from shufflepoint._shards.readers._group import DecodedGroup


def _pyarrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    return (pa.ArrowException, OSError, ValueError)


_MAGIC = b"PAR1"


class OpenParquet:
    """One Parquet file, its footer read; row groups decoded on demand and kept in the process's
    ``_decoded.GROUPS`` (one byte budget for every open file)."""

    def __init__(self, path: str, shard: str, columns: list[str] | None) -> None:
        self._pa = extra("pyarrow", "parquet")
        parquet = extra("pyarrow.parquet", "parquet")
        self._shard, self._columns, self._errors = shard, columns, _pyarrow_errors(self._pa)
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
        self._flat = FlatColumns(self._ends)
        self._rows = len(self)
        self._owner = GROUPS.owner()

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        group = int(np.searchsorted(self._ends, row, side="right"))
        offset = row - (int(self._ends[group - 1]) if group else 0)
        return self._group(group).row(offset)

    def take(self, rows: np.ndarray) -> Batch:
        """The rows at ``rows``, in that order: one numpy index per column over the file's flat
        columns (``_flat``), decoding the row groups not held yet; a column that is not flat (lists,
        structs, ...) is converted group by group from Arrow, fresh objects each batch."""
        rows = check_rows(rows, self._rows)
        if not rows.size:
            return Rows([])
        flat = self._flat
        columns: list[Any] | None
        if flat.complete and flat.names is not None:  # every group held: no group to look up
            columns = flat.columns(rows, None)
            if all(column is not None for column in columns):
                return Columns(flat.names, columns, rows.size)
        numbers = np.searchsorted(self._ends, rows, side="right")
        held = flat.held[numbers]
        if not held.all():
            for number in set(numbers[~held].tolist()):
                self._group(number)
            held = flat.held[numbers]
        columns = flat.columns(rows, numbers) if held.all() else None
        if columns is None or flat.names is None or any(column is None for column in columns):
            offsets = rows - flat.starts[numbers]
            return gather(numbers, lambda number, where: self._group(number).take(offsets[where]))
        return Columns(flat.names, columns, rows.size)

    def _group(self, group: int) -> DecodedGroup:
        found: DecodedGroup = GROUPS.get(self._owner, group, lambda: DecodedGroup(self._decode(group), self._pa))
        if not self._flat.held[group] and (self._owner, group) in GROUPS and self._flat.add(group, found):
            found.release = functools.partial(self._flat.forget, group)  # kept: laid out flat until let go
        return found

    def _decode(self, group: int) -> Any:
        try:
            return self._file.read_row_group(group, columns=self._columns)
        except self._errors as e:
            raise ShardError(self._shard, f"row group {group} cannot be decoded: {e}") from e

    def close(self) -> None:
        GROUPS.drop(self._owner)
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

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

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

"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). The last decoded row group
is kept, so the consecutive rows the ``blocks`` order asks for decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shufflepoint._core.errors import ShardError
from shufflepoint._shards.readers._common import check_columns, check_row, extra, missing_columns


def _pyarrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    return (pa.ArrowException, OSError, ValueError)


class OpenParquet:
    """One Parquet file, its footer read; row groups decoded on demand, the last one kept."""

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
        self._group = -1
        self._table: Any = None

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        group = int(np.searchsorted(self._ends, row, side="right"))
        if group != self._group:
            try:
                self._table = self._file.read_row_group(group, columns=self._columns)
            except self._errors as e:
                raise ShardError(self._shard, f"row group {group} cannot be decoded: {e}") from e
            self._group = group
        offset = row - (int(self._ends[group - 1]) if group else 0)
        return self._table.slice(offset, 1).to_pylist()[0]

    def close(self) -> None:
        self._table, self._group = None, -1
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

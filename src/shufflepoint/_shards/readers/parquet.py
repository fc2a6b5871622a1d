"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). Decoded row groups are kept
(see ``_decoded``), so the rows of a shuffled block decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shufflepoint._core.errors import ShardError
from shufflepoint._shards.batch import Column, Columns, Rows
from shufflepoint._shards.readers._common import check_columns, check_row, check_rows, extra, missing_columns
from shufflepoint._shards.readers._decoded import GROUPS
from shufflepoint._shards.readers._group import DecodedGroup


def _pyarrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    return (pa.ArrowException, OSError, ValueError)


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
        self._owner = GROUPS.owner()

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        group = int(np.searchsorted(self._ends, row, side="right"))
        offset = row - (int(self._ends[group - 1]) if group else 0)
        return self._group(group).row(offset)

    def take(self, rows: np.ndarray) -> Columns | Rows:
        """Each row group decoded and converted once (kept, see ``_group``); a batch picks its rows
        from the converted columns, group by group, and puts them back in the order asked."""
        rows = check_rows(rows, len(self))
        groups = np.searchsorted(self._ends, rows, side="right")
        offsets = rows - np.concatenate(([0], self._ends))[groups]
        decoded = {g: self._group(g) for g in np.unique(groups).tolist()}
        names = {group.names for group in decoded.values()}
        if len(names) != 1:  # cannot happen within one file; the per-row path says what it holds
            return Rows([self[row] for row in rows.tolist()])
        by_group = np.argsort(groups, kind="stable")
        starts = np.flatnonzero(np.diff(groups[by_group], prepend=-1))
        spans = [(int(groups[by_group[a]]), by_group[a:b]) for a, b in zip(starts, [*starts[1:], rows.size],
                                                                           strict=True)]
        inverse = np.empty_like(by_group)
        inverse[by_group] = np.arange(by_group.size)
        columns: list[Column] = []
        for k in range(len(next(iter(names)))):
            parts = [decoded[g].pick(k, offsets[where]) for g, where in spans]
            arrays = [p for p in parts if isinstance(p, np.ndarray)]
            if len(arrays) == len(parts) and len({a.dtype for a in arrays}) == 1:
                columns.append(np.concatenate(arrays)[inverse] if len(arrays) > 1 else arrays[0][inverse])
            else:
                joined = [v for p in parts for v in (p.tolist() if isinstance(p, np.ndarray) else p)]
                columns.append([joined[i] for i in inverse.tolist()])
        return Columns(next(iter(names)), columns, rows.size)

    def _group(self, group: int) -> DecodedGroup:
        found: DecodedGroup = GROUPS.get(self._owner, group, lambda: DecodedGroup(self._decode(group), self._pa))
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

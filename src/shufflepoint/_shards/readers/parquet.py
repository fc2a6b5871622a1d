"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). The footer alone also gives
the rows of a shard that is not downloaded (``rows_from_metadata``: two ranged reads). Decoded row groups are kept
(see ``_decoded``), so the rows of a shuffled block decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shufflepoint._core.errors import ShardError
from shufflepoint._shards.batch import Column, Columns, Rows
from shufflepoint._shards.readers._common import check_columns, check_row, check_rows, extra, missing_columns
from shufflepoint._shards.readers._decoded import GROUPS
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
        self._ends_list = self._ends.tolist()
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
        from the converted values, one Python pass over the rows (a batch of the blocks order holds
        a few rows of each of dozens of groups: per-group numpy calls cost more than the rows)."""
        rows = check_rows(rows, len(self))
        ends = self._ends_list
        found: dict[int, DecodedGroup] = {}
        picked: list[tuple[DecodedGroup, int, int]] = []  # (group, its number, offset) per row
        for row in rows.tolist():
            number = bisect.bisect_right(ends, row)
            group = found.get(number)
            if group is None:
                group = found[number] = self._group(number)
            picked.append((group, number, row - (ends[number - 1] if number else 0)))
        names = {group.names for group in found.values()}
        if len(names) != 1:  # an empty batch, or (never within one file) groups that disagree
            return Rows([self[row] for row in rows.tolist()])
        columns: list[Column] = []
        for k in range(len(next(iter(names)))):
            if all(group.values[k] is not None for group in found.values()):
                values = [group.values[k][offset] for group, _, offset in picked]  # type: ignore[index]
            else:
                values = self._converted(k, picked, found)
            kinds = {group.kinds[k] for group in found.values()}
            kind = kinds.pop() if len(kinds) == 1 else None
            columns.append(values if kind is None else np.array(values, dtype=kind))
        return Columns(next(iter(names)), columns, rows.size)

    @staticmethod
    def _converted(k: int, picked: list[tuple[DecodedGroup, int, int]], found: dict[int, DecodedGroup]) -> list[Any]:
        """Column k of a batch where it is converted per batch: one Arrow take per group."""
        places: dict[int, tuple[list[int], list[int]]] = {}
        for place, (_, number, offset) in enumerate(picked):
            where, offsets = places.setdefault(number, ([], []))
            where.append(place)
            offsets.append(offset)
        values: list[Any] = [None] * len(picked)
        for number, (where, offsets) in places.items():
            group = found[number]
            kept = group.values[k]
            converted = [kept[o] for o in offsets] if kept is not None else group.convert(k, offsets)
            for place, value in zip(where, converted, strict=True):
                values[place] = value
        return values

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

"""A decoded Parquet row group with its columns already in the Python form the rows are made of.

Over a shuffled block every row of a group is read once, so converting the group's columns once
(as pyarrow's sequential decode does) costs what a sequential read costs, where converting the rows
a batch picks, group by group, paid an Arrow ``take`` per group and batch (~40 µs each, a dozen per
batch). Only columns whose values are immutable are kept converted (numbers, as numpy arrays when
they have no nulls; str and bytes as lists): a row can then share them without a caller's mutation
reaching the cache. Lists, structs, maps and the rest are converted per batch from the Arrow table.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from shufflepoint._shards.batch import Column
from shufflepoint._shards.readers.arrow import _as_numbers


def _immutable(kind: Any, pa: Any) -> bool:
    types = pa.types
    return bool(types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)
                or types.is_string(kind) or types.is_large_string(kind)
                or types.is_binary(kind) or types.is_large_binary(kind))


def _list_bytes(values: list[Any]) -> int:
    return sys.getsizeof(values) + sum(map(sys.getsizeof, values))


class DecodedGroup:
    """``names``; ``columns[k]`` converted (numpy array or list) or None (read from ``table``);
    ``table`` None when every column is converted. ``nbytes``: what it holds, for the budget."""

    def __init__(self, table: Any, pa: Any) -> None:
        self.names = tuple(table.column_names)
        self.rows = table.num_rows
        self.columns: list[Column | None] = []
        for column in table.columns:
            if _as_numbers(column, pa):
                self.columns.append(column.to_numpy())
            elif _immutable(column.type, pa):
                self.columns.append(column.to_pylist())
            else:
                self.columns.append(None)
        self.table = table if any(c is None for c in self.columns) else None
        self.nbytes = (int(table.nbytes) if self.table is not None else 0) + sum(
            c.nbytes if isinstance(c, np.ndarray) else _list_bytes(c) for c in self.columns if c is not None)

    def row(self, offset: int) -> dict[str, Any]:
        """Row ``offset`` as the per-row path gives it (``to_pylist`` of a one-row slice)."""
        if self.table is not None:
            row: dict[str, Any] = self.table.slice(offset, 1).to_pylist()[0]
            return row
        return {name: (column[offset].item() if isinstance(column, np.ndarray) else column[offset])
                for name, column in zip(self.names, self.converted(), strict=True)}

    def converted(self) -> list[Column]:
        """The columns, when every one is converted (``table`` is None)."""
        return [c for c in self.columns if c is not None]

    def pick(self, k: int, offsets: np.ndarray) -> Column:
        """Column k's values at ``offsets``: fresh numpy arrays, shared immutable values, or lists
        converted from an Arrow take (fresh objects)."""
        column = self.columns[k]
        if isinstance(column, np.ndarray):
            taken: np.ndarray = column[offsets]
            return taken
        if column is not None:
            if offsets.size == 1:
                return [column[int(offsets[0])]]
            return list(operator.itemgetter(*offsets.tolist())(column))
        assert self.table is not None  # a column left unconverted keeps the table
        picked: list[Any] = self.table.column(k).take(offsets).to_pylist()
        return picked

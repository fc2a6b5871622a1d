"""A decoded Parquet row group with its columns already in the Python form the rows are made of.

Over a shuffled block every row of a group is read once, so converting the group's columns once
(as pyarrow's sequential decode does) costs what a sequential read costs, where converting the rows
a batch picks, group by group, paid an Arrow ``take`` per group and batch (~40 µs each, and a batch
of the blocks order touches dozens of groups). Only columns whose values are immutable are kept
converted (numbers, str, bytes, as Python lists): a row can then share them without a caller's
mutation reaching the cache. Lists, structs, maps and the rest are converted per batch from Arrow.

Words: docs/glossary.md (row group, block).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from shufflepoint._shards.corpora.shards.batch import Column, Columns
from shufflepoint._shards.readers._common import arrow_indices, numbers_view
from shufflepoint._shards.readers.arrow import _as_numbers


def _immutable(kind: Any, pa: Any) -> bool:
    types = pa.types
    return bool(types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)
                or types.is_string(kind) or types.is_large_string(kind)
                or types.is_binary(kind) or types.is_large_binary(kind))


_PER_VALUE = sys.getsizeof(2**40) + 8  # a Python value's header and its list slot, above its Arrow bytes


def _converted_bytes(column: Any) -> int:
    """About what ``column.to_pylist()`` holds: its Arrow bytes (a str's text, a number's 8 bytes)
    plus a Python object header and a list slot per value (summing ``sys.getsizeof`` over every
    value cost a third of the conversion itself)."""
    return int(column.nbytes) + _PER_VALUE * len(column)


class DecodedGroup:
    """``names``; ``values[k]``: column k's Python values (a list) when they are immutable, else
    None (converted per batch from ``table``); ``kinds[k]``: the numpy dtype a batch of column k
    becomes (``int64``/``float64``/``bool``, numbers without nulls) or None (stays a list).
    ``table`` is None when every column is converted; ``nbytes`` is what it holds, for the budget;
    ``release`` is called when the budget lets it go (see ``_flat``)."""

    release: Callable[[], None] | None = None

    def __init__(self, table: Any, pa: Any) -> None:
        self.names = tuple(table.column_names)
        self.rows = table.num_rows
        self.values: list[list[Any] | None] = []
        self.kinds: list[str | None] = []
        for column in table.columns:
            numbers = _as_numbers(column, pa)
            self.values.append(column.to_pylist() if numbers or _immutable(column.type, pa) else None)
            kind = column.type
            self.kinds.append(None if not numbers else "bool" if pa.types.is_boolean(kind)
                              else "int64" if pa.types.is_integer(kind) else "float64")
        self.table = table if any(v is None for v in self.values) else None
        self._pa = pa
        self._ids: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        self._id_lists: dict[int, tuple[np.ndarray, list[int]] | None] = {}
        self.nbytes = (int(table.nbytes) if self.table is not None else 0) + sum(
            _converted_bytes(column) for column, v in zip(table.columns, self.values, strict=True) if v is not None)

    def row(self, offset: int) -> dict[str, Any]:
        """Row ``offset`` as the per-row path gives it (``to_pylist`` of a one-row slice)."""
        if self.table is not None:
            row: dict[str, Any] = self.table.slice(offset, 1).to_pylist()[0]
            return row
        return {name: values[offset] for name, values in zip(self.names, self.values, strict=True)
                if values is not None}

    def convert(self, k: int, offsets: np.ndarray) -> list[Any]:
        """Column k (one left unconverted) at ``offsets``, from one Arrow take: fresh objects."""
        assert self.table is not None  # a column left unconverted keeps the table
        found: list[Any] = self.table.column(k).take(arrow_indices(offsets, self._pa)).to_pylist()
        return found

    def take(self, offsets: np.ndarray) -> Columns:
        """The rows at ``offsets`` as columns (numbers as a numpy array of ``kinds[k]``)."""
        picked = offsets.tolist()
        columns: list[Column] = []
        for k, values in enumerate(self.values):
            if values is None:
                columns.append(self.convert(k, offsets))
                continue
            taken = [values[o] for o in picked]
            kind = self.kinds[k]
            columns.append(taken if kind is None else np.array(taken, dtype=kind))
        return Columns(self.names, columns, len(picked))

    def ids(self, k: int) -> tuple[np.ndarray, list[int]] | None:
        """Column k as (values, offsets) when it is a list of integers without nulls (row i is the
        read-only view ``values[offsets[i]:offsets[i + 1]]``), else None: token ids for ``Packed``
        without a Python int per token (the offsets are a list: one int per row, not per token)."""
        if k not in self._id_lists:
            flat = self.id_offsets(k)
            self._id_lists[k] = None if flat is None else (flat[0], flat[1].tolist())
        return self._id_lists[k]

    def id_offsets(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``ids`` with the offsets as an int64 array (``Packed``'s token windows find many rows at once)."""
        if k not in self._ids:
            self._ids[k] = None
            column = self.table.column(k) if self.table is not None and self.values[k] is None else None
            types = self._pa.types
            if column is not None and (types.is_list(column.type) or types.is_large_list(column.type)) \
                    and types.is_integer(column.type.value_type) and column.null_count == 0:
                lists = column.combine_chunks()
                values, offsets = numbers_view(lists.values), numbers_view(lists.offsets)
                if values is not None and offsets is not None:
                    self._ids[k] = (values, offsets.astype(np.int64, copy=False))
        return self._ids[k]

"""What every reader shares: optional extras imported late, option checks, the row bound check.

The extras (pyarrow, zstandard) ship no type information or are optional, so they are imported
through ``extra()`` as ``Any``: no mypy override is needed, and ``import shufflepoint`` never pays
for (or fails on) a format nobody uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.corpora.shards.batch import checked_indices


def extra(module: str, extra_name: str) -> Any:
    """``import module``, or an ImportError that names the pip extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(refusal(module, Plain("not installed"), "installed for this shard format",
                                  f"pip install 'shufflepoint[{extra_name}]'")) from e


def numbers_view(array: Any) -> np.ndarray | None:
    """A pyarrow array of fixed-width numbers without nulls as a read-only numpy view of its buffer, else
    None. ``Array.to_numpy`` would do the same, but its first call imports pandas where it is installed
    (~300 modules, ~0.3 s and tens of MB in every process and DataLoader worker that reads a column)."""
    kind = array.type
    try:
        width, dtype = kind.bit_width, np.dtype(kind.to_pandas_dtype())  # numpy's type: no pandas import
    except (ValueError, NotImplementedError, TypeError):  # strings, lists, structs: no fixed width
        return None
    if array.null_count or kind.num_fields:
        return None
    if dtype.kind not in "iuf" or dtype.itemsize * 8 != width:  # dates, times, decimals: to_numpy's business
        return None
    data = array.buffers()[1]
    if data is None:
        return None
    view = np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    view.flags.writeable = False  # Arrow's memory, shared by every batch that views it
    return view


def arrow_indices(rows: np.ndarray, pa: Any) -> Any:
    """Row numbers as a pyarrow int64 array for ``take``, built on the numpy buffer: ``pa.array`` of a
    list or numpy array imports pandas where it is installed (see ``numbers_view``)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), int(rows.size), [None, pa.py_buffer(rows)])


def check_columns(columns: Sequence[str] | None) -> list[str] | None:
    """``columns=`` as a list of distinct names, or None for every column."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not all(isinstance(c, str) for c in columns):
        raise ValueError(refusal("columns", columns, "a list of column names", "pass e.g. columns=['text']"))
    names = list(columns)
    if not names or len(set(names)) != len(names):
        raise ValueError(refusal("columns", names, "a non-empty list of distinct column names",
                                 "name each column once"))
    return names


def missing_columns(shard: str, wanted: list[str] | None, present: Sequence[str]) -> str | None:
    """The message for the first column in ``wanted`` that the shard lacks, or None."""
    for name in wanted or ():
        if name not in present:
            return f"column {name!r} not found; the shard has {', '.join(map(repr, present))}"
    return None


def check_row(row: int, rows: int) -> int:
    """``row`` as a plain int in ``[0, rows)``; negative rows are refused, not wrapped."""
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)):
        raise TypeError(refusal("row", Plain(type(row).__name__), "an int", "pass a row of the shard"))
    if not 0 <= row < rows:
        raise IndexError(refusal("row", int(row), f"a row in [0, {rows}) (out of range for a shard of {rows} rows)",
                                 "pass a row of the shard"))
    return int(row)


def check_rows(rows: Any, length: int) -> np.ndarray:
    """``rows`` as an int64 array, each in ``[0, length)``: the batched ``check_row``."""
    return checked_indices("rows", rows, length, many="rows", one="row", within=f"a shard of {length} rows")


def in_sorted_order(rows: np.ndarray, read: Callable[[int], Any]) -> list[Any]:
    """``[read(r) for r in rows]``, read in ascending row order (file locality), returned in the
    order asked."""
    order = np.argsort(rows, kind="stable")
    found: list[Any] = [None] * rows.size
    for asked, row in zip(order.tolist(), rows[order].tolist(), strict=True):
        found[asked] = read(row)
    return found


def suffix_of(name: str) -> str:
    """The lower-cased path of a name or URL without its ``?query``, for suffix tests."""
    return name.split("?", 1)[0].lower()

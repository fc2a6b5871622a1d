"""Arrow IPC shards: the ``.arrow`` files of a Hugging Face ``Dataset.save_to_disk`` folder.

``datasets`` writes the Arrow *stream* format; the *file* format (``ARROW1`` magic) is read too.
The file is memory-mapped, so opening it maps the record batches without copying them; row i is
found by binary search over the batch offsets and returned as ``dict`` column -> Python value.

``saved_dataset_files`` turns a saved-dataset folder into its arrow files in the dataset's row
order, the order ``state.json`` lists them in (``datasets`` itself concatenates them that way).

Words: docs/glossary.md (shard, row).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from shufflepoint._errors import ShardError, shard_error
from shufflepoint._shards.corpora.shards.batch import Column, Columns
from shufflepoint._shards.readers._common import (
    arrow_indices,
    check_columns,
    check_row,
    check_rows,
    extra,
    missing_columns,
    numbers_view,
)

_FILE_MAGIC = b"ARROW1"


def _read_table(path: str, pa: Any) -> Any:
    source = pa.memory_map(path, "r")
    try:
        is_file_format = source.read(len(_FILE_MAGIC)) == _FILE_MAGIC
        source.seek(0)
        opened = pa.ipc.open_file(source) if is_file_format else pa.ipc.open_stream(source)
        return opened.read_all()
    except BaseException:
        source.close()
        raise


def _as_numbers(column: Any, pa: Any) -> bool:
    """Whether a column's Python values are numbers a numpy array holds exactly: ints up to int64's
    range (not uint64), float32/64, bools, and no nulls."""
    kind = column.type
    exact = (pa.types.is_integer(kind) and not pa.types.is_uint64(kind)) or pa.types.is_boolean(kind) \
        or pa.types.is_float32(kind) or pa.types.is_float64(kind)
    return bool(exact and column.null_count == 0)


def _numbers(column: Any) -> np.ndarray:
    """A numeric column as numpy: views of its chunks' buffers where they are fixed-width numbers
    (``numbers_view``, no pandas import; several chunks joined), else pyarrow's ``to_numpy`` (bools)."""
    views = [view for view in map(numbers_view, column.chunks) if view is not None]
    if not views or len(views) != column.num_chunks:
        found: np.ndarray = column.to_numpy()
        return found
    return views[0] if len(views) == 1 else np.concatenate(views)


def columns_of(table: Any, pa: Any) -> Columns:
    """An Arrow table as ``Columns``, each column converted once: numbers as numpy arrays, the rest
    as pyarrow's Python values (``to_pylist``, the per-row conversion too)."""
    columns: list[Column] = [_numbers(column) if _as_numbers(column, pa) else column.to_pylist()
                             for column in table.columns]
    return Columns(table.column_names, columns, table.num_rows)


class OpenArrow:
    """One memory-mapped Arrow IPC file; rows read from its record batches."""

    def __init__(self, path: str, shard: str, columns: list[str] | None) -> None:
        pa = extra("pyarrow", "arrow")
        try:
            table = _read_table(path, pa)
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except (pa.ArrowException, OSError, ValueError) as e:
            raise shard_error(shard, "a file that is not readable Arrow IPC", "an Arrow IPC file (stream or file "
                              "format)", why=str(e)) from e
        wrong = missing_columns(shard, columns, table.schema.names)
        if wrong:
            raise ShardError(shard, wrong)
        if columns is not None:
            table = table.select(columns)
        self._pa = pa
        self._table = table
        self._batches = [b for b in table.to_batches() if b.num_rows]
        self._ends = np.cumsum(np.asarray([b.num_rows for b in self._batches], np.int64))

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        batch = int(np.searchsorted(self._ends, row, side="right"))
        offset = row - (int(self._ends[batch - 1]) if batch else 0)
        return self._batches[batch].slice(offset, 1).to_pylist()[0]

    def take(self, rows: np.ndarray) -> Columns:
        """One take over the table, each column converted once."""
        rows = check_rows(rows, len(self))
        return columns_of(self._table.take(arrow_indices(rows, self._pa)), self._pa)

    def locate(self, row: int) -> dict[str, Any]:
        """Where row ``row`` lies: its record batch in the file, and its row inside that batch."""
        row = check_row(row, len(self))
        batch = int(np.searchsorted(self._ends, row, side="right"))
        return {"record_batch": batch, "row_in_batch": row - (int(self._ends[batch - 1]) if batch else 0)}

    def close(self) -> None:
        self._table = None
        self._batches = []  # the batches hold the memory map; dropping them unmaps it


class ArrowReader:
    """Arrow IPC files; ``columns=`` keeps only those columns (all by default)."""

    name: str = "arrow"
    suffixes: tuple[str, ...] = (".arrow",)
    takes: tuple[str, ...] = ("columns",)

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = check_columns(columns)

    def open(self, path: str, shard: str) -> OpenArrow:
        return OpenArrow(path, shard, self.columns)

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}


def data_files_in_state(state_json: str, folder: str) -> list[str] | None:
    """The arrow files a saved dataset's ``state.json`` text lists, joined to ``folder``; None when
    it has no ``_data_files`` (not a saved ``Dataset``). Usable on a state.json fetched remotely."""
    where = os.path.join(folder, "state.json")
    try:
        state = json.loads(state_json)
    except ValueError as e:
        raise shard_error(where, "a state.json that is not valid JSON", "a saved dataset's state.json",
                          why=str(e)) from e
    files = state.get("_data_files") if isinstance(state, dict) else None
    if files is None:
        return None
    entries = files if isinstance(files, list) else [None]
    names = [f.get("filename") if isinstance(f, dict) else None for f in entries]
    good = [n for n in names if isinstance(n, str) and n and not os.path.isabs(n) and ".." not in n.split("/")]
    if len(good) != len(names):
        raise ShardError(where, f"_data_files: found {files!r}, expected a list of "
                                "{'filename': '<relative name>.arrow'}")
    return [os.path.join(folder, n) for n in good]


def saved_dataset_files(folder: str) -> list[str] | None:
    """The arrow files of a local folder written by ``datasets.Dataset.save_to_disk``, in the
    dataset's row order; None when ``folder`` is not such a folder (a ``DatasetDict`` folder, which
    has ``dataset_dict.json`` and one sub-folder per split, is not: pass a split's folder)."""
    local = folder[len("file://"):] if folder.startswith("file://") else folder
    if "://" in local or not os.path.isfile(os.path.join(local, "state.json")):
        return None
    with open(os.path.join(local, "state.json"), encoding="utf-8") as f:
        files = data_files_in_state(f.read(), folder)
    for path in files or ():
        local_path = path[len("file://"):] if path.startswith("file://") else path
        if not os.path.isfile(local_path):
            raise ShardError(path, f"is listed in {os.path.join(folder, 'state.json')} but missing")
    return files

"""Parquet shards, read by row group: the unit Parquet can decode without reading the rest.

Row i is found in the footer's row-group sizes as (row group, offset). The footer alone also gives
the rows of a shard that is not downloaded (``rows_from_metadata``: two ranged reads). Decoded row groups are kept
(see ``_decoded``), so the rows of a shuffled block decode their group once; a row is
``dict`` column -> Python value (pyarrow's ``to_pylist`` conversion). pyarrow is imported at open.

Words: docs/glossary.md (shard, row, row group, decode unit, id slices, ranged read, byte range).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, ShardError, refusal, shard_error
from shufflepoint._shards.corpora.shards.batch import Batch, Columns, Rows, gather
from shufflepoint._shards.readers._common import check_columns, check_row, check_rows, extra, missing_columns
from shufflepoint._shards.readers._decoded import GROUPS
from shufflepoint._shards.readers._flat import DatasetArena, FlatColumns
from shufflepoint._shards.readers._group import _PER_VALUE, DecodedGroup
from shufflepoint._shards.readers.base import Ranged

IdSlices = tuple[np.ndarray, np.ndarray, np.ndarray]  # (values, starts, stops): rows of one decoded group (id slices)


def _pyarrow_errors(pa: Any) -> tuple[type[BaseException], ...]:
    return (pa.ArrowException, OSError, ValueError)


_MAGIC = b"PAR1"
_TAIL = 64 << 10  # the end of a file pyarrow reads for its footer (and one GET holds most footers)
# Bytes past a column chunk's recorded end that pyarrow may read: files of old parquet-mr writers left
# the dictionary page header out of total_compressed_size, and pyarrow pads the chunk by up to 100
# bytes to make up for it (PARQUET-816). Held too, so a decode never reads past what is held.
_CHUNK_PAD = 100
_UNIT_ROWS, _UNIT_BYTES = 1024, 8 << 20  # small row groups are decoded together up to these


def _decode_units(rows: list[int], sizes: list[int]) -> list[tuple[list[int], int]]:
    """Consecutive row groups joined into decode units of at least ``_UNIT_ROWS`` rows unless that
    passes ``_UNIT_BYTES`` (uncompressed): a file written with groups of 100 rows cost one pyarrow
    call per 100 rows, 5x the decode itself. Each unit: (its row groups, its rows)."""
    units: list[tuple[list[int], int]] = []
    held, size = 0, 0
    for group, (count, nbytes) in enumerate(zip(rows, sizes, strict=True)):
        if units and held < _UNIT_ROWS and size + nbytes <= _UNIT_BYTES:
            units[-1][0].append(group)
            units[-1] = (units[-1][0], units[-1][1] + count)
            held, size = held + count, size + nbytes
        else:
            units.append(([group], count))
            held, size = count, nbytes
    return units


def _chunk_ranges(meta: Any, groups: list[int], columns: list[str] | None) -> list[tuple[int, int]]:
    """The byte ranges of the column chunks of ``groups`` that a decode of ``columns`` reads from the
    file, besides the footer."""
    ranges = []
    for g in groups:
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if columns is not None and chunk.path_in_schema.split(".")[0] not in columns:
                continue
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            if start == len(_MAGIC):  # the file's first chunk: its leading magic too (in the same GET), so
                start = 0  # a file read through is complete (``PartialShard.complete``: nothing left to ask)
            ranges.append((int(start), int(start + chunk.total_compressed_size) + _CHUNK_PAD))
    return ranges


def _over(parquet: Any, pa: Any, view: memoryview, meta: Any = None) -> Any:
    """A ``ParquetFile`` over ``view``, a partial copy's map (``PartialShard.holding``): pyarrow reads
    the held bytes in C, never through a Python file object. ``meta``: the footer parsed already
    (nothing is read at open), else parsed from the map (its bytes held first: ``_held_footer``). No
    pre-buffering: its coalesced reads span the bytes between column chunks, which a partial copy may
    not hold (zeros: unused, but read); from a map a read is a slice anyway."""
    return parquet.ParquetFile(pa.BufferReader(pa.py_buffer(view)), metadata=meta, pre_buffer=False)


def _held_footer(parquet: Any, pa: Any, ranged: Ranged, shard: str) -> tuple[Any, Any]:
    """``_over`` the map of a remote file read by range, its footer fetched (the last ``_TAIL`` bytes in
    one GET, then the rest of a longer footer) and parsed from the map."""
    size = ranged.source.size()
    view = ranged.source.holding([(max(0, size - _TAIL), size)])
    tail = bytes(view[max(0, size - 8):])
    length = int.from_bytes(tail[:4], "little") if size >= 12 and tail[4:] == _MAGIC else -1
    if not 0 < length <= size - 12:
        raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file",
                          why=f"no footer at the end of its {size} bytes (truncated, or not Parquet)")
    view = ranged.source.holding([(size - 8 - length, size)])
    return _over(parquet, pa, view), view.obj


class PartlyDecoded(DecodedGroup):
    """A decode unit of several row groups, one or more of which do not decode: the others' rows are served,
    a row of a bad group raises its group's ``ShardError`` (so ``skip_bad_samples`` skips those rows alone).
    ``bad``: (first row in the unit, rows, error) per bad group. Never laid out flat (``OpenParquet._group``)."""

    def __init__(self, table: Any, pa: Any, bad: list[tuple[int, int, ShardError]]) -> None:
        super().__init__(table, pa)
        self._bad = bad

    def _check(self, offsets: Sequence[int] | np.ndarray) -> None:
        picked = np.asarray(offsets, dtype=np.int64)
        for first, rows, error in self._bad:
            if ((picked >= first) & (picked < first + rows)).any():
                raise error

    def row(self, offset: int) -> dict[str, Any]:
        self._check([offset])
        return super().row(offset)

    def take(self, offsets: np.ndarray) -> Columns:
        self._check(offsets)
        return super().take(offsets)

    def id_offsets(self, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        raise self._bad[0][2]  # a token column's rows are read as one array: every bad group named by the first


class OpenParquet:
    """One Parquet file, its footer read; row groups decoded on demand (small ones together, see
    ``_decode_units``; "group" below means such a unit) and kept in the process's
    ``_decoded.GROUPS`` (one byte budget for every open file)."""

    def __init__(self, path: str, shard: str, columns: list[str] | None, ranged: Ranged | None = None) -> None:
        self._pa = extra("pyarrow", "parquet")
        parquet = extra("pyarrow.parquet", "parquet")
        self._shard, self._columns, self._errors = shard, columns, _pyarrow_errors(self._pa)
        self._ranged, self._parquet, self._map = ranged, parquet, None
        try:
            if ranged is None:
                self._file = parquet.ParquetFile(path, memory_map=True)
            else:
                self._file, self._map = _held_footer(parquet, self._pa, ranged, shard)
            meta = self._meta = self._file.metadata
            groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
            self._units = _decode_units([g.num_rows for g in groups], [g.total_byte_size for g in groups])
            names = list(self._file.schema_arrow.names)
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except self._errors as e:
            raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file", why=str(e)) from e
        wrong = missing_columns(shard, columns, names)
        if wrong:
            raise ShardError(shard, wrong)
        self._ends = np.cumsum(np.asarray([rows for _, rows in self._units], np.int64))
        self._flat = FlatColumns(self._ends)
        self._rows = len(self)
        self._ends_list, self._starts_list = self._ends.tolist(), self._flat.starts.tolist()
        self._owner = GROUPS.owner()
        self._path, self._kept, self._file_key = path, None, "" if ranged is None else ranged.identity
        self._kept_units: dict[tuple[int, str], tuple[np.ndarray, np.ndarray] | None] = {}

    def keep_ids_in(self, kept: Any) -> None:
        """Keep decoded token ids in ``kept`` (a ``kept_ids.KeptIds``) and map them from there when an
        earlier open kept them: ``take_id_spans_ascending`` then decodes nothing."""
        if kept.enabled:
            self._kept = kept  # the file's key is read when ids are first asked for: plain rows pay nothing

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, row: int) -> Any:
        row = check_row(row, len(self))
        group = int(np.searchsorted(self._ends, row, side="right"))
        offset = row - (int(self._ends[group - 1]) if group else 0)
        return self._group(group).row(offset)

    def join_arena(self, dataset_arena: DatasetArena, shard: int) -> None:
        """Lay this file's decoded columns out in ``dataset_arena`` as file ``shard`` of a dataset, so the
        dataset reads a batch across its files with one index per column (``DatasetArena.take``)."""
        self._flat.join(dataset_arena, shard)

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
            wanted = set(numbers[~held].tolist())
            self._fetch_ahead(wanted)
            for number in wanted:
                self._group(number)
            held = flat.held[numbers]
        columns = flat.columns(rows, numbers) if held.all() else None
        if columns is None or flat.names is None or any(column is None for column in columns):
            offsets = rows - flat.starts[numbers]
            return gather(numbers, lambda number, where: self._group(number).take(offsets[where]))
        return Columns(flat.names, columns, rows.size)

    def take_ids(self, rows: Sequence[int], column: str) -> list[np.ndarray] | None:
        """Column ``column`` at ``rows`` as 1-D integer arrays (read-only views of the decoded group),
        or None where it is not a list of integers without nulls (``DecodedGroup.ids``). A batch
        holds a few documents per shard: looked up in Python, where numpy's per-call cost dominates."""
        ends, starts = self._ends_list, self._starts_list
        lists: dict[int, tuple[np.ndarray, list[int]] | None] = {}
        found: list[np.ndarray] = []
        for row in rows:
            if not 0 <= row < self._rows:  # ints from ShardsHooks.read_ids, already checked there
                raise IndexError(refusal("row", int(row), f"a row in [0, {self._rows}) (out of range for a shard of "
                                         f"{self._rows} rows)", "pass a row of the shard"))
            number = bisect.bisect_right(ends, row)
            if number not in lists:
                group = self._group(number)
                lists[number] = group.ids(group.names.index(column)) if column in group.names else None
            ids = lists[number]
            if ids is None:
                return None
            values, offsets = ids
            offset = row - starts[number]
            found.append(values[offsets[offset]:offsets[offset + 1]])
        return found

    def take_ids_ascending(self, rows: np.ndarray, column: str) -> list[np.ndarray] | None:
        """``take_ids`` for rows in ascending order (many at once: the documents of ``Packed``'s ``TokenWindow``):
        the rows grouped by decoded group with one ``searchsorted``, then one slice each."""
        if rows.size and not (0 <= int(rows[0]) and int(rows[-1]) < self._rows):
            raise IndexError(refusal("rows", Plain(f"{int(rows[0])}..{int(rows[-1])}"), f"rows in [0, {self._rows}) "
                                     f"(out of range for a shard of {self._rows} rows)", "pass rows of the shard"))
        numbers = np.searchsorted(self._ends, rows, side="right")
        found: list[np.ndarray] = []
        for where in np.split(np.arange(rows.size), np.flatnonzero(np.diff(numbers)) + 1):
            if not where.size:
                continue
            number = int(numbers[where[0]])
            group = self._group(number)
            ids = group.ids(group.names.index(column)) if column in group.names else None
            if ids is None:
                return None
            values, offsets = ids
            found += [values[offsets[row]:offsets[row + 1]]
                      for row in (rows[where] - int(self._flat.starts[number])).tolist()]
        return found

    def take_id_spans_ascending(self, rows: np.ndarray, column: str) -> list[IdSlices] | None:
        """``take_ids_ascending`` without an array per row: for each decoded group the rows fall in (in
        order), its values and each row's (start, stop) in them, or None where the column holds no
        integer lists. What ``Packed`` reads at once (a ``TokenWindow``) is a few groups and thousands of rows."""
        if rows.size and not (0 <= int(rows[0]) and int(rows[-1]) < self._rows):
            raise IndexError(f"rows {int(rows[0])}..{int(rows[-1])} out of range for a shard of {self._rows} rows")
        numbers = np.searchsorted(self._ends, rows, side="right")
        found: list[IdSlices] = []
        bounds = [0, *(np.flatnonzero(numbers[1:] != numbers[:-1]) + 1).tolist(), rows.size]
        for first, last in zip(bounds[:-1], bounds[1:], strict=True):
            if first == last:
                continue
            number = int(numbers[first])
            ids = self._unit_ids(number, column)
            if ids is None:
                return None
            values, offsets = ids
            within = rows[first:last] - self._flat.starts[number]
            found.append((values, offsets[within], offsets[within + 1]))
        return found

    def _unit_ids(self, unit: int, column: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Unit ``unit``'s column as (values, int64 offsets): mapped from the kept ids where an earlier
        open kept them, else decoded (and kept, where a store was given)."""
        held = (unit, column)
        if held in self._kept_units:
            return self._kept_units[held]
        kept = self._kept
        if kept is not None and not self._file_key:
            self._file_key = kept.file_key(self._path)
        key = f"{self._file_key}-{unit}-{column}"
        ids = kept.load(key) if kept is not None else None
        if ids is None:
            group = self._group(unit)
            ids = group.id_offsets(group.names.index(column)) if column in group.names else None
            if ids is not None and kept is not None:
                kept.save(key, *ids)
        self._kept_units[held] = ids
        return ids

    def _group(self, group: int) -> DecodedGroup:
        found: DecodedGroup = GROUPS.get(self._owner, group, lambda: self._decoded(group))
        if isinstance(found, PartlyDecoded):  # never laid out flat: its bad rows must raise when read
            return found
        if not self._flat.held[group] and (self._owner, group) in GROUPS and self._flat.add(group, found):
            found.release = functools.partial(self._flat.forget, group)  # kept: laid out flat until let go
        return found

    def _decoded(self, unit: int) -> DecodedGroup:
        """Unit ``unit`` decoded; where it joins several row groups and one of them does not decode, the
        others are still served (``PartlyDecoded``): a corrupt row group costs its own rows, not its unit's."""
        groups = self._units[unit][0]
        try:
            return DecodedGroup(self._decode(groups), self._pa)
        except ShardError as error:
            if len(groups) == 1 or not isinstance(error.__cause__, self._errors):
                raise
        tables, bad = [], []
        for group in groups:
            try:
                tables.append(self._decode([group]))
            except ShardError as error:
                if not isinstance(error.__cause__, self._errors):
                    raise
                rows = self._meta.row_group(group).num_rows
                bad.append((sum(t.num_rows for t in tables), rows, error))
                tables.append(None)
        schema = next(t for t in tables if t is not None).schema  # one group at least failed alone, not all
        filled = [t if t is not None else self._pa.Table.from_arrays(
            [self._pa.nulls(rows, f.type) for f in schema], schema=schema)
            for t, rows in zip(tables, [self._meta.row_group(g).num_rows for g in groups], strict=True)]
        return PartlyDecoded(self._pa.concat_tables(filled), self._pa, bad)

    def _decode(self, groups: list[int]) -> Any:
        """Decode row groups ``groups``: one, or a run of small ones read at once (``_decode_units``)."""
        try:
            if self._ranged is not None:  # a remote file read by range: this unit's column chunks in few GETs
                self._hold(groups)
            # One thread: pyarrow's pool hands a group's columns to its threads, and on a busy machine
            # each waits for a core (measured at load 14: 0.8x the rows per CPU-second, 0.7x the rate).
            return self._file.read_row_groups(groups, columns=self._columns, use_threads=False)
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except self._errors as e:
            named = f"row group {groups[0]}" if len(groups) == 1 else f"row groups {groups[0]}-{groups[-1]}"
            raise shard_error(self._shard, f"{named} that cannot be decoded", "Parquet row groups", why=str(e)) from e

    def _hold(self, groups: list[int]) -> None:
        """Hold the column chunks of ``groups`` in the partial copy, and read from the map of the copy
        that holds them: the same map as the last decode but after an eviction (a new copy)."""
        assert self._ranged is not None
        view = self._ranged.source.holding(self._chunk_ranges(groups))
        if view.obj is not self._map:
            self._file, self._map = _over(self._parquet, self._pa, view, self._meta), view.obj

    def _fetch_ahead(self, units: set[int]) -> None:
        """A remote file read by range: the column chunks of every unit a batch needs in one call
        (one version check, neighbours joined into one GET), not one round trip per unit as each is
        decoded. (Not for ``take_id_spans_ascending``: its units may map kept ids and need no bytes.)"""
        if self._ranged is not None and len(units) > 1:
            self._ranged.ensure([r for unit in sorted(units) for r in self._chunk_ranges(self._units[unit][0])])

    def _chunk_ranges(self, groups: list[int]) -> list[tuple[int, int]]:
        """The byte ranges of the column chunks ``groups`` read (those of ``columns``)."""
        return _chunk_ranges(self._meta, groups, self._columns)

    def locate(self, row: int) -> dict[str, Any]:
        """Where row ``row`` lies: its row group in the file's footer, and its row inside that group."""
        row = check_row(row, len(self))
        meta = self._file.metadata
        sizes = np.cumsum([meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        group = int(np.searchsorted(sizes, row, side="right"))
        return {"row_group": group, "row_in_group": row - (int(sizes[group - 1]) if group else 0)}

    def close(self) -> None:
        self._kept_units.clear()
        GROUPS.drop(self._owner)
        self._file.close()
        if self._ranged is not None:
            self._ranged.source.close()


class ParquetReader:
    """Parquet files; ``columns=`` reads only those columns (all by default)."""

    name: str = "parquet"
    suffixes: tuple[str, ...] = (".parquet", ".pq")
    takes: tuple[str, ...] = ("columns",)

    def __init__(self, columns: Sequence[str] | None = None) -> None:
        self.columns = check_columns(columns)

    def open(self, path: str, shard: str) -> OpenParquet:
        return OpenParquet(path, shard, self.columns)

    def ranged_for(self, shard: str) -> bool:
        return True

    def open_ranged(self, ranged: Ranged, shard: str) -> OpenParquet:
        """Open a remote shard read by range (``_shards/storage/ranged``): the footer, then each row group's
        column chunks as they are decoded, never the whole file."""
        return OpenParquet("", shard, self.columns, ranged)

    def ranged_plan(self, ranged: Ranged, shard: str) -> Callable[[np.ndarray], list[tuple[int, int]]]:
        """What read-ahead fetches for rows of a remote shard read by range (``_shards/storage/ranged``): its
        footer now (one ranged read), then ``plan(rows)``: the column chunks of the decode units
        (``_decode_units``) holding ``rows``, the very ranges ``OpenParquet`` will ensure."""
        parquet = extra("pyarrow.parquet", "parquet")
        pa = extra("pyarrow", "parquet")
        try:
            meta = _held_footer(parquet, pa, ranged, shard)[0].metadata
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except _pyarrow_errors(pa) as e:
            raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file", why=str(e)) from e
        groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
        units = _decode_units([g.num_rows for g in groups], [g.total_byte_size for g in groups])
        ends = np.cumsum(np.asarray([rows for _, rows in units], np.int64))
        ranges = [_chunk_ranges(meta, members, self.columns) for members, _ in units]

        def plan(rows: np.ndarray) -> list[tuple[int, int]]:
            wanted = np.unique(np.searchsorted(ends, rows, side="right"))
            return [r for unit in wanted[wanted < len(units)].tolist() for r in ranges[unit]]
        return plan

    def options(self) -> dict[str, Any]:
        return {"columns": self.columns}

    def decoded_row_bytes(self, read: Callable[[int, int], bytes], size: int, shard: str) -> int | None:
        """About the bytes one row of this shard holds decoded (what ``_decoded.GROUPS`` counts): its
        columns' uncompressed bytes from the footer, plus a Python value's overhead per column; None
        for a shard without rows. From the footer alone (two ranged reads), so the same on every
        machine: the loader sizes its default ``shuffle_block`` by it (``ShardAccess.fitting_shuffle_block``)."""
        meta = self._footer(read, size, shard)
        rows = sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
        if not rows:
            return None
        names = [meta.schema.column(c).path.split(".")[0] for c in range(meta.num_columns)]
        wanted = [c for c, name in enumerate(names) if self.columns is None or name in self.columns]
        stored = sum(meta.row_group(g).column(c).total_uncompressed_size
                     for g in range(meta.num_row_groups) for c in wanted)
        return -(-int(stored) // int(rows)) + _PER_VALUE * len({names[c] for c in wanted})

    def _footer(self, read: Callable[[int, int], bytes], size: int, shard: str) -> Any:
        pa = extra("pyarrow", "parquet")
        parquet = extra("pyarrow.parquet", "parquet")
        tail = read(size - 8, size) if size >= 12 else b""
        length = int.from_bytes(tail[:4], "little") if tail[4:] == _MAGIC else -1
        if not 0 < length <= size - 12:
            raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file",
                              why=f"no footer at the end of its {size} bytes (truncated, or not Parquet)")
        try:
            return parquet.read_metadata(pa.BufferReader(_MAGIC + read(size - 8 - length, size - 8) + tail))
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except _pyarrow_errors(pa) as e:
            raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file", why=str(e)) from e

    def rows_from_metadata(self, read: Callable[[int, int], bytes], size: int, shard: str) -> int:
        """The rows the footer records, read as the last 8 bytes (footer length, magic), then the
        footer: a shard is indexed without downloading it. Checks the columns as ``open`` does."""
        pa = extra("pyarrow", "parquet")
        meta = self._footer(read, size, shard)
        try:
            names = list(meta.schema.to_arrow_schema().names)
            rows = sum(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
        except ShardError:  # the storage's own account (rewritten, vanished): never re-said
            raise
        except _pyarrow_errors(pa) as e:
            raise shard_error(shard, "a file that is not readable Parquet", "a Parquet file", why=str(e)) from e
        wrong = missing_columns(shard, self.columns, names)
        if wrong:
            raise ShardError(shard, wrong)
        return int(rows)

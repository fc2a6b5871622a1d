"""Decoded Parquet columns laid flat over rows, so a batch is one numpy index per column.

A batch of the blocks order picks a few rows from each of dozens of row groups; finding each row's
group and picking its values row by row in Python cost ~4 µs a row, three times pyarrow's whole
decode. Here each decoded group's values are copied (as references) into one array per column:
numbers without nulls into a numeric array, every immutable value (numbers, str, bytes) into an
object array. A batch is then ``array[rows]`` per column, whatever groups the rows come from.

The arrays span more than one file (issue 35): a dataset's files lay their columns side by side in
one ``Arena`` (each file a slice from its ``base``, given when its first group is laid out), so a
batch of the blocks order, ~12 files of a block, is one index per column over the arena
(``DatasetArena.take``) instead of one per file, a join and a reorder (~12 µs a file). A file read alone
(``OpenParquet`` without a dataset) gets an arena of its own. What a group holds stays under the
process's byte budget (``_decoded.GROUPS``): a group the budget drops is cleared here too
(``forget``) and decoded again when next asked for; the arena itself holds only references (8 bytes
a cell) and a numeric copy of number columns, as the per-file arrays did.

Words: docs/glossary.md (dataset arena, row group, block).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shufflepoint._shards.corpora.shards.batch import Columns
from shufflepoint._shards.readers._group import DecodedGroup

_MAX_CELLS = 1 << 23  # rows x columns: above it (64 MiB of pointers), a file is read group by group
_ARENA_CELLS = 1 << 22  # rows x columns of a shared arena, at most (unless one file needs more)
_ABSENT, _NUMBERS, _OBJECTS, _NOT_FLAT = 0, 1, 2, 3  # per (column, group): how its values are held


class Arena:
    """One object array (and, for numbers, one numeric array) per column over ``capacity`` rows,
    shared by the files laid out in it, plus which rows are held and how many held groups of each
    column are held as numbers, as objects or not flat (a batch can be served from here only where
    every held group of a column is alike)."""

    def __init__(self, names: tuple[str, ...], capacity: int) -> None:
        self.names, self.capacity, self.top, self.live = names, int(capacity), 0, 0
        self.held = np.zeros(self.capacity, dtype=bool)
        self._objects: list[np.ndarray | None] = [None] * len(names)
        self._numbers: list[np.ndarray | None] = [None] * len(names)
        self._apart = [False] * len(names)  # a file's numbers of another dtype, held in its own array
        self.held_as = [[0, 0, 0, 0] for _ in names]

    def objects(self, k: int, base: int, rows: int) -> np.ndarray:
        found = self._objects[k]
        if found is None:
            found = self._objects[k] = np.empty(self.capacity, dtype=object)
        return found[base:base + rows]

    def numbers(self, k: int, base: int, rows: int, kind: str) -> np.ndarray:
        found = self._numbers[k]
        if found is None:
            found = self._numbers[k] = np.zeros(self.capacity, dtype=kind)
        elif found.dtype != np.dtype(kind):
            self._apart[k] = True
            return np.zeros(rows, dtype=kind)
        return found[base:base + rows]

    def columns(self, places: np.ndarray) -> list[Any] | None:
        """Each column at arena rows ``places`` (all held), as ``FlatColumns.columns`` gives them; None
        where a column is not alike in every held group (the caller reads file by file)."""
        found: list[Any] = []
        for k, held_as in enumerate(self.held_as):
            if held_as[_NOT_FLAT] or self._apart[k]:
                return None
            numbers, objects = self._numbers[k], self._objects[k]
            if numbers is not None and not held_as[_OBJECTS]:
                found.append(numbers[places])
            elif objects is not None:
                found.append(objects[places].tolist())
            else:
                return None
        return found


class DatasetArena:
    """The arena the files of one dataset lay their columns in (one per process: ``Shards`` makes it
    anew in a worker). ``base[shard]`` is where a file's rows start in the current arena, -1 where
    it has none; a file that does not fit starts the next arena (the files still laid out in the old
    one are read file by file until their groups go)."""

    def __init__(self, shards: int, capacity: int) -> None:
        self.base = np.full(shards, -1, dtype=np.int64)
        self.capacity = max(1, int(capacity))
        self.arena: Arena | None = None

    def place(self, shard: int, names: tuple[str, ...], rows: int) -> tuple[Arena, int]:
        """An arena and a base for ``rows`` rows of file ``shard`` with columns ``names``."""
        arena = self.arena
        if arena is not None and arena.names != names:
            alone = Arena(names, rows)  # another schema: an arena of its own, read file by file
            alone.live = 1
            return alone, 0
        if arena is None or arena.top + rows > arena.capacity:
            if arena is None or arena.live or arena.capacity < rows:
                capacity = max(rows, min(self.capacity, _ARENA_CELLS // max(1, len(names))))
                self.arena = arena = Arena(names, capacity)
            else:  # nothing laid out in it any more: start it over
                arena.top, arena._apart = 0, [False] * len(names)
            self.base[:] = -1
        base = arena.top
        arena.top += rows
        arena.live += 1
        self.base[shard] = base
        return arena, base

    def leave(self, shard: int, arena: Arena) -> None:
        """File ``shard`` no longer holds a group in ``arena``."""
        arena.live -= 1
        if arena is self.arena:
            self.base[shard] = -1

    def take(self, shards: np.ndarray, rows: np.ndarray) -> Columns | None:
        """Rows ``rows`` of files ``shards`` from the current arena, one index per column; None where a
        file is not laid out in it, a row's group is not held, or a column is not alike."""
        arena = self.arena
        if arena is None:
            return None
        base = self.base[shards]
        if int(base.min()) < 0:
            return None
        places = base + rows
        if not arena.held[places].all():
            return None
        columns = arena.columns(places)
        return None if columns is None else Columns(arena.names, columns, int(places.size))


class FlatColumns:
    """``columns(rows)`` for rows whose groups are all held flat; ``None`` where any is not. The
    arrays are this file's slice of an ``Arena`` (its ``DatasetArena``'s, where the file belongs to a dataset)."""

    def __init__(self, ends: np.ndarray) -> None:
        self._ends = ends
        self.starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        self.held = np.zeros(ends.size, dtype=bool)  # group -> its values are here
        self.complete = False  # every group held
        self._held_count = 0
        self.names: tuple[str, ...] | None = None
        self._status: list[np.ndarray] = []
        self._numbers: list[np.ndarray | None] = []
        self._objects: list[np.ndarray | None] = []
        self._held_as: list[list[int]] = []  # per column: held groups per status (index = status)
        self._dataset_arena: DatasetArena | None = None
        self._shard = -1
        self._arena: Arena | None = None
        self._base = 0

    def join(self, dataset_arena: DatasetArena, shard: int) -> None:
        """Lay this file's columns out in ``dataset_arena``, as file ``shard`` (before any group is held)."""
        if not self._held_count:
            self._dataset_arena, self._shard = dataset_arena, shard

    def add(self, number: int, group: DecodedGroup) -> bool:
        """Lay group ``number``'s values into the flat columns; False where the file is too large to
        lay out flat (``_MAX_CELLS``) or the group's columns differ from the file's."""
        rows = int(self._ends[-1])
        if rows * len(group.names) > _MAX_CELLS:
            return False
        if self.names is None or not self._held_count:  # the arrays exist while a group is held
            self.names = group.names
            columns, groups = len(group.names), self._ends.size
            self._status = [np.zeros(groups, dtype=np.uint8) for _ in range(columns)]
            self._numbers, self._objects = [None] * columns, [None] * columns
            self._held_as = [[0, 0, 0, 0] for _ in range(columns)]
            dataset_arena = self._dataset_arena
            self._arena, self._base = (dataset_arena.place(self._shard, group.names, rows) if dataset_arena is not None
                                       else (Arena(group.names, rows), 0))
        if group.names != self.names:
            return False  # never within one Parquet file; such a group is read group by group
        arena = self._arena
        assert arena is not None
        start, stop = int(self.starts[number]), int(self._ends[number])
        for k, values in enumerate(group.values):
            if values is None:
                self._status[k][number] = _NOT_FLAT
                continue
            objects = self._objects[k]
            if objects is None:
                objects = self._objects[k] = arena.objects(k, self._base, rows)
            objects[start:stop] = values
            kind = group.kinds[k]
            if kind is not None:
                numbers = self._numbers[k]
                if numbers is None:
                    numbers = self._numbers[k] = arena.numbers(k, self._base, rows, kind)
                numbers[start:stop] = values
            self._status[k][number] = _OBJECTS if kind is None else _NUMBERS
        for k in range(len(self.names)):
            status = int(self._status[k][number])
            self._held_as[k][status] += 1
            arena.held_as[k][status] += 1
        arena.held[self._base + start:self._base + stop] = True
        self.held[number] = True
        self._held_count += 1
        self.complete = self._held_count == self._ends.size
        return True

    def forget(self, number: int) -> None:
        """Drop group ``number``'s values (the budget let its decoded group go)."""
        if not self.held[number]:
            return
        arena = self._arena
        assert arena is not None
        self.held[number] = False
        self._held_count -= 1
        self.complete = False
        start, stop = int(self.starts[number]), int(self._ends[number])
        arena.held[self._base + start:self._base + stop] = False
        for k, objects in enumerate(self._objects):
            status = int(self._status[k][number])
            self._held_as[k][status] -= 1
            arena.held_as[k][status] -= 1
            self._status[k][number] = _ABSENT
            if objects is not None:
                objects[start:stop] = None
        if not self._held_count:  # nothing held: give the slice back
            self._numbers, self._objects = [None] * len(self._objects), [None] * len(self._objects)
            if self._dataset_arena is not None:
                self._dataset_arena.leave(self._shard, arena)
            self._arena = None

    def columns(self, rows: np.ndarray, numbers: np.ndarray | None) -> list[Any]:
        """Each column at ``rows`` (their groups ``numbers``, all held; None: looked up if needed): a
        numpy array where every group holds numbers without nulls, a list of Python values where all
        are immutable, else None for that column (the caller converts it from Arrow)."""
        found: list[Any] = []
        for status, numbers_k, objects, held_as in zip(self._status, self._numbers, self._objects, self._held_as,
                                                       strict=True):
            if not held_as[_NOT_FLAT]:  # the usual case: every held group of this column alike
                if numbers_k is not None and not held_as[_OBJECTS]:
                    found.append(numbers_k[rows])
                    continue
                if objects is not None:
                    found.append(objects[rows].tolist())
                    continue
            if numbers is None:
                numbers = np.searchsorted(self._ends, rows, side="right")
            seen = status[numbers]
            if numbers_k is not None and (seen == _NUMBERS).all():
                found.append(numbers_k[rows])
            elif objects is not None and ((seen == _NUMBERS) | (seen == _OBJECTS)).all():
                found.append(objects[rows].tolist())
            else:
                found.append(None)
        return found

"""One Parquet file's decoded columns laid flat over its rows, so a batch is one numpy index per column.

A batch of the blocks order picks a few rows from each of dozens of row groups; finding each row's
group and picking its values row by row in Python cost ~4 µs a row, three times pyarrow's whole
decode. Here each decoded group's values are copied (as references) into one array per column,
spanning the file: numbers without nulls into a numeric array, every immutable value (numbers,
str, bytes) into an object array. A batch is then ``array[rows]`` per column, whatever groups the
rows come from. What a group holds stays under the process's byte budget (``_decoded.GROUPS``): a
group the budget drops is cleared here too (``forget``) and decoded again when next asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shufflepoint._shards.readers._group import DecodedGroup

_MAX_CELLS = 1 << 23  # rows x columns: above it (64 MiB of pointers), a file is read group by group
_ABSENT, _NUMBERS, _OBJECTS, _NOT_FLAT = 0, 1, 2, 3  # per (column, group): how its values are held


class FlatColumns:
    """``columns(rows)`` for rows whose groups are all held flat; ``None`` where any is not."""

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

    def add(self, number: int, group: DecodedGroup) -> bool:
        """Lay group ``number``'s values into the file-wide columns; False where the file is too
        large to lay out flat (``_MAX_CELLS``) or the group's columns differ from the file's."""
        if int(self._ends[-1]) * len(group.names) > _MAX_CELLS:
            return False
        if self.names is None or not self._held_count:  # the arrays exist while a group is held
            self.names = group.names
            columns, groups = len(group.names), self._ends.size
            self._status = [np.zeros(groups, dtype=np.uint8) for _ in range(columns)]
            self._numbers, self._objects = [None] * columns, [None] * columns
            self._held_as = [[0, 0, 0, 0] for _ in range(columns)]
        if group.names != self.names:
            return False  # never within one Parquet file; such a group is read group by group
        start, stop, rows = int(self.starts[number]), int(self._ends[number]), int(self._ends[-1])
        for k, values in enumerate(group.values):
            if values is None:
                self._status[k][number] = _NOT_FLAT
                continue
            objects = self._objects[k]
            if objects is None:
                objects = self._objects[k] = np.empty(rows, dtype=object)
            objects[start:stop] = values
            kind = group.kinds[k]
            if kind is not None:
                numbers = self._numbers[k]
                if numbers is None:
                    numbers = self._numbers[k] = np.zeros(rows, dtype=kind)
                numbers[start:stop] = values
            self._status[k][number] = _OBJECTS if kind is None else _NUMBERS
        for k in range(len(self.names)):
            self._held_as[k][int(self._status[k][number])] += 1
        self.held[number] = True
        self._held_count += 1
        self.complete = self._held_count == self._ends.size
        return True

    def forget(self, number: int) -> None:
        """Drop group ``number``'s values (the budget let its decoded group go)."""
        if not self.held[number]:
            return
        self.held[number] = False
        self._held_count -= 1
        self.complete = False
        if not self._held_count:  # nothing held: give the arrays back
            self._numbers, self._objects = [None] * len(self._objects), [None] * len(self._objects)
            return
        start, stop = int(self.starts[number]), int(self._ends[number])
        for k, objects in enumerate(self._objects):
            self._held_as[k][int(self._status[k][number])] -= 1
            self._status[k][number] = _ABSENT
            if objects is not None:
                objects[start:stop] = None

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

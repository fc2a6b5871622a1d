"""Live membership: a step's global batch dealt among the replica groups that take part in it, and the map
from committed steps to the positions they read.

A run under a fault-tolerance manager (torchft) keeps training while replica groups fail, heal and rejoin.
Each step has its own *participants* (P replica groups of ``group_world`` ranks each); a step that does not
commit is read again by whoever takes part next. The order stays one stream: the loader's position reads it
in *lots* of ``lot`` samples (a base layout of one rank, ``Layout(n, 1, lot)``, so the run's own history
places every lot), and each committed step takes ``lots(P)`` of them::

    dynamic   (global batch = P x group_world x batch_size): lot = group_world x batch_size, P lots a step
    fixed     (global batch = G whatever P):                  lot = G, 1 lot a step, G / (P x group_world) a rank

Worked example (``tests/core/test_membership.py`` pins it): 3 groups x 1 rank, batch 2 (dynamic), stream
positions 0, 1, 2, ...; group 1 fails at step 1 and is back at step 3::

    step 0   P=3  positions 0-5    group 0: 0, 3   group 1: 1, 4   group 2: 2, 5
    step 1   P=2  positions 6-9    group 0: 6, 8   group 2: 7, 9   (group 1 gone: the quorum renumbers)
    step 1   P=2  not committed: step 1 again, the same positions 6-9, to whoever takes part next
    step 2   P=3  positions 10-15  (group 1 healing reads nothing; it is not a participant)

Within a step the global rank ``q = participant x group_world + group_rank`` reads ``positions[q::P x
group_world]`` (``DistributedSampler``'s stride inside the step), so the union of the ranks' shares is the
step's global batch, each position once.

*Stretches* (a corpus, under ``spans``, dynamic): a step that reads the next lots of the stream and deals them
by stride would have every group read a part of every block. Instead the epoch's lots are read as K = replica
groups stretches side by side (``stretch_lot``: read lot j is stretch j mod K's (j // K)-th), and a full step (P
whole lots, P <= K) gives each participant one whole lot, participant p the one of stretch p where the step holds
it (``dealt_lots``), split inside the group by group rank. With all K groups taking part, group p reads only its
own stretch, as a fixed world's rank does; while one is missing the others read the stretches the steps hold,
and once it is back each group is in its own stretch again (``make bench-live-locality``). Any other step (an
epoch's last, a fixed global batch, P > K) is dealt by stride. The state keeps K (``stretches``; 0 for a state of
version 1: lots in order), so a restart with other replica groups reads the run's stretches on; a restart with
another lot (group size, batch size) is taken at an epoch's start only: the lots read of an epoch are no prefix.

 to lots: an entry ``[step, lot_step, lots, participants, group_world]`` says that
from ``step`` on each committed step reads ``lots`` lots from ``lot_step + (step' - step) x lots``, dealt to
``participants`` groups of ``group_world`` ranks, until the next entry. An entry is added only where that stops
holding (a new P; an epoch's last step, which reads what is left; another group size after a restart). Every
entry is kept, so ``which`` places every committed step of the run.

The history stays small because the state stores it as columns of differences, not as entries (``encode``)::

    "changes": "<base64 of zlib(5 columns, entry minus the entry before it, each as narrow an int as fits)>"
    columns:   step, lot_step - where the previous entry's line arrives by step, lots, participants, group_world

A membership change (a group lost, or back) is a step delta and a participants delta of 1; the other columns are
mostly 0 and zlib folds them to almost nothing: about 3 bytes a change (tests/core/test_membership.py measures
1k, 10k and 100k changes). A restart needs only the current place; the columns are there so that ``which`` and
``shufflepoint which`` answer the run's oldest step as well as its last. States of version 1 (a JSON list of
``[step, lot_step, lots, participants]``, at most 1,024, the group size the state's own) still load.

Words: docs/glossary.md (participant, lot, membership change, commit, step, history).
"""

from __future__ import annotations

import base64
import bisect
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shufflepoint._errors import DAMAGED, Plain, Refused, refusal

_MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Sizing:
    """How big a step is: ``batch_size`` per rank (dynamic) or a fixed ``global_batch``, over ``groups`` replica
    groups of ``group_world`` ranks, at least ``min_groups`` of them taking part."""

    groups: int
    group_world: int
    batch_size: int | None = None
    global_batch: int | None = None
    min_groups: int = 1

    def __post_init__(self) -> None:
        for name in ("groups", "group_world", "min_groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(refusal(name, value, "an int >= 1", f"pass {name}=1 or more"))
        if self.min_groups > self.groups:
            raise ValueError(refusal("min_groups", self.min_groups, f"at most replica_groups={self.groups}",
                                     f"pass min_groups <= {self.groups}"))
        if (self.batch_size is None) == (self.global_batch is None):
            raise ValueError(refusal("batch_size", Plain(f"batch_size={self.batch_size}, global_batch="
                                                         f"{self.global_batch}"),
                                     "exactly one of batch_size (per rank) and global_batch (fixed)",
                                     "pass batch_size=B for a global batch of participants x B, or global_batch=G"))
        size = self.batch_size if self.batch_size is not None else self.global_batch
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            name = "batch_size" if self.batch_size is not None else "global_batch"
            raise ValueError(refusal(name, size, "an int >= 1", f"pass {name}=1 or more"))
        if self.global_batch is not None:
            for participants in range(self.min_groups, self.groups + 1):
                ranks = participants * self.group_world
                if self.global_batch % ranks:
                    raise ValueError(refusal(
                        "global_batch", self.global_batch,
                        f"a multiple of every participants x group_world_size from {self.min_groups} to "
                        f"{self.groups} groups",
                        f"pass a global_batch divisible by {_lcm_of(self.min_groups, self.groups, self.group_world)},"
                        f" or min_groups={participants + 1} if fewer groups never train",
                        why=f"{participants} groups x {self.group_world} ranks cannot split {self.global_batch} "
                        "samples evenly"))

    @property
    def lot(self) -> int:
        """Samples of one lot: the base layout's batch size."""
        return self.global_batch if self.global_batch is not None else self.group_world * int(self.batch_size or 0)

    def lots(self, participants: int) -> int:
        """Lots a step with ``participants`` groups reads."""
        return 1 if self.global_batch is not None else participants

    def check_quorum(self, participants: int, participant: int | None) -> None:
        """ValueError naming ``replica_groups`` where the quorum does not fit this world (nothing changed)."""
        if not 1 <= participants <= self.groups or participant is not None and not 0 <= participant < participants:
            raise ValueError(refusal(
                "replica_groups", self.groups,
                f"a quorum of 1 to {self.groups} participants, this group's rank below their number",
                "build the loader with replica_groups= the most replica groups the job runs (torchft's "
                "num_replica_groups)",
                why=f"the Manager reports {participants} participants, this group's participating rank "
                f"{participant}"))


def _lcm_of(low: int, high: int, group_world: int) -> int:
    value = 1
    for participants in range(low, high + 1):
        value = int(np.lcm(value, participants * group_world))
    return value


def deal_step(positions: np.ndarray, participants: int, participant: int, group_world: int,
              group_rank: int) -> np.ndarray:
    """This rank's share of a step's global batch ``positions``: global rank ``participant x group_world +
    group_rank`` reads every ``participants x group_world``-th position from its own."""
    world = participants * group_world
    return positions[participant * group_world + group_rank::world]


@dataclass(frozen=True)
class Entry:
    step: int
    lot_step: int
    lots: int
    participants: int
    group_world: int = 1

    def to_state(self) -> list[int]:
        return [self.step, self.lot_step, self.lots, self.participants, self.group_world]


_FIELDS = ("step", "lot_step", "lots", "participants", "group_world")
_WIDTHS = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
MAX_STORED = 2**27  # bytes of decoded columns a state may claim: 3 million entries, ~30 years of hourly changes


class _Columns:
    """The entries, one list per field, grown in place by whichever ``Changes`` holds all of them (the others
    read their own prefix), and the encoding of the longest prefix asked for (``Changes.to_state``)."""

    def __init__(self, rows: Sequence[Sequence[int]] = ()) -> None:
        self.fields: tuple[list[int], ...] = tuple([int(row[i]) for row in rows] for i in range(len(_FIELDS)))
        self.encoded: tuple[int, str] | None = None


class Changes:
    """The committed steps' lots, as entries (module docstring). Immutable: ``committed`` returns a new one (it
    shares the columns of this one and appends to them, so a change costs O(1), not a copy of the history)."""

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self._columns = _Columns([entry.to_state() for entry in entries])
        self._count = len(entries)

    @classmethod
    def _of(cls, columns: _Columns, count: int) -> Changes:
        changes = cls.__new__(cls)
        changes._columns, changes._count = columns, count
        return changes

    def __len__(self) -> int:
        return self._count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Changes) and self._count == other._count and all(
            mine[:self._count] == theirs[:other._count]
            for mine, theirs in zip(self._columns.fields, other._columns.fields, strict=True))

    def __hash__(self) -> int:
        return hash((self._count, tuple(self._columns.fields[0][:self._count])))

    def entry(self, at: int) -> Entry:
        if not 0 <= at < self._count:
            raise IndexError(at)
        return Entry(*(column[at] for column in self._columns.fields))

    @property
    def entries(self) -> tuple[Entry, ...]:
        """Every entry (O(entries): for tests and tools; the loader asks ``predicted``)."""
        return tuple(self.entry(at) for at in range(self._count))

    @property
    def last(self) -> Entry | None:
        return self.entry(self._count - 1) if self._count else None

    @property
    def first_step(self) -> int | None:
        """The first step these changes place (None: no step committed)."""
        return self._columns.fields[0][0] if self._count else None

    def _at(self, step: int) -> int:
        return bisect.bisect_right(self._columns.fields[0], step, 0, self._count) - 1

    def predicted(self, step: int) -> Entry | None:
        """The entry that covers ``step`` (None before the first)."""
        at = self._at(step)
        return self.entry(at) if at >= 0 else None

    def lot_step(self, step: int) -> tuple[int, int, int, int]:
        """(first lot, lots, participants, group_world) of committed ``step``, as the entries say (the lots of an
        epoch's last step: what the next entry leaves it); ValueError naming ``step`` before the first."""
        at = self._at(step)
        if at < 0:
            expected = "no step committed yet" if not self._count else f"a step from {self.first_step} on"
            raise ValueError(refusal("step", step, expected, "ask a step this run has committed"))
        entry = self.entry(at)
        first = entry.lot_step + (step - entry.step) * entry.lots
        lots = entry.lots
        if at + 1 < self._count and self._columns.fields[0][at + 1] == step + 1:
            lots = min(lots, self._columns.fields[1][at + 1] - first)
        return first, lots, entry.participants, entry.group_world

    def committed(self, step: int, lot_step: int, lots: int, participants: int, group_world: int = 1) -> Changes:
        """These changes once ``step`` committed, read from lot ``lot_step`` with ``lots`` lots per step dealt
        to ``participants`` groups of ``group_world`` ranks (an entry only where the last one does not already
        say so)."""
        entry = self.predicted(step)
        if entry is not None and entry.lots == lots and entry.participants == participants \
                and entry.group_world == group_world and entry.lot_step + (step - entry.step) * entry.lots == lot_step:
            return self
        row = (step, lot_step, lots, participants, group_world)
        keep = self._at(step - 1) + 1  # the entries before ``step``
        if keep == self._count == len(self._columns.fields[0]):  # this one holds the columns' end: grow them
            columns = self._columns
        else:
            columns = _Columns([[c[at] for c in self._columns.fields] for at in range(keep)])
        for column, value in zip(columns.fields, row, strict=True):
            column.append(value)
        return Changes._of(columns, keep + 1)

    def to_state(self) -> str:
        """The columns of differences, zlib'd and base64'd (module docstring); cached for the same entries."""
        columns = self._columns
        if columns.encoded is None or columns.encoded[0] != self._count:
            columns.encoded = (self._count, encode([c[:self._count] for c in columns.fields]))
        return columns.encoded[1]

    @classmethod
    def from_state(cls, stored: object, group_world: int = 1) -> Changes:
        """Validate a stored history: the columns (``to_state``), or version 1's list of ``[step, lot_step, lots,
        participants]`` read with ``group_world`` (the state's own group size); ``Refused`` naming ``changes``."""
        if isinstance(stored, str):
            table = decode(stored)
        elif isinstance(stored, list):
            table = _listed(stored, group_world)
        else:
            raise Refused("changes", Plain(type(stored).__name__), "the history's columns (a base64 string)", DAMAGED)
        bad: np.ndarray = np.asarray((table < 0).any(axis=1) | (table[:, 2:] < 1).any(axis=1))
        bad[1:] |= (np.diff(table[:, 0]) <= 0) | (np.diff(table[:, 1]) < 0)
        if bad.any():
            number = int(np.argmax(bad))
            raise Refused(f"changes[{number}]", table[number].tolist(), "[step, lot_step, lots, participants, "
                          "group_world]: ints >= 0, lots, participants and group_world >= 1, step and lot after the "
                          "previous entry's", DAMAGED)
        columns = _Columns()
        columns.fields = tuple(column.tolist() for column in table.T)
        return cls._of(columns, len(table))


def _listed(entries: list[Any], group_world: int) -> np.ndarray:
    """Version 1's entries (4 ints each) as rows of 5, with the state's group size."""
    for number, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 4 and all(_is_int(v) for v in entry)):
            raise Refused(f"changes[{number}]", entry, "[step, lot_step, lots, participants]: ints >= 0", DAMAGED)
    return np.asarray([[*entry, group_world] for entry in entries], dtype=np.int64).reshape(-1, 5)


def encode(fields: Sequence[Sequence[int]]) -> str:
    """Columns of ints as the state stores them: per column, each value minus the one before it (``lot_step``:
    minus where the previous entry's line arrives at this entry's step), in the narrowest of int8..int64 that
    holds them, one byte of width ahead; the whole zlib'd and base64'd. Empty columns encode as ``""``."""
    if not fields or not len(fields[0]):
        return ""
    values = np.asarray(fields, dtype=np.int64)
    deltas = np.diff(values, axis=1, prepend=0)
    deltas[1, 1:] = values[1, 1:] - (values[1, :-1] + deltas[0, 1:] * values[2, :-1])
    parts = [len(fields[0]).to_bytes(8, "little")]
    for column in deltas:
        width = next(w for w, kind in _WIDTHS.items()
                     if column.min() >= np.iinfo(kind).min and column.max() <= np.iinfo(kind).max)
        parts += [bytes([width]), column.astype(_WIDTHS[width]).tobytes()]
    return base64.b64encode(zlib.compress(b"".join(parts), 9)).decode("ascii")


def decode(text: str) -> np.ndarray:
    """``encode``'s rows (entries x 5 int64), or ``Refused`` naming ``changes``."""
    if not text:
        return np.zeros((0, 5), np.int64)
    try:
        packed = zlib.decompressobj()
        raw = packed.decompress(base64.b64decode(text.encode("ascii"), validate=True), MAX_STORED)
        if packed.unconsumed_tail or not packed.eof:
            raise ValueError(f"more than {MAX_STORED} bytes, or cut short")
        count, at, columns = int.from_bytes(raw[:8], "little"), 8, []
        for _ in _FIELDS:
            width = raw[at]
            if width not in _WIDTHS or at + 1 + width * count > len(raw):
                raise ValueError(f"a column of width {width} cut short")
            columns.append(np.frombuffer(raw, _WIDTHS[width], count, at + 1).astype(np.int64))
            at += 1 + width * count
        if at != len(raw):
            raise ValueError(f"{len(raw) - at} bytes after the columns")
    except (ValueError, IndexError, UnicodeEncodeError, zlib.error) as error:  # binascii.Error is a ValueError
        raise Refused("changes", Plain("columns that do not decode"), "the history as LiveLoader.state_dict() "
                      "wrote it", DAMAGED, why=str(error)) from None
    steps = np.cumsum(columns[0])
    lots = np.cumsum(columns[2])
    lot_steps = np.empty(count, np.int64)
    if count:  # lot_step: the previous entry's line plus the stored difference
        line = columns[1].copy()
        line[1:] += np.diff(steps) * lots[:-1]
        lot_steps = np.cumsum(line)
    return np.stack([steps, lot_steps, lots, np.cumsum(columns[3]), np.cumsum(columns[4])], axis=1)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


def stretch_lot(lot: int, lots: int, stretches: int) -> int:
    """The lot of a cut of ``lots`` lots that is read ``lot``-th when ``stretches`` (K) stretches are read side by
    side: the first K x q lots (q = lots // K) are K stretches of q lots, and read lot j is stretch j mod K's
    (j // K)-th; the other lots (fewer than K, the cut's last among them) are read in order. K <= 1: in order.
    A bijection of [0, lots), so every lot of the cut is read once whatever the steps take."""
    per = lots // stretches if stretches > 1 else 0
    if lot >= per * stretches or per == 0:
        return lot
    return lot % stretches * per + lot // stretches


def dealt_lots(first: int, participants: int, stretches: int) -> list[int]:
    """The read lots ``first .. first + participants - 1`` of a full step, one per participant (P <= K): the
    participant p takes the one of stretch p (read lot j is of stretch j mod K) where the step holds it, the others
    the rest in order. With every group taking part, participant p reads stretch p at every step."""
    window = range(first, first + participants)
    own = {j % stretches: j for j in window if j % stretches < participants}
    rest = iter(j for j in window if j % stretches >= participants)
    return [own[p] if p in own else next(rest) for p in range(participants)]


def step_share(positions_of: Callable[[int, int], np.ndarray], lot: int, total: int, done: int, lots: int,
               participants: int, participant: int, group_world: int, group_rank: int,
               stretches: int = 0) -> np.ndarray:
    """The positions global rank ``participant x group_world + group_rank`` reads of the step that reads ``lots``
    lots of ``lot`` positions from ``done`` of a cut of ``total`` (``positions_of(start, stop)``: the cut's). Lots
    are read in the stretches' order (``stretch_lot``); a full step (P lots, each whole, P <= K) gives each
    participant a whole lot (``dealt_lots``), split by group rank; any other step is dealt by stride
    (``deal_step``). Module docstring."""
    stop = min(done + lots * lot, total)
    if stretches <= 1:
        positions = positions_of(done, stop) if stop > done else np.zeros(0, np.int64)
        return deal_step(positions, participants, participant, group_world, group_rank)
    count, cut_lots = -(-total // lot), []
    for read in range(done // lot, -(-stop // lot)):
        cut_lots.append(stretch_lot(read, count, stretches))

    def whole(c: int) -> np.ndarray:
        return positions_of(c * lot, min(c * lot + lot, total))

    if lots == participants <= stretches and stop - done == lots * lot:
        mine = dealt_lots(done // lot, participants, stretches)[participant] - done // lot
        return whole(cut_lots[mine])[group_rank::group_world]
    parts = [whole(c) for c in cut_lots]
    positions = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return deal_step(positions, participants, participant, group_world, group_rank)

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

*Changes* map committed steps to lots: an entry ``[step, lot_step, lots, participants]`` says that from
``step`` on each committed step reads ``lots`` lots from ``lot_step + (step' - step) x lots``, dealt to
``participants``, until the next entry. An entry is added only where that stops holding (a new P; an epoch's
last step, which reads what is left), at most ``MAX_CHANGES`` (the latest; earlier steps are no longer placed).

Words: docs/glossary.md (participant, lot, membership change, commit, step, history).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shufflepoint._errors import DAMAGED, Plain, Refused, refusal

MAX_CHANGES = 1024  # the latest entries kept: ~25 KB of JSON at the most
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

    def to_state(self) -> list[int]:
        return [self.step, self.lot_step, self.lots, self.participants]


class Changes:
    """The committed steps' lots, as entries (module docstring). Immutable: ``committed`` returns a new one."""

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self.entries = tuple(entries)
        self._steps = [entry.step for entry in self.entries]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Changes) and self.entries == other.entries

    def __hash__(self) -> int:
        return hash(self.entries)

    @property
    def first_step(self) -> int | None:
        """The first step these changes place (None: no step committed)."""
        return self.entries[0].step if self.entries else None

    def predicted(self, step: int) -> Entry | None:
        """The entry that covers ``step`` (None before the first)."""
        at = bisect.bisect_right(self._steps, step) - 1
        return self.entries[at] if at >= 0 else None

    def lot_step(self, step: int) -> tuple[int, int, int]:
        """(first lot, lots, participants) of committed ``step``, as the entries say (the lots of an epoch's
        last step: what the next entry leaves it); ValueError naming ``step`` before the first."""
        entry = self.predicted(step)
        if entry is None:
            expected = "no step committed yet" if not self.entries else f"a step from {self.entries[0].step} on"
            raise ValueError(refusal("step", step, expected, "ask a committed step this run's state still places",
                                     why=f"the state keeps the latest {MAX_CHANGES} membership changes"))
        first = entry.lot_step + (step - entry.step) * entry.lots
        at = bisect.bisect_right(self._steps, step)
        lots = entry.lots
        if at < len(self.entries) and self.entries[at].step == step + 1:
            lots = min(lots, self.entries[at].lot_step - first)
        return first, lots, entry.participants

    def committed(self, step: int, lot_step: int, lots: int, participants: int) -> Changes:
        """These changes once ``step`` committed, read from lot ``lot_step`` with ``lots`` lots per step dealt
        to ``participants`` (an entry only where the last one does not already say so)."""
        entry = self.predicted(step)
        if entry is not None and entry.lots == lots and entry.participants == participants \
                and entry.lot_step + (step - entry.step) * entry.lots == lot_step:
            return self
        entries = [e for e in self.entries if e.step < step]
        entries.append(Entry(step, lot_step, lots, participants))
        return Changes(entries[-MAX_CHANGES:])

    def to_state(self) -> list[list[int]]:
        return [entry.to_state() for entry in self.entries]

    @classmethod
    def from_state(cls, entries: object) -> Changes:
        """Validate a stored list; ``Refused`` naming ``changes[i]``."""
        if not isinstance(entries, list) or len(entries) > MAX_CHANGES:
            count = f"{len(entries)} entries" if isinstance(entries, list) else type(entries).__name__
            raise Refused("changes", Plain(count), f"a list of at most {MAX_CHANGES} entries", DAMAGED)
        parsed: list[Entry] = []
        for number, entry in enumerate(entries):
            if not (isinstance(entry, list) and len(entry) == 4 and all(_is_int(v) for v in entry)
                    and entry[2] >= 1 and entry[3] >= 1):
                raise Refused(f"changes[{number}]", entry,
                              "[step, lot_step, lots, participants]: ints, lots and participants >= 1", DAMAGED)
            found = Entry(*entry)
            if parsed and (found.step <= parsed[-1].step or found.lot_step < parsed[-1].lot_step):
                raise Refused(f"changes[{number}]", entry, "a step and lot after the previous entry's", DAMAGED)
            parsed.append(found)
        return cls(parsed)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT

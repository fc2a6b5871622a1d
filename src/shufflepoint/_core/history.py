"""The run's layout history: which world size, batch size and tail policy read each step of the run.

The order of an epoch is a pure function of (seed, epoch), and a deal cuts the rest of an epoch for
one layout. What is left to know, to place *any* step of a run and not only the current one, is
where the layout changed. This module keeps that as a few integers per change, and turns a step
into (epoch, cut, batch) by arithmetic.

Vocabulary (all integers):

- A *step* counts the batches each rank received since the run began (epoch 0, batch 0), across
  epochs, resizes and batch-size changes. Every rank receives the same number of batches, so one
  counter places the whole world.
- A *layout* is (world size W, batch size B, drop_last D): how the rest of an epoch is cut
  (``plan.Layout``).
- A *place* is where the next batch comes from: an epoch and a position in it, ``cursor`` and,
  under the ``spans`` deal, the epoch's ``segments``. A place with nothing left under its layout is
  the same place as the start of the next epoch (``normal``).
- A *leg* is a stretch of the run read with one layout from one starting place: from its first
  step it reads to the end of its epoch, then every later epoch whole, until the next leg begins.
- An *entry* is a leg as the state stores it, a short JSON list:
  ``[step, W, B, D]`` when the leg begins where the previous leg had arrived by that step (a
  resize, a new batch size), or ``[step, W, B, D, epoch, start]`` when it begins somewhere of its
  own (the first leg; a ``set_epoch`` or ``seek`` that jumps; a state written without a history).
  ``start`` is the ``cursor`` under ``strided`` and the epoch's ``segments`` under ``spans``; ``D``
  is 0 or 1.

Worked example (``tests/core/test_history.py`` pins these values): n = 10, ``strided``; the run
starts on 2 ranks x batch 2 and goes on after 2 steps on 1 rank x batch 3::

    entries    : [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0]]
    steps 0-1  : epoch 0, leg 0: global steps of 4 positions, 0-3 then 4-7 (cursor 8)
    step 2     : leg 1 begins where leg 0 arrived, epoch 0 cursor 8: rank 0 reads positions 8, 9
    steps 3-6  : epoch 1, leg 1: positions 0-2, 3-5, 6-8, 9 (4 batches per epoch)
    which(4)   : epoch 1, rank 0 -> positions 3, 4, 5 of epoch 1's order
    steps 7-10 : epoch 2; step s >= 3 is in epoch 1 + (s - 3) // 4

Placing a step is a binary search over the legs, then O(1): the batches left in the leg's first
epoch, then whole epochs of the leg's layout. The history holds at most ``MAX_ENTRIES`` legs (the
latest); when an older one is dropped, the first kept leg is stored with its start, and the steps
before it are no longer placed (``first_step``).

Words: docs/glossary.md (history, leg, entry, step, place, layout).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shufflepoint._core.cut import Cut, Deal
from shufflepoint._core.deals import named
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import BucketSegments, Pairs, Segments
from shufflepoint._errors import DAMAGED, Plain, Refused, refusal

# The cut a layout reads from a place, the excluded samples skipped (``LoaderPosition.cut``): a history places the
# steps after an exclusion with it (the legs from the exclusion's step on, each stored with its start).
Cuts = Callable[["Place", Layout, int], Cut]
MAX_ENTRIES = 33  # the leg the history starts with and the 32 latest changes
MAX_EPOCH = 2**62  # the orders' bound (``_order.MAX_EPOCH``): the last epoch a run can read
_MAX_INT = 2**63 - 1
_MAX_WORLD = 2**31


@dataclass(frozen=True)
class Place:
    """Where the next batch comes from: an epoch and a position in it (see the module docstring)."""

    epoch: int
    cursor: int
    segments: Pairs = Segments()  # the deal's own kind (a plain sequence of pairs is read as ``Segments``)

    def __post_init__(self) -> None:
        if not isinstance(self.segments, (Segments, BucketSegments)):
            object.__setattr__(self, "segments", Segments(self.segments))

    def cut(self, layout: Layout, deal: str | Deal, parts: int | None = None) -> Cut:
        """``layout``'s cut from here under ``deal``; ``parts``: the canonical parts' world size (``History.parts``)."""
        deal = named(deal) if isinstance(deal, str) else deal
        return deal.cut(layout, self.cursor, self.segments, parts, epoch=self.epoch)

    def normal(self, layout: Layout, deal: str | Deal) -> Place:
        """This place, or the start of the next epoch when ``layout`` has nothing left to read here (an
        epoch's start stays itself: under a layout that reads no batch of an epoch, epochs pass
        without a step)."""
        if self.cursor == 0 and not self.segments or self.cut(layout, deal).samples_per_rank() > 0:
            return self
        return Place(self.epoch + 1, 0)


def place_after(epoch: int, start: Cut,
                received: int) -> Place:
    """The place once every rank has received ``received`` more samples from ``start``."""
    cursor, segments = start.after(received)
    return Place(epoch, cursor, segments)


@dataclass(frozen=True)
class Leg:
    """One leg of the run: from ``step`` on, ``layout`` reads from ``start``."""

    step: int
    layout: Layout
    start: Place
    explicit: bool  # stored with its start (else it begins where the previous leg arrived)

    def entry(self, deal: Deal) -> list[Any]:
        layout = self.layout
        head: list[Any] = [self.step, layout.world_size, layout.batch_size, int(layout.drop_last)]
        if not self.explicit:
            return head
        return [*head, self.start.epoch, deal.start_entry(self.start.cursor, self.start.segments)]


def _batches(deal_cut: Cut, batch_size: int) -> int:
    return -(-deal_cut.samples_per_rank() // batch_size)


@dataclass(frozen=True)
class Placed:
    """A step placed: its epoch, the cut it is read from, and its batch within that cut."""

    epoch: int
    cut: Cut
    batch: int
    layout: Layout

    def rank_positions(self, rank: int) -> Any:
        """Epoch positions of ``rank``'s batch (tail padding included, as the rank received it)."""
        size = self.layout.batch_size
        first = self.batch * size
        return self.cut.rank_positions(rank, first, min(first + size, self.cut.samples_per_rank()))

    def world_positions(self) -> np.ndarray:
        """``rank_positions`` of every rank, one row a rank: in one pass over the world where the cut can (16,384
        ranks in milliseconds), rank by rank where it cannot (a fixed global batch's, the bucket deal's)."""
        size = self.layout.batch_size
        first = self.batch * size
        return self.cut.world_positions(first, min(first + size, self.cut.samples_per_rank()))


class History:
    """The legs of a run, validated, for one dataset length and deal (a ``Deal``, or the name of one). Immutable:
    ``record`` returns a new history."""

    def __init__(self, n: int, deal: str | Deal, legs: Sequence[Leg]) -> None:
        self.n, self.legs = n, tuple(legs)
        self.deal = named(deal) if isinstance(deal, str) else deal
        self._steps = [leg.step for leg in self.legs]

    @classmethod
    def begin(cls, n: int, deal: str | Deal, layout: Layout, start: Place, step: int = 0) -> History:
        """A history of one leg: the run (or what is known of it) starts at ``step`` from ``start``."""
        first = cls(n, deal, [])
        return cls(n, first.deal, [Leg(step, layout, first.normal(start, layout), True)])

    def normal(self, place: Place, layout: Layout) -> Place:
        """``place.normal`` under this history's deal."""
        return place.normal(layout, self.deal)

    @property
    def first_step(self) -> int:
        """The first step this history places; earlier ones were dropped or never recorded."""
        return self.legs[0].step

    def entries(self) -> list[list[Any]]:
        """The JSON form the state stores."""
        return [leg.entry(self.deal) for leg in self.legs]

    def _leg(self, step: int) -> Leg:
        if step < self.first_step:
            # LIMIT(history-legs): docs/state-format.md#the-runs-history-and-which
            raise ValueError(refusal("step", step, f"a step from {self.first_step} on, where this history starts",
                                     "ask a later step, or a checkpoint written earlier in the run"))
        return self.legs[bisect.bisect_right(self._steps, step) - 1]

    def parts(self, leg: Leg | None = None) -> int:
        """The world size whose stretches are the canonical parts of ``leg``'s epochs (default: the last
        leg): the first leg of the latest run of legs at its global batch (world size x batch size),
        so a fixed global batch reads the same global batches at any world size (``_core/global_batch.py``)."""
        leg = self.legs[-1] if leg is None else leg
        index = self.legs.index(leg)
        size = leg.layout.step_size
        while index > 0 and self.legs[index - 1].layout.step_size == size:
            index -= 1
        return self.legs[index].layout.world_size

    def epoch_parts(self, epoch: int) -> int | None:
        """The world size whose stretches ``epoch``'s order was laid along when it began (the cut of the latest
        leg that began at or before its start; a first leg that began inside it: its own cut's), or None where
        this history does not reach back to it or its deal reads no stretches."""
        for leg in reversed(self.legs):
            at_start = leg.start.cursor == 0 and not leg.start.segments
            if leg.start.epoch < epoch or (leg.start.epoch == epoch and at_start):
                return self._cut(leg, Place(epoch, 0), None).stretches
        first = self.legs[0]
        return self._cut(first, first.start, None).stretches if first.start.epoch == epoch else None

    def _cut(self, leg: Leg, start: Place, cuts: Cuts | None) -> Cut:
        """``leg``'s cut from ``start``: the deal's own, or the caller's (excluded samples skipped)."""
        if cuts is None:
            return start.cut(leg.layout, self.deal, self.parts(leg))
        return cuts(start, leg.layout, self.parts(leg))

    def begins_its_epoch(self, leg: Leg, cuts: Cuts | None = None) -> bool:
        """Whether ``leg`` starts at its epoch's first batch (with samples excluded under ``spans``, the
        start's cursor counts the excluded positions before it)."""
        start = leg.start
        if start.cursor == 0 and not start.segments:
            return True
        return cuts is not None and place_after(start.epoch, self._cut(leg, Place(start.epoch, 0), cuts), 0) == start

    def position(self, step: int, cuts: Cuts | None = None) -> Place | None:
        """Where the run stands once every rank has received ``step`` batches (normal form), or None
        where no batch reaches it (epochs with no batch under the layout). ``cuts``: for steps read
        with samples excluded."""
        leg = self._leg(step)
        layout, offset = leg.layout, step - leg.step
        first = self._cut(leg, leg.start, cuts)
        left = _batches(first, layout.batch_size)
        if offset < left:
            return place_after(leg.start.epoch, first, offset * layout.batch_size)
        if offset == left and left == 0:
            return self.normal(leg.start, layout)
        if offset == left:  # the next epoch's start (under spans with samples excluded, its cursor counts them)
            following = Place(leg.start.epoch + 1, 0)
            return following if cuts is None else place_after(following.epoch, self._cut(leg, following, cuts), 0)
        per_epoch = _batches(self._cut(leg, Place(leg.start.epoch + 1, 0), cuts), layout.batch_size)
        if per_epoch == 0:
            return None
        epochs, batch = divmod(offset - left, per_epoch)
        epoch = leg.start.epoch + 1 + epochs
        return place_after(epoch, self._cut(leg, Place(epoch, 0), cuts), batch * layout.batch_size)

    def place(self, step: int, cuts: Cuts | None = None) -> Placed:
        """The epoch, cut and batch of ``step``; ValueError naming ``step`` where none exists. ``cuts``: for
        steps read with samples excluded (every rank's batch in an epoch is the same size whatever it skips)."""
        leg = self._leg(step)
        layout, offset = leg.layout, step - leg.step
        first = self._cut(leg, leg.start, cuts)
        left = _batches(first, layout.batch_size)
        if offset < left:
            return Placed(leg.start.epoch, first, offset, layout)
        fresh = self._cut(leg, Place(leg.start.epoch + 1, 0), cuts)
        per_epoch = _batches(fresh, layout.batch_size)
        if per_epoch == 0:
            raise ValueError(refusal("step", step, f"a step before {leg.step + left}", "ask an earlier step",
                                     why=f"{layout.world_size} ranks x batch {layout.batch_size} read no batch of an "
                                     f"epoch of {self.n} samples (drop_last={layout.drop_last})"))
        epochs, batch = divmod(offset - left, per_epoch)
        epoch = leg.start.epoch + 1 + epochs
        if epoch > MAX_EPOCH:
            # LIMIT(which-past-last-epoch): docs/state-format.md#the-runs-history-and-which
            raise ValueError(refusal("step", Plain(f"{step}, in epoch {epoch}"), f"a step in epochs 0..{MAX_EPOCH}",
                                     "ask an earlier step", why="the orders end at epoch 2**62"))
        return Placed(epoch, fresh if cuts is None else self._cut(leg, Place(epoch, 0), cuts), batch, layout)

    def record(self, step: int, layout: Layout, start: Place, cuts: Cuts | None = None, *,
               split: bool = False) -> History:
        """The history once the run reads with ``layout`` from ``start`` at ``step``.

        Nothing is added when that is where the last leg would have arrived with the same layout
        (unless ``split``: an exclusion begins a leg of its own); a leg that began at ``step`` read
        nothing and is replaced; past ``MAX_ENTRIES`` the oldest legs are dropped and the first kept
        one is stored with its start. With ``cuts`` (samples excluded) the leg is stored with its
        start: a stored history resolves the others with the deal's own cuts.
        """
        legs = list(self.legs)
        if step < legs[-1].step:
            raise ValueError(refusal("step", step, f"a step from {legs[-1].step} on (the last leg's first step)",
                                     "record steps in the order they were read"))
        target = self.normal(start, layout)
        if not split and legs[-1].layout == layout and self._arrives(step, target, cuts):
            return self
        while legs and legs[-1].step == step:
            legs.pop()
        arrived = History(self.n, self.deal, legs).position(step) if legs and cuts is None else None
        legs.append(Leg(step, layout, target, explicit=arrived != target or cuts is not None))
        if len(legs) > MAX_ENTRIES:
            legs = legs[-MAX_ENTRIES:]
            legs[0] = replace(legs[0], explicit=True)
        return History(self.n, self.deal, legs)

    def _arrives(self, step: int, target: Place, cuts: Cuts | None) -> bool:
        try:
            return self.position(step, cuts) == target
        except ValueError:  # a step the cuts cannot place (``spans``: an exclusion's epoch left): a leg of its own
            return False

    @classmethod
    def from_entries(cls, n: int, deal: str | Deal, entries: object) -> History:
        """Validate and resolve a stored history; ValueError naming the entry (``history[i]``)."""
        deal = named(deal) if isinstance(deal, str) else deal
        if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
            count = f"{len(entries)} entries" if isinstance(entries, list) else type(entries).__name__
            raise Refused("history", Plain(count), f"a list of 1 to {MAX_ENTRIES} entries", DAMAGED)
        legs: list[Leg] = []
        for number, entry in enumerate(entries):
            step, layout, start = _parse(n, deal, number, entry)
            if legs and step <= legs[-1].step:
                raise Refused(f"history[{number}]", Plain(f"step {step}"), f"a step after {legs[-1].step}", DAMAGED)
            if start is None:
                arrived = cls(n, deal, legs).position(step) if legs else None
                if arrived is None:
                    where = "the first entry must carry its start" if not legs else "no batch reaches that step"
                    raise Refused(f"history[{number}]", entry, f"[step, W, B, D, epoch, start] ({where})", DAMAGED)
                if arrived.epoch > MAX_EPOCH:
                    raise Refused(f"history[{number}]", Plain(f"step {step}, in epoch {arrived.epoch}"),
                                  f"a step in epochs 0..{MAX_EPOCH}", DAMAGED)
                start = arrived
            else:
                start = cls(n, deal, legs).normal(start, layout)
            legs.append(Leg(step, layout, start, explicit=len(entry) == 6))
        return cls(n, deal, legs)


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _parse(n: int, deal: Deal, number: int, entry: object) -> tuple[int, Layout, Place | None]:
    """One entry's step, layout and (stored) start; ValueError naming it."""
    field = f"history[{number}]"
    shape = "[step, W, B, D] or [step, W, B, D, epoch, start]"
    if not isinstance(entry, list) or len(entry) not in (4, 6):
        raise Refused(field, entry, shape, DAMAGED)
    step, world_size, batch_size, drop_last = entry[:4]
    if not (_is_int(step, 0, _MAX_INT) and _is_int(world_size, 1, _MAX_WORLD)
            and _is_int(batch_size, 1, _MAX_WORLD) and _is_int(drop_last, 0, 1)):
        raise Refused(field, entry, f"{shape} with step >= 0, 1 <= W, B <= 2**31, D 0 or 1", DAMAGED)
    layout = Layout(n, world_size, batch_size, bool(drop_last))
    if len(entry) == 4:
        return step, layout, None
    epoch, start = entry[4:]
    if not _is_int(epoch, 0, MAX_EPOCH):
        raise Refused(f"{field} epoch", epoch, f"an int in [0, {MAX_EPOCH}]", DAMAGED)
    cursor, segments = deal.parse_start(n, field, start)
    return step, layout, Place(epoch, cursor, segments)

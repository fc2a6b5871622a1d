"""What a loader excludes, and how the excluded samples' positions reach the deal (``loader.exclude``).

The arithmetic is ``_core/exclusion.py`` (``strided``) and ``_core/spanskips.py`` (``spans``: an
exclusion re-deals what is left); here: which loaders can exclude (an order with an inverse), the
excluded positions of the current epoch built once per epoch, and the check that every rank excluded
the same indices (one ``all_reduce``, as a state load is checked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from shufflepoint._core.errors import StateError
from shufflepoint._core.exclusion import MAX_RANGES, Exclusion, FilteredStridedCut, Skips
from shufflepoint._core.history import place_after
from shufflepoint._core.plan import STRIDED, Layout, StridedCut
from shufflepoint._core.spans import SpanCut
from shufflepoint._core.spanskips import Cut, FilteredSpanCut, Handed
from shufflepoint._loading.agreement import Groups, checked_along, everyone_agrees, gather_from_all
from shufflepoint._loading.excluded_steps import handed_from, history_cuts, kept_steps, placeable
from shufflepoint._loading.orders import OrderCache
from shufflepoint._loading.sampler import Deal
from shufflepoint._loading.steps import Lookup, Pass
from shufflepoint._order import InvertibleOrder, check_int
from shufflepoint._shards.batch import Columnar

if TYPE_CHECKING:
    from shufflepoint._core.history import Cuts, History, Place
    from shufflepoint._core.state import Position


def check_can_exclude(deal: Deal, orders: OrderCache, dataset: Any) -> None:
    """ValueError naming what stands in the way: an order without an inverse."""
    if not isinstance(orders.get(0, StridedCut(Layout(orders.n, 1, 1, False), 0)), InvertibleOrder):
        own = dataset.dataset if isinstance(dataset, Columnar) else dataset  # the loader's wrapper: name the user's
        way = ("exclude documents by filtering the corpus the Packed reads, and start a new run"
               if orders.name == "packed" else "filter the dataset and start a new run")
        raise ValueError(
            f"exclude: the {orders.name!r} order of a {type(own).__name__} has no inverse (index -> position) "
            f"yet, which exclusion needs: {way} (docs/exclusion.md, 'Limits')."
        )


class Excluded:
    """A loader's excluded set and the current epoch's excluded positions (O(count) once per epoch)."""

    def __init__(self, n: int) -> None:
        self.exclusion = Exclusion.empty(n)
        self._skips: tuple[int, Skips] | None = None
        self._span_positions: tuple[tuple[int, int], Any] | None = None

    @classmethod
    def for_state(cls, exclusion: Exclusion | None, deal: Deal, orders: OrderCache, dataset: Any) -> Excluded:
        """What a loaded state excludes; StateError naming ``excluded`` when this loader cannot skip it."""
        found = cls(orders.n)
        if exclusion is not None:
            try:
                check_can_exclude(deal, orders, dataset)
            except ValueError as error:
                raise StateError(f"state field 'excluded': found {exclusion.count} excluded indices, which this "
                                 f"loader cannot skip. {error}") from None
            found.replace(exclusion, orders.n)
        return found

    def merged(self, indices: Any, deal: Deal, orders: OrderCache, dataset: Any, rank: int, world_size: int,
               verify_ranks: bool, groups: Groups | None) -> Exclusion:
        """This set plus ``indices``, every check passed (nothing is changed here)."""
        added = Exclusion.from_indices(indices, orders.n)
        check_can_exclude(deal, orders, dataset)
        merged = self.exclusion.union(added)
        if len(merged) > MAX_RANGES:
            raise ValueError(f"indices: the excluded set would be {len(merged)} ranges, expected at most {MAX_RANGES} "
                             "(the state's documented bound). Exclude fewer or contiguous indices; nothing was "
                             "excluded.")
        agree_on_exclusion(added, rank, world_size, verify_ranks, groups)
        return merged

    def replace(self, exclusion: Exclusion | None, n: int) -> None:
        self.exclusion = exclusion if exclusion is not None else Exclusion.empty(n)
        self._skips, self._span_positions = None, None

    def skips(self, orders: OrderCache, epoch: int) -> Skips:
        if self._skips is None or self._skips[0] != epoch:
            order = cast(InvertibleOrder, orders.get(epoch, StridedCut(Layout(orders.n, 1, 1, False), 0)))
            positions = order.positions_of(self.exclusion.indices())
            self._skips = (epoch, Skips(positions, orders.n))
        return self._skips[1]

    def start(self, deal: Deal, orders: OrderCache, layout: Layout, position: Position) -> Cut:
        """Where a loaded state's position reads on; StateError naming ``cursor`` when, under ``spans`` with
        samples excluded, it is not what ``segments`` and ``handed`` leave (checked here: it needs the order)."""
        try:
            found = self.cut(deal, orders, layout, position.epoch, position.cursor, position.segments,
                             handed=position.handed)
        except ValueError as error:  # segments that the space left by handed and excluded cannot hold
            raise StateError(f"state field 'segments': found {position.segments}, expected the epoch's world sizes "
                             f"since its latest exclusion ({error}). The state is damaged or was edited; use "
                             "another checkpoint.") from None
        if isinstance(found, FilteredSpanCut) and found.after(0)[0] != position.cursor:
            raise StateError(f"state field 'cursor': found {position.cursor}, expected {found.after(0)[0]} (what "
                             f"segments={position.segments}, handed and excluded leave of n={orders.n}). The state "
                             "is damaged or was edited; use another checkpoint.")
        return found

    def span_positions(self, orders: OrderCache, epoch: int, first_world_size: int) -> Exclusion:
        """The excluded indices' positions in ``epoch`` under ``spans``, as ranges (whose ``blocks`` order is laid
        along the epoch's first stretches), O(count) once per epoch."""
        key = (epoch, first_world_size)
        if self._span_positions is None or self._span_positions[0] != key:
            probe = SpanCut(orders.n, [], first_world_size, 1, False)
            positions = cast(InvertibleOrder, orders.get(epoch, probe)).positions_of(self.exclusion.indices())
            self._span_positions = (key, Exclusion.from_indices(positions, orders.n, name="positions"))
        return self._span_positions[1]

    def cut(self, deal: Deal, orders: OrderCache, layout: Layout, epoch: int, cursor: int,
            segments: list[list[int]], parts: int | None = None, handed: Handed | None = None) -> Cut:
        """The rest of ``epoch`` from (cursor, segments): the deal's own cut, skipping the excluded.

        Under ``spans``, ``handed`` is what the epoch handed out before its latest exclusion (the
        segments then count from there, ``_core/spanskips.py``); an exclusion re-deals what is left, so
        ``parts`` (a fixed global batch) applies only while nothing is excluded."""
        if deal.name == STRIDED:
            if not self.exclusion:
                return deal.cut(layout, cursor, segments, parts)
            return FilteredStridedCut(layout, cursor, self.skips(orders, epoch))
        if not self.exclusion and handed is None:
            return deal.cut(layout, cursor, segments, parts)
        first = handed.first_world_size if handed is not None else (segments[0][0] if segments else layout.world_size)
        positions = self.span_positions(orders, epoch, first) if self.exclusion else Exclusion.empty(orders.n)
        return FilteredSpanCut(layout.n, handed, positions, segments, layout.world_size, layout.batch_size,
                               layout.drop_last)

    def epoch_layout(self, layout: Layout) -> Layout:
        """A whole epoch's layout with the excluded samples taken out (for ``len(loader)``)."""
        return Layout(layout.n - self.exclusion.count, layout.world_size, layout.batch_size, layout.drop_last)


def agree_on_exclusion(added: Exclusion, rank: int, world_size: int, verify_ranks: bool,
                       groups: Groups | None) -> None:
    """Along the loader's ranks (its mesh's groups, or a matching default group), check that every rank passed
    the same indices (one ``all_reduce`` per group, as a state load checks); ValueError on every rank, naming
    the ranks' counts, when not."""
    along = checked_along(verify_ranks, rank, world_size, groups)
    if along is None or everyone_agrees({"excluded": added.to_state()}, None, along):
        return
    counts = gather_from_all((added.count, added.ranges()[:3]), along)
    shown = "; ".join(f"rank {r}: {count} indices, first ranges {first}" for r, (count, first) in enumerate(counts))
    raise ValueError(
        f"exclude: ranks passed different indices ({shown}), expected the same on every rank (the state is the "
        "same on every rank, and so is what it excludes). Compute the indices identically everywhere, or "
        "broadcast them from rank 0, then call loader.exclude on every rank. Nothing was excluded."
    )


class ExclusionMixin:
    """``exclude`` and ``excluded`` for ``shufflepoint.DataLoader`` (one concern, kept out of loader.py)."""

    if TYPE_CHECKING:  # the loader's own attributes, which these methods read and set
        _excluded: Excluded
        _deal: Deal
        _orders: OrderCache
        _layout: Layout
        _rank: int
        _verify_ranks: bool
        _groups: Groups | None
        _pass: Pass | None
        _history: History
        _epoch: int
        _start: Any
        _steps: int
        _excluded_at: tuple[int, ...]
        _which_excluded: Excluded
        _lookup: Lookup
        dataset: Any

        @property
        def epoch(self) -> int: ...

        @property
        def step(self) -> int: ...

        def _here(self) -> tuple[int, Place]: ...

    def _cut(self, epoch: int, cursor: int, segments: list[list[int]],
             layout: Layout | None = None, *, parts: int | None = None, handed: Handed | None = None) -> Cut:
        """The rest of ``epoch`` from (cursor, segments), the excluded samples skipped; ``parts``: the
        history's canonical parts at this global batch (``History.parts``); under ``spans``, what the
        epoch ``handed`` out before its latest exclusion (pass ``self._handed()`` to continue)."""
        return self._excluded.cut(self._deal, self._orders, layout or self._layout, epoch, cursor, segments, parts,
                                  handed)

    def _read_on(self, epoch: int, start: Cut, steps: int) -> None:
        """Read on from ``start`` at step ``steps`` (``set_batch_size``, ``exclude``): a live iterator
        takes the new pass over, dropping what its workers prefetched under the old one (``_count``)."""
        live = self._pass
        self._pass = Pass(epoch, start, steps, follows=live) if live is not None else None
        self._epoch, self._start, self._steps = epoch, start, steps

    def _handed(self) -> Handed | None:
        """What the current epoch handed out before its latest exclusion (``spans``; None otherwise)."""
        current = self._pass.cut if self._pass is not None else self._start
        return current.handed if isinstance(current, FilteredSpanCut) else None

    @property
    def excluded(self) -> Exclusion:
        """The dataset indices this run never serves again (``exclude``), as sorted ranges."""
        return self._excluded.exclusion

    def exclude(self, indices: Any) -> None:
        """Never serve these dataset indices again: from the next batch on, in this epoch and every later one.

        Every other sample is still served once per epoch. Call it with the same indices (ints, a
        range, a numpy or torch integer array) on every rank: checked like ``load_state_dict``. The
        state keeps them as sorted ranges: a resume on the same world continues exactly this run's
        stream, another world deals the rest of the epoch, each remaining sample once. Refused with
        nothing changed: bad indices, over 131,072 ranges, orders without an inverse (``Mixture``,
        ``Packed``). Under ``spans`` it re-deals what is left of the epoch (``_core/spanskips.py``).
        See docs/exclusion.md.
        """
        merged = self._excluded.merged(indices, self._deal, self._orders, self.dataset, self._rank,
                                       self._layout.world_size, self._verify_ranks, self._groups)
        if merged == self._excluded.exclusion:  # nothing new: the deal goes on as it is
            return
        steps, place = self._here()
        segments, handed = [list(pair) for pair in place.segments], self._handed()
        if self._deal.name != STRIDED:  # spans: a re-deal of what is left, minus the excluded (_core/spanskips.py)
            live = self._pass
            current, done = (live.cut, self._layout.batch_size * live.received) if live else (self._start, 0)
            if not isinstance(current, FilteredSpanCut):  # nothing excluded yet: what it read, as segments
                current, done = handed_from(current, done, self._layout), 0
            handed, segments = current.handed_after(done), []
        self._excluded.replace(merged, self._layout.n)
        start = self._cut(place.epoch, place.cursor, segments, parts=self._history.parts(), handed=handed)
        self._read_on(place.epoch, start, steps)
        self._excluded_at = kept_steps(self._excluded_at, steps)  # a leg of its own: which() places what follows
        self._history = self._history.record(steps, self._layout, place_after(place.epoch, start, 0),
                                             self._history_cuts(), split=True)

    def _history_cuts(self, excluded: Excluded | None = None, orders: OrderCache | None = None) -> Cuts | None:
        """The cuts that place this run's steps from its latest exclusion on (None: nothing excluded)."""
        if not self._excluded.exclusion:
            return None
        return history_cuts(self._history, self._deal, orders or self._orders, excluded or self._excluded,
                            self._excluded_at, (self.epoch, self._handed()))

    def _leaving_exclusion(self) -> bool:
        """Whether a jump leaves the epoch of the latest exclusion under ``spans`` (which re-dealt it from what
        it had handed out): the next epoch then begins a leg of its own, placed without that."""
        if self._deal.name == STRIDED or not self._excluded_at:
            return False
        at = self._excluded_at[-1]
        return any(leg.step == at and leg.start.epoch == self.epoch for leg in self._history.legs)

    def _which(self, step: int) -> dict[int, list[int]]:
        """``which``, placing the steps read with samples excluded (``_loading/excluded_steps.py``)."""
        return self._lookup.which(self._history, self._orders, step, self._cuts_of(step))

    def _cuts_of(self, step: int) -> Cuts | None:
        """The cuts that place ``step``: None before the first exclusion (or with none), the loader's own
        from the latest one on; ValueError naming the steps between two exclusions (``placeable``)."""
        if not self._excluded.exclusion or not placeable(check_int("step", step, 0, 2**63 - 1), self._excluded_at):
            return None
        if self._which_excluded.exclusion is not self._excluded.exclusion:  # its own skips: the live ones stay
            self._which_excluded = Excluded(self._orders.n)
            self._which_excluded.replace(self._excluded.exclusion, self._orders.n)
        return self._history_cuts(self._which_excluded, self._lookup.orders(self._orders))

    def batches_this_epoch(self) -> int | None:
        """Batches each rank has received of the current epoch, whatever changed inside it (an ``exclude``,
        a ``set_batch_size``): the steps since the one the epoch began at, found in the run's history (binary
        search; O(log steps) placements). None where the history cannot tell (its first legs were dropped, or
        steps between two exclusions lie in this epoch)."""
        legs, step, epoch = self._history.legs, self.step, self.epoch
        back = max((i for i in range(1, len(legs)) if legs[i].start.epoch < legs[i - 1].start.epoch), default=0)
        first = legs[back].step  # epochs only grow from there (set_epoch goes back)
        try:
            if legs[back].start.epoch == epoch:  # the history begins in this epoch: known if it begins at its start
                return step - first if self._history.begins_its_epoch(legs[back], self._cuts_of(first)) else None
            low, high = first, step  # epoch_of(low) < epoch; the first step of the epoch is in (low, step]
            while high - low > 1:
                middle = (low + high) // 2
                if self._history.place(middle, self._cuts_of(middle)).epoch < epoch:
                    low = middle
                else:
                    high = middle
            return step - high
        except ValueError:
            return None

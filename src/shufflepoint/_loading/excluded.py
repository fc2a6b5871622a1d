"""The excluded samples as the deal sees them (``loader.exclude``), and the steps read with them excluded.

The arithmetic is ``_core/exclusion.py`` (``strided``) and ``_core/spanskips.py`` (``spans``: an
exclusion re-deals what is left), and each deal says how it skips (``Deal.cut``, ``_core/deals/``); here:
which orders can exclude (those with an inverse), the excluded positions of the current epoch built once
per epoch (``Excluded``), and the cuts that place the steps read with samples excluded.

An exclusion changes the cut of the rest of the run, so ``which(step)`` and the run's history
(``_core/history.py``) place the steps from the latest exclusion on with the loader's own cuts, the
excluded samples skipped (``Excluded.cut``), and every leg from there stored with its start. The state
keeps the excluded set as one union, so a step read between two ``exclude()`` calls (a smaller set in
effect) is refused by name; the steps before the first exclusion are read as if nothing were excluded.

Under a deal that ``redeals`` (``spans``) an exclusion mid-epoch re-deals what is left, from what the epoch
had ``handed`` out (``_core/spanskips.py``). The state keeps that only while the epoch is read; once it is left, the
exclusion's own epoch is placed again only for a run's single exclusion, whose ``handed`` is what the
history had handed out by then (rebuilt here as ``exclude()`` builds it).

Words: docs/glossary.md (exclusion, handed, cut, fold).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from shufflepoint._core.cut import Cut, Deal
from shufflepoint._core.exclusion import MAX_RANGES, Exclusion, Skips
from shufflepoint._core.history import Cuts, History, Place, place_after
from shufflepoint._core.plan import Layout
from shufflepoint._core.spanskips import Handed
from shufflepoint._core.state import Position as SavedPosition
from shufflepoint._core.state_fields import MAX_EXCLUDED_AT
from shufflepoint._errors import DAMAGED, Plain, Refused, field_error, refusal
from shufflepoint._loading.orders import OrderCache
from shufflepoint._order import InvertibleOrder


def check_can_exclude(orders: OrderCache) -> None:
    """ValueError naming what stands in the way: an order without an inverse."""
    if not isinstance(orders.get(0), InvertibleOrder):
        way = ("exclude documents by filtering the corpus the Packed reads, and start a new run"
               if orders.name == "packed" else "filter the dataset and start a new run")
        # LIMIT(exclude-no-inverse): docs/exclusion.md#limits
        raise Refused("exclude", Plain(f"the {orders.name!r} order of a {type(orders.dataset).__name__}"),
                      "an order with an inverse (index -> position), which exclusion needs", way,
                      why="this order has no inverse yet")


class Excluded:
    """A loader's excluded set and the current epoch's excluded positions (O(count) once per epoch)."""

    def __init__(self, n: int) -> None:
        self.exclusion = Exclusion.empty(n)
        self._skips: tuple[tuple[int, int | None], Skips] | None = None

    @classmethod
    def for_state(cls, exclusion: Exclusion | None, orders: OrderCache) -> Excluded:
        """What a loaded state excludes; StateError naming ``excluded`` when this loader cannot skip it."""
        found = cls(orders.n)
        if exclusion is not None:
            try:
                check_can_exclude(orders)
            except Refused as error:
                raise field_error("excluded", Plain(f"{exclusion.count} excluded indices"), f"[] for {error.found}, "
                                  "whose order has no inverse (index -> position)", error.fix) from None
            found.replace(exclusion, orders.n)
        return found

    def merged(self, indices: Any, orders: OrderCache) -> tuple[Exclusion, Exclusion]:
        """(``indices`` as an exclusion, this set plus them), every local check passed (nothing is changed
        here; that the ranks agree on ``indices`` is the loader's check)."""
        added = Exclusion.from_indices(indices, orders.n)
        check_can_exclude(orders)
        merged = self.exclusion.union(added)
        if len(merged) > MAX_RANGES:
            # LIMIT(excluded-ranges): docs/exclusion.md#limits
            raise ValueError(refusal("indices", Plain(f"an excluded set of {len(merged)} ranges"),
                                     f"at most {MAX_RANGES} ranges (the state's bound)",
                                     "exclude fewer or contiguous indices; nothing was excluded"))
        return added, merged

    def replace(self, exclusion: Exclusion | None, n: int) -> None:
        self.exclusion = exclusion if exclusion is not None else Exclusion.empty(n)
        self._skips = None

    def skips(self, orders: OrderCache, epoch: int, stretches: int | None = None) -> Skips:
        """The excluded indices' positions in ``epoch``, its order laid along the stretches of ``stretches`` ranks
        (None: not laid), O(count) once per epoch."""
        key = (epoch, stretches)
        if self._skips is None or self._skips[0] != key:
            order = cast(InvertibleOrder, orders.laid(epoch, stretches))
            self._skips = (key, Skips(order.positions_of(self.exclusion.indices()), orders.n))
        return self._skips[1]

    def start(self, deal: Deal, orders: OrderCache, layout: Layout, position: SavedPosition) -> Cut:
        """Where a loaded state's position reads on; StateError naming ``cursor`` when, with samples excluded and
        handed out (``spans``), it is not what ``segments`` and ``handed`` leave (checked here: it needs the order)."""
        try:
            found = self.cut(deal, orders, layout, position.epoch, position.cursor, position.segments,
                             handed=position.handed)
        except ValueError as error:  # segments that the space left by handed and excluded cannot hold
            shown, why = (error.where(), error.expected) if isinstance(error, Refused) else (position.segments, None)
            raise field_error("segments", shown, "the epoch's world sizes since its latest exclusion", DAMAGED,
                              why=why) from None
        if found.after(0)[0] != position.cursor:
            raise field_error("cursor", position.cursor, f"{found.after(0)[0]} (what segments={position.segments}, "
                              f"handed and excluded leave of n={orders.n})", DAMAGED)
        return found

    def cut(self, deal: Deal, orders: OrderCache, layout: Layout, epoch: int, cursor: int,
            segments: Sequence[Sequence[int]], parts: int | None = None, handed: Handed | None = None) -> Cut:
        """The rest of ``epoch`` from (cursor, segments): the deal's own cut, skipping the excluded (``Deal.cut``).
        ``handed``: what the epoch handed out before its latest exclusion (a deal that ``redeals``)."""
        skips = functools.partial(self.skips, orders, epoch) if self.exclusion else None
        return deal.cut(layout, cursor, segments, parts, epoch=epoch, handed=handed, skips=skips)

    def epoch_layout(self, layout: Layout) -> Layout:
        """A whole epoch's layout with the excluded samples taken out (for ``len(loader)``)."""
        return Layout(layout.n - self.exclusion.count, layout.world_size, layout.batch_size, layout.drop_last)


def kept_steps(steps: tuple[int, ...], step: int) -> tuple[int, ...]:
    """``steps`` with ``step`` added: the first and the latest ``MAX_EXCLUDED_AT - 1`` kept (the state's bound).

    >>> kept_steps((3, 9), 9), kept_steps(tuple(range(32)), 40)[:2]
    ((3, 9), (0, 2))
    """
    if steps and steps[-1] == step:
        return steps
    found = (*steps, step)
    return found if len(found) <= MAX_EXCLUDED_AT else (found[0], *found[-(MAX_EXCLUDED_AT - 1):])


def placeable(step: int, excluded_at: tuple[int, ...]) -> bool:
    """Whether ``step`` is read with the whole excluded set (True) or with none of it (False); ValueError
    naming the steps in between, or a state that does not say when its exclusions took effect."""
    if not excluded_at:
        # LIMIT(which-before-excluded-at): docs/exclusion.md#limits
        raise ValueError(refusal("which", Plain("a state with samples excluded and no 'excluded_at'"),
                                 "a state that says from which step its exclusions took effect",
                                 "ask a checkpoint written by a newer shufflepoint, which records it",
                                 why="without it no step of a run with exclusions is placed"))
    first, last = excluded_at[0], excluded_at[-1]
    if first <= step < last:
        # LIMIT(which-between-exclusions): docs/exclusion.md#limits
        raise ValueError(refusal("which", Plain(f"step {step}, read between exclusions at steps {list(excluded_at)}"),
                                 f"a step before {first} or from {last} on", "ask one of those steps",
                                 why=f"the state keeps only the union of what was excluded, so steps {first} to "
                                 f"{last - 1} are not placed"))
    return step >= last


def _rebuilt_handed(history: History, step: int, epoch: int | None) -> tuple[int, Handed | None] | None:
    """(epoch, handed) at a run's single exclusion, from the legs before it; None when they were dropped.
    ``epoch``: the exclusion's own, where the legs before it had read all they could of it (drop_last: the
    next layout reads on into the tail they dropped), so that their position is the next epoch's start."""
    legs = [leg for leg in history.legs if leg.step < step]
    if not legs:
        return None
    before = History(history.n, history.deal, legs)
    place = before.position(step)
    if place is not None and place.epoch != epoch and step > before.first_step:
        last = before.place(step - 1)  # the end of what they read of the exclusion's epoch, not normalized
        if last.epoch == epoch:
            place = place_after(last.epoch, last.cut, (last.batch + 1) * last.layout.batch_size)
    if place is None:
        return None
    current = place.cut(legs[-1].layout, history.deal, before.parts(legs[-1]))
    return place.epoch, history.deal.exclusion_start(current, 0, legs[-1].layout, place.segments, None)[1]


def history_cuts(history: History, deal: Deal, orders: OrderCache, excluded: Excluded, excluded_at: tuple[int, ...],
                 live: tuple[int, Handed | None]) -> Cuts:
    """The cuts that place the steps from the latest exclusion on; ``live``: the loader's epoch and what it
    handed out before that epoch's latest exclusion (a deal that ``redeals``)."""
    at = excluded_at[-1] if excluded_at else -1
    excluded_epoch = next((leg.start.epoch for leg in history.legs if leg.step == at), None)
    rebuilt: list[tuple[int, Handed | None] | None] = []

    def handed(epoch: int) -> Handed | None:
        if epoch == live[0]:
            return live[1]
        if excluded_epoch is not None and epoch != excluded_epoch:
            return None  # an epoch after the exclusion's own: dealt afresh, without the excluded samples
        if len(excluded_at) == 1 and not rebuilt:
            rebuilt.append(_rebuilt_handed(history, at, excluded_epoch))
        if len(excluded_at) == 1 and rebuilt[0] is not None:
            return rebuilt[0][1] if rebuilt[0][0] == epoch else None
        # LIMIT(which-spans-handed-lost): docs/exclusion.md#limits
        raise ValueError(refusal("which", Plain(f"epoch {epoch}, with samples excluded at step {at} under 'spans'"),
                                 "an epoch whose handed-out positions the state still knows",
                                 "ask a checkpoint written while that epoch was read",
                                 why="what it had handed out by then is no longer known (the state keeps it while "
                                 "the epoch is read; it is rebuilt for a run's single exclusion only)"))

    def cuts(place: Place, layout: Layout, parts: int) -> Cut:
        known = handed(place.epoch) if deal.redeals else None
        return excluded.cut(deal, orders, layout, place.epoch, place.cursor, place.segments, parts, known)

    return cuts


def arrived(position: SavedPosition, excluded: Excluded, deal: Deal, orders: OrderCache, start: Cut,
            layout: Layout) -> History:
    """The loaded history, read on with ``layout`` from ``start``. With samples excluded (and their steps
    known) where the history arrives after ``steps`` is checked here, with the loader's cuts (it needs the
    order): StateError naming ``steps`` when it is not the saved place; ``state.validate`` checks the rest."""
    history, place = position.history, place_after(position.epoch, start, 0)
    if not (excluded.exclusion and position.excluded_at):
        return history.record(position.steps, layout, place)
    cuts = history_cuts(history, deal, orders, excluded, position.excluded_at, (position.epoch, position.handed))
    try:
        found = history.position(position.steps, cuts)
        saved = history.legs[-1].layout  # the saved run's: a smaller global batch may read on where it dropped
        here = Place(position.epoch, position.cursor, position.segments)
        if not _same(found, place, deal) and cuts(here, saved, history.parts()).samples_per_rank() == 0:
            following = Place(position.epoch + 1, 0)  # the saved run's epoch ended there: the next one's start
            place = place_after(following.epoch, cuts(following, saved, history.parts()), 0)
    except ValueError:  # spans: the exclusion's epoch left, what it handed out unknown: not checked (docs)
        return history.record(position.steps, layout, place_after(position.epoch, start, 0), cuts)
    if not _same(found, place, deal):
        there = f"epoch {found.epoch}, cursor {found.cursor}" if found else "no batch"
        raise field_error("steps", position.steps, f"a step at which the history arrives at epoch {position.epoch}, "
                          f"cursor {position.cursor} (with the excluded samples skipped)", DAMAGED,
                          why=f"the history arrives at {there}")
    return history.record(position.steps, layout, place_after(position.epoch, start, 0), cuts)


def _same(found: Place | None, place: Place, deal: Deal) -> bool:
    """Whether the history arrives at ``place`` (``Deal.same_place``)."""
    return found is not None and deal.same_place(found, place)

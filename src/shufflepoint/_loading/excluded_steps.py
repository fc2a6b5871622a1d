"""Steps read with samples excluded: when each ``exclude()`` took effect, and the cuts that place those steps.

An exclusion changes the cut of the rest of the run, so ``which(step)`` and the run's history
(``_core/history.py``) place the steps from the latest exclusion on with the loader's own cuts, the
excluded samples skipped (``Excluded.cut``), and every leg from there stored with its start. The state
keeps the excluded set as one union, so a step read between two ``exclude()`` calls (a smaller set in
effect) is refused by name; the steps before the first exclusion are read as if nothing were excluded.

Under ``spans`` an exclusion mid-epoch re-deals what is left, from what the epoch had ``handed`` out
(``_core/spanskips.py``). The state keeps that only while the epoch is read; once it is left, the
exclusion's own epoch is placed again only for a run's single exclusion, whose ``handed`` is what the
history had handed out by then (rebuilt here as ``exclude()`` builds it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shufflepoint._core.errors import StateError
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.history import Cuts, History, Place, place_after
from shufflepoint._core.plan import STRIDED, Layout
from shufflepoint._core.spans import SpanCut
from shufflepoint._core.spanskips import Cut, FilteredSpanCut, Handed
from shufflepoint._core.state_fields import MAX_EXCLUDED_AT

if TYPE_CHECKING:
    from shufflepoint._core.state import Position
    from shufflepoint._loading.excluding import Excluded
    from shufflepoint._loading.orders import OrderCache
    from shufflepoint._loading.sampler import Deal


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
        raise ValueError("which: this run excludes samples, but its state does not say from which step (written "
                         "before the 'excluded_at' field), so no step of it is placed (docs/exclusion.md, 'Limits')")
    first, last = excluded_at[0], excluded_at[-1]
    if first <= step < last:
        raise ValueError(f"which: found step {step}, read between exclusions: exclude() was called at steps "
                         f"{list(excluded_at)} and the state keeps only the union of what was excluded, so steps "
                         f"{first} to {last - 1} are not placed. Ask for a step before {first} or from {last} on.")
    return step >= last


def handed_from(current: Cut, done: int, layout: Layout) -> FilteredSpanCut:
    """Under ``spans``, ``current`` (the rest of the epoch, ``done`` samples per rank read) as an exclusion
    re-deal's starting point: the cut whose ``handed_after(done)`` is what the epoch handed out."""
    if isinstance(current, FilteredSpanCut):
        return current
    assert isinstance(current, SpanCut)
    _, read = current.after(done)  # nothing excluded yet: what it read, as segments (a fixed global batch's
    handed = Handed(current.first_world_size, Exclusion.empty(layout.n))  # position is one segment of its parts)
    return FilteredSpanCut(layout.n, handed, np.zeros(0, np.int64), read, layout.world_size, layout.batch_size,
                           layout.drop_last)


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
    return place.epoch, handed_from(current, 0, legs[-1].layout).handed_after(0)


def history_cuts(history: History, deal: Deal, orders: OrderCache, excluded: Excluded, excluded_at: tuple[int, ...],
                 live: tuple[int, Handed | None]) -> Cuts:
    """The cuts that place the steps from the latest exclusion on; ``live``: the loader's epoch and what it
    handed out before that epoch's latest exclusion (``spans``)."""
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
        raise ValueError(f"which: under the 'spans' deal, epoch {epoch} had samples excluded at step {at}, and "
                         "what it had handed out by then is no longer known (the state keeps it while the epoch is "
                         "read; it is rebuilt for a run's single exclusion only) (docs/exclusion.md, 'Limits')")

    def cuts(place: Place, layout: Layout, parts: int) -> Cut:
        known = None if deal.name == STRIDED else handed(place.epoch)
        return excluded.cut(deal, orders, layout, place.epoch, place.cursor, [list(p) for p in place.segments],
                            parts, known)

    return cuts


def arrived(position: Position, excluded: Excluded, deal: Deal, orders: OrderCache, start: Cut,
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
        here = Place(position.epoch, position.cursor, tuple((int(a), int(b)) for a, b in position.segments))
        if not _same(found, place, deal) and cuts(here, saved, history.parts()).samples_per_rank() == 0:
            following = Place(position.epoch + 1, 0)  # the saved run's epoch ended there: the next one's start
            place = place_after(following.epoch, cuts(following, saved, history.parts()), 0)
    except ValueError:  # spans: the exclusion's epoch left, what it handed out unknown: not checked (docs)
        return history.record(position.steps, layout, place_after(position.epoch, start, 0), cuts)
    if not _same(found, place, deal):
        there = f"epoch {found.epoch}, cursor {found.cursor}" if found else "no batch"
        raise StateError(f"state field 'steps': found {position.steps}, expected a step at which the history "
                         f"arrives at epoch {position.epoch}, cursor {position.cursor} with the excluded samples "
                         f"skipped (it arrives at {there}). The state is damaged or was edited; use another "
                         "checkpoint.")
    return history.record(position.steps, layout, place_after(position.epoch, start, 0), cuts)


def _same(found: Place | None, place: Place, deal: Deal) -> bool:
    """Whether the history arrives at ``place``; under ``spans`` the segments place it (a stored leg's cursor
    is rebuilt from them without the gone positions, which the cuts count again)."""
    if found is None or deal.name == STRIDED:
        return found == place
    return (found.epoch, found.segments) == (place.epoch, place.segments)

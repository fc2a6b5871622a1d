"""Where a loader stands, and how it decides its next batch: the position model.

Read this module to learn what ``shufflepoint.DataLoader`` does between two batches and on a resume.
It holds no torch object; the ``DataLoader`` (``loader.py``) and ``ResumableSampler`` (``sampler.py``)
are thin torch adapters that drive one ``LoaderPosition`` each.

Vocabulary::

    layout    (n, world_size, batch_size, drop_last): how an epoch is dealt now (``_core/plan.py``)
    orders    the epoch's order, a seekable permutation built once per epoch (``orders.py``)
    deal      ``strided``, ``spans`` or ``buckets``: which rank reads which positions, and everything that differs
              between them, one module each (``_core/deals/``); this module never asks which one it reads
    cut       the rest of an epoch as the deal gives it to this world (``_core/cut.py``)
    segments  what the deal records of the epoch beyond its cursor (``_core/segments.py``)
    start     the cut the next pass reads from; ``epoch`` the epoch it belongs to
    pass      one ``iter(loader)``: its cut, the step it began at, the batches received of it
    step      batches each rank has received since the run began (``which`` takes it)
    history   every change of layout with the step and place it began at (``_core/history.py``)
    excluded  the dataset indices never served again, and the steps ``exclude()`` was called at

How the next batch is chosen: a pass reads its cut front to back, ``batch_size`` samples per rank per
batch, the cut's ``rank_positions`` mapped through the epoch's order. Between batches the position is
(epoch, cut, received). Every change rebuilds the cut from where the training loop stands and never
replays: ``seek``/``set_epoch`` jump, ``set_batch_size`` and ``exclude`` read on from the same
position with another cut (recorded in the history), the end of a pass jumps to the next epoch.

What a resume does (``load``, for the ``DataLoader`` and ``ResumableSampler`` alike): the orders and deal
the state is read with (from those the adapter was built with: a state's block or earlier default, never
whether a value was given or defaulted), the state validated against what they expect (``expected_state``)
and agreed on by every rank (the adapter's ``validate``), then placed: its exclusions rebuilt, its epoch's
order checked within the dataset's bounds, its history read on with this layout from the saved (epoch,
cursor, segments). Nothing changes if any of it fails.

Words: docs/glossary.md (position model, place, epoch, cursor, step, iterator, cut, deal, history, leg, exclusion,
state, resume).
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable, Sequence
from typing import Any, Literal

from shufflepoint._core import state as _state
from shufflepoint._core.capabilities import LiveWeighted, hooks_of
from shufflepoint._core.cut import Cut, Deal
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.history import MAX_EPOCH, Cuts, History, Place, place_after
from shufflepoint._core.older_states import recorded_deal
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import Pairs
from shufflepoint._core.skips import Skip, kept
from shufflepoint._core.spanskips import Handed
from shufflepoint._errors import Plain, ResumeWarning, refusal, warn_user
from shufflepoint._loading import block_choice
from shufflepoint._loading.capabilities import check_grid, order_version_explainer
from shufflepoint._loading.excluded import Excluded, arrived, history_cuts, kept_steps, placeable
from shufflepoint._loading.orders import Identity, OrderCache, within_bounds
from shufflepoint._order import check_int

Validate = Callable[[object, _state.Expected], _state.Position]  # the adapter's validation and rank agreement
Expecting = Callable[[OrderCache, Deal, object], _state.Expected]  # what a state must match (orders, deal, state)


class Pass:
    """One run of ``iter(loader)`` over (part of) an epoch: where it started, what was received, the
    step it started at, and the pass it takes over from (``set_batch_size`` or ``exclude`` during a pass).
    ``finished``: every batch of the epoch had been received, as it was dealt, before this pass took over."""

    __slots__ = ("epoch", "cut", "received", "steps", "follows", "finished")

    def __init__(self, epoch: int, start: Cut, steps: int, follows: Pass | None = None,
                 finished: bool = False) -> None:
        self.epoch, self.cut, self.received, self.steps, self.follows = epoch, start, 0, steps, follows
        self.finished = finished

    def __repr__(self) -> str:
        return f"Pass(epoch={self.epoch}, steps={self.steps}, received={self.received})"


class Lookup:
    """Answers ``which`` with an order cache of its own, so that looking up another epoch never
    evicts the order the live pass reads."""

    def __init__(self) -> None:
        self._source: OrderCache | None = None
        self._orders: OrderCache | None = None

    def orders(self, orders: OrderCache) -> OrderCache:
        """This lookup's copy of the loader's ``orders`` (the cuts of an exclusion read it too)."""
        if self._source is not orders or self._orders is None:
            self._source, self._orders = orders, copy.copy(orders)
        return self._orders

    def which(self, history: History, orders: OrderCache, step: int, cuts: Cuts | None = None) -> dict[int, list[int]]:
        """For each rank of the world that read ``step``, the dataset indices of its batch; ``cuts``: the
        loader's, for a step read with samples excluded (built over ``self.orders(orders)``)."""
        check_int("step", step, 0, 2**63 - 1)
        placed = history.place(int(step), cuts)
        order = self.orders(orders).get(placed.epoch, placed.cut)
        positions = placed.world_positions()  # one row a rank, one call for the world, not one per rank
        found = order.take(positions.reshape(-1)).reshape(positions.shape)
        collecting = gc.isenabled()
        gc.disable()  # 16,384 lists of ints would set off collections of every object torch holds (~0.1 s each)
        try:
            return dict(enumerate(found.tolist()))
        finally:
            if collecting:
                gc.enable()


def warn_of_a_lost_ramp(recorded: int, batch_size: int) -> None:
    """A resumed run reads its first batch at the loader's ``batch_size`` though the saved run had ramped to
    ``recorded``: said loudly, since the loader's size is most often the script's constant."""
    warn_user(
        f"batch_size: the saved run changed its batch size with set_batch_size and read on at {recorded} per "
        f"rank; this loader was built with batch_size={batch_size}, so the rest is read at {batch_size} (each "
        f"sample once, other batches).\n"
        f"  fix: build the loader with batch_size={recorded}, or call loader.set_batch_size({recorded}) after "
        "load_state_dict, to continue the ramp",
        ResumeWarning,
    )


def orders_for_state(orders: OrderCache, state: object, deal: Deal) -> OrderCache:
    """The orders a state read with ``deal`` is validated against: these, or with the state's block where these
    read this machine's default block, or its grid (``block_choice.py``), or the state's earlier default order
    (0.1's ``feistel``) where these read today's (``OrderCache.for_state``)."""
    rebuild = lambda name, block: OrderCache(name, orders.n, orders.seed, dataset=orders.dataset,  # noqa: E731
                                             shuffle_block=block, grid=orders.grid)
    found: OrderCache = block_choice.orders_for_state(orders, state, deal, rebuild)
    return found


def expected_state(kind: str, seed: int, shuffle: bool, identity: Identity, layout: Layout, orders: OrderCache,
                   deal: Deal, state: object) -> _state.Expected:
    """What a state must match to be loaded into a ``kind`` (``"loader"`` or ``"sampler"``) built with ``seed``,
    ``shuffle`` and ``identity`` that reads on with ``layout``, ``orders`` and ``deal``: the one account both
    adapters give ``LoaderPosition.load`` (with the first five bound)."""
    identity = identity.for_orders(orders)
    return _state.Expected(
        kind=kind, n=layout.n, seed=seed, shuffle=shuffle, order=orders.name,
        order_version=orders.version_for(deal.stretched), dataset_fingerprint=identity.fingerprint,
        explain_fingerprint=identity.explain, explain_length=identity.explain_length, deal=deal,
        legacy_fingerprint=identity.legacy_for(state),
        layout=layout, parameters=orders.parameters,
        phases_changed=identity.compatible(orders.laid_under(deal.stretched)),
        explain_order_version=order_version_explainer(orders.dataset),
    )


class LoaderPosition:
    """Where a loader stands in its run, and every question and change of it (module docstring)."""

    def __init__(self, layout: Layout, orders: OrderCache, deal: Deal) -> None:
        self.layout, self.orders, self.deal = layout, orders, deal
        orders.epoch_parts = self.epoch_parts  # a lay of an earlier epoch is laid to that epoch's parts
        self._built = (orders, deal)  # what a load starts from, whatever earlier loads adopted
        self.live: Pass | None = None  # the pass being read, if any
        self._epoch, self._steps = 0, 0  # with no live pass: the epoch and step the next pass begins at
        self.excluded, self._which_excluded = Excluded(layout.n), Excluded(layout.n)
        self.excluded_at: tuple[int, ...] = ()  # the steps exclude() took effect at
        self.ramp: int | None = None  # the batch size set_batch_size set, kept by the state and its resumes
        self.skipped: tuple[Skip, ...] = ()  # the latest skipped samples (_core/skips.py), kept by the state
        self._ramp_unchecked = False  # a loaded ramp not yet compared with the size the first pass reads at
        self._start: Cut = self.cut(0, 0, ())  # where the next pass starts
        self.history = History.begin(layout.n, deal, layout, Place(0, 0))
        self._lookup = Lookup()

    def __repr__(self) -> str:
        return (f"LoaderPosition(epoch={self.epoch}, step={self.step}, cursor={self.cursor}, "
                f"world_size={self.layout.world_size}, batch_size={self.layout.batch_size}, deal={self.deal.name!r})")

    # -- where am I --------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.live.epoch if self.live is not None else self._epoch

    def here(self) -> tuple[int, Place]:
        """(step, place): batches received since the run began, and where the next one comes from."""
        live = self.live
        if live is None:
            return self._steps, place_after(self._epoch, self._start, 0)
        return live.steps + live.received, place_after(live.epoch, live.cut, self.layout.batch_size * live.received)

    @property
    def step(self) -> int:
        return self.here()[0]

    def position(self) -> tuple[int, Pairs]:
        """(cursor, segments): what the training loop has received of this epoch."""
        place = self.here()[1]
        return place.cursor, place.segments

    @property
    def cursor(self) -> int:
        return self.position()[0]

    def rest(self) -> tuple[Cut, int]:
        """(the cut being read, samples per rank already received of it)."""
        live = self.live
        return (live.cut, self.layout.batch_size * live.received) if live is not None else (self._start, 0)

    def samples_left(self) -> int:
        """Samples each rank still receives in the current epoch, tail padding included."""
        start, done = self.rest()
        return max(start.samples_per_rank() - done, 0)

    def batches_left(self) -> int:
        return -(-self.samples_left() // self.layout.batch_size)

    def real_samples_left(self, rank: int) -> int:
        start, done = self.rest()
        return max(start.real_samples(rank) - done, 0)

    def cursor_after(self, batches: int, *, from_epoch_start: bool = False) -> int:
        """The epoch's cursor once each rank has received ``batches`` more batches (arithmetic only)."""
        check_int("batches", batches, 0, 2**62)
        start, done = (self.deal.cut(self.layout, 0), 0) if from_epoch_start else self.rest()
        return start.after(done + batches * self.layout.batch_size)[0]

    def epoch_layout(self) -> Layout:
        """A whole epoch's layout with the excluded samples taken out (``len(loader)``)."""
        return self.deal.epoch_layout(self.layout, self.excluded.epoch_layout(self.layout))

    # -- the cut -----------------------------------------------------------------------------
    def cut(self, epoch: int, cursor: int, segments: Sequence[Sequence[int]], layout: Layout | None = None, *,
            parts: int | None = None, handed: Handed | None = None) -> Cut:
        """The rest of ``epoch`` from (cursor, segments), the excluded samples skipped; ``parts``: the
        history's canonical parts at this global batch (``History.parts``); for a deal that ``redeals``, what
        the epoch ``handed`` out before its latest exclusion (pass ``self.handed()`` to continue)."""
        return self.excluded.cut(self.deal, self.orders, layout or self.layout, epoch, cursor, segments, parts, handed)

    def handed(self) -> Handed | None:
        """What the current epoch handed out before its latest exclusion (a deal that ``redeals``; else None)."""
        return self.deal.handed(self.live.cut if self.live is not None else self._start)

    def _cut_here(self, place: Place, layout: Layout | None = None, parts: int | None = None) -> Cut:
        return self.cut(place.epoch, place.cursor, place.segments, layout,
                        parts=self.history.parts() if parts is None else parts, handed=self.handed())

    # -- moves -------------------------------------------------------------------------------
    def jump(self, epoch: int, start: Cut) -> None:
        """Read from ``start`` of ``epoch`` next (no live pass), recorded in the run's history."""
        steps = self.step  # leaving an epoch whose exclusion re-dealt it (spans): a leg of its own, so later epochs
        self.history = self.history.record(steps, self.layout, place_after(epoch, start, 0),  # place without it
                                           self.history_cuts(), split=self._leaving_exclusion())
        self.live, self._epoch, self._start, self._steps = None, int(epoch), start, steps

    def seek(self, epoch: int, batches: int = 0) -> None:
        """Go to ``epoch`` after its first ``batches`` batches per rank: O(1), no sample is read."""
        check_int("epoch", epoch, 0, MAX_EPOCH)
        check_int("batches", batches, 0, 2**62)
        parts = self.history.parts()
        fresh = self.cut(epoch, 0, (), parts=parts)
        cursor, segments = fresh.after(int(batches) * self.layout.batch_size)
        within_bounds(self.orders, epoch, fresh)
        per_epoch = -(-fresh.samples_per_rank() // self.layout.batch_size)
        if batches > per_epoch:
            warn_user(f"seek: batches={batches} is past the end of epoch {epoch}, which has {per_epoch} batches "
                      f"per rank at this layout; the loader is placed at its end (the next iter() is empty, the one "
                      f"after reads epoch {epoch + 1}).\n  fix: seek({epoch + 1}, {batches - per_epoch}) to read on "
                      "into the next epoch")
        self.jump(epoch, self.cut(epoch, cursor, segments, parts=parts))

    def set_epoch(self, epoch: int) -> None:
        """Jump to the first batch of ``epoch``; the current epoch again changes nothing."""
        if check_int("epoch", epoch, 0, MAX_EPOCH) != self.epoch:
            self.seek(epoch)

    def read_on(self, epoch: int, start: Cut, steps: int) -> None:
        """Read on from ``start`` at step ``steps``: a live pass is taken over by a new one that follows it
        (the adapter drops what its workers prefetched under the old cut)."""
        live = self.live
        if live is not None:  # a live iterator reads on; a new iter() reads the next epoch if this one was done
            self.live = Pass(epoch, start, steps, follows=live, finished=self._all_received(live))
        self._epoch, self._start, self._steps = epoch, start, steps

    def _all_received(self, live: Pass) -> bool:
        """Whether the loop has received every batch of the live pass's epoch (as dealt before any change)."""
        return live.finished or (live.received > 0 and self.batches_left() == 0)

    def begin_pass(self) -> Pass:
        """A new ``iter(loader)``: continue the current epoch from where the loop stands, or, when every
        batch of the live pass was received without running it out, the next epoch (as torch does)."""
        live = self.live
        if live is not None and self._all_received(live):  # zip(range(len(loader)), loader): not run out, but
            self.end_pass(live)  # every batch received, also before an exclude() or set_batch_size() between epochs
        (steps, place), epoch = self.here(), self.epoch
        start = self._cut_here(place)
        if epoch == MAX_EPOCH and start.samples_per_rank() == 0:
            # LIMIT(last-epoch): docs/state-format.md#what-a-load-checks
            raise ValueError(refusal("epoch", epoch, f"an epoch the loader has not finished, at most {MAX_EPOCH}",
                                     "call set_epoch(e) with an earlier epoch to read on",
                                     why=f"epoch {MAX_EPOCH} is the last one the orders support"))
        if self._ramp_unchecked and self.ramp is not None and self.ramp != self.layout.batch_size:
            warn_of_a_lost_ramp(self.ramp, self.layout.batch_size)
            self.ramp = None  # said once: the run now reads at the loader's size
        self._ramp_unchecked = False
        return self.start_pass(epoch, start, steps)

    def start_pass(self, epoch: int, start: Cut, steps: int) -> Pass:
        """Read ``start`` of ``epoch`` from step ``steps`` as the live pass."""
        live = Pass(epoch, start, steps)
        self.live, self._epoch, self._start, self._steps = live, epoch, start, steps
        return live

    def end_pass(self, live: Pass) -> None:
        """The epoch of ``live`` is over: read the next one from its start (the last epoch stays at its end)."""
        ended = live.epoch == MAX_EPOCH
        following = live.epoch if ended else live.epoch + 1
        where = live.cut.after(live.cut.samples_per_rank()) if ended else (0, ())
        self.jump(following, self.cut(following, *where, parts=self.history.parts()))

    def set_batch_size(self, batch_size: int) -> None:
        """Read on in batches of ``batch_size`` per rank from the next batch, recorded in the history."""
        batch_size = check_int("batch_size", batch_size, 1, 2**31)
        steps, place = self.here()
        layout = Layout(self.layout.n, self.layout.world_size, batch_size, self.layout.drop_last)
        check_grid(self.orders.dataset, self.orders.grid, layout.world_size * batch_size)
        history = self.history.record(steps, layout, place, self.history_cuts())
        start = self._cut_here(place, layout, history.parts())
        self.read_on(place.epoch, start, steps)
        self.layout, self.history = layout, history
        self.ramp, self._ramp_unchecked = batch_size, False  # the caller chose the size

    def exclusion_with(self, indices: Any) -> tuple[Exclusion, Exclusion]:
        """(``indices`` as an exclusion, the excluded set with them), checked; nothing changes here."""
        self.deal.check_exclusion()
        return self.excluded.merged(indices, self.orders)

    def exclude(self, merged: Exclusion) -> None:
        """Skip ``merged`` (the whole excluded set) from the next batch on, from where the deal says the rest of
        the epoch reads on (``Deal.exclusion_start``: under ``spans`` what is left is re-dealt from what the epoch
        handed out, ``_core/spanskips.py``)."""
        if merged == self.excluded.exclusion:  # nothing new: the deal goes on as it is
            return
        steps, place = self.here()
        current, done = self.rest()
        segments, handed = self.deal.exclusion_start(current, done, self.layout, place.segments, self.handed())
        self.excluded.replace(merged, self.layout.n)
        start = self.cut(place.epoch, place.cursor, segments, parts=self.history.parts(), handed=handed)
        self.read_on(place.epoch, start, steps)
        self.excluded_at = kept_steps(self.excluded_at, steps)  # a leg of its own: which() places what follows
        self.history = self.history.record(steps, self.layout, place_after(place.epoch, start, 0),
                                           self.history_cuts(), split=True)

    def skip(self, skips: Sequence[Skip], exclude: bool = True) -> None:
        """Record ``skips`` (agreed on every rank, ``_loading/skipping.py``) and exclude their indices from the next
        batch on, as ``exclude`` does; ``exclude=False`` (an order without an inverse): only record them."""
        if exclude:
            _, merged = self.exclusion_with([skip.index for skip in skips])
            self.exclude(merged)
        self.skipped = kept(self.skipped, skips)

    def epoch_parts(self, epoch: int) -> int | None:
        """The world size whose stretches ``epoch``'s order was laid along when it began (the run's history;
        None where it does not reach back): a lay of that epoch may map later slots (``mixture/lays.py``)."""
        return self.history.epoch_parts(epoch)

    def set_weights(self, weights: Any) -> int:
        """Read the scheduled dataset by ``weights`` from the next global batch on (``LiveWeighted``): a phase at
        the run position the loop reached, ``epoch * n + cursor`` (the past is never rewritten; under ``spans`` a
        ``Mixture`` lays the rest of the epoch's rows anew from there, ``mixture/lays.py``). Returns the phase's
        start."""
        hooks = hooks_of(self.orders.dataset)
        if self.orders.began_fixed:  # a Mixture without a schedule read in its fixed order (``mixture/fixed.py``)
            began = self.orders.version_for(self.deal.stretched)
            raise ValueError(refusal("set_weights", Plain(f"a run in mixture order version {began}"), "a run "
                                     "begun with shufflepoint 0.6 or later by a shufflepoint.DataLoader", "start a "
                                     "new run to change the weights while it trains",
                                     why=f"this run began with order version {began}, which gives each source its "
                                     "count every epoch in windows of shuffle_block rows (a ResumableSampler reads "
                                     "it too); a run begun with 0.6 can"))
        if not isinstance(hooks, LiveWeighted) or self.orders.grid is None:
            raise ValueError(refusal("set_weights", Plain(f"a {type(self.orders.dataset).__name__}"),
                                     "a shufflepoint.Mixture built with schedule=", "build the Mixture as "
                                     "Mixture([a, b], schedule=[(0, [wa, wb])]) to change its weights while training"))
        steps, place = self.here()
        n = self.orders.n
        at = place.epoch * n + place.cursor
        hooks.set_weights(weights, at)  # refused with nothing changed
        self.orders.forget()
        self._lookup = Lookup()
        self.read_on(place.epoch, self._cut_here(place), steps)  # the batches prefetched under the old weights go
        return at

    def adopt_phases(self, state: object) -> Callable[[], None]:
        """Append a state's live phases to the dataset's schedule before the state is checked (nothing for a
        dataset without them); returns what undoes it."""
        hooks = hooks_of(self.orders.dataset)
        phases = state.get("phases") if isinstance(state, dict) else None
        live = [p for p in phases if isinstance(p, list) and len(p) == 3 and isinstance(p[0], int)
                and not isinstance(p[0], bool)] if isinstance(phases, list) else []
        if not isinstance(hooks, LiveWeighted) or not isinstance(phases, list) or not (live or hooks.has_live):
            return lambda: None
        return self._adopted(hooks, phases)  # all of them: a refusal names the phase's own number

    def _adopted(self, hooks: LiveWeighted, phases: list[Any]) -> Callable[[], None]:
        undo = hooks.adopt_phases(phases)
        self.orders.forget()
        self._built[0].forget()
        self._lookup = Lookup()

        def undone() -> None:
            undo()
            self.orders.forget()
            self._built[0].forget()
            self._lookup = Lookup()

        return undone

    # -- the past: which and batches_this_epoch ----------------------------------------------
    def history_cuts(self, excluded: Excluded | None = None, orders: OrderCache | None = None) -> Cuts | None:
        """The cuts that place this run's steps from its latest exclusion on (None: nothing excluded)."""
        if not self.excluded.exclusion:
            return None
        return history_cuts(self.history, self.deal, orders or self.orders, excluded or self.excluded,
                            self.excluded_at, (self.epoch, self.handed()))

    def _leaving_exclusion(self) -> bool:
        """Whether a jump leaves the epoch of the latest exclusion under a deal that ``redeals`` (which re-dealt it
        from what it had handed out): the next epoch then begins a leg of its own, placed without that."""
        if not self.deal.redeals or not self.excluded_at:
            return False
        at = self.excluded_at[-1]
        return any(leg.step == at and leg.start.epoch == self.epoch for leg in self.history.legs)

    def which(self, step: int) -> dict[int, list[int]]:
        """For each rank of the world that read ``step``, the dataset indices of its batch."""
        return self._lookup.which(self.history, self.orders, step, self._cuts_of(step))

    def _cuts_of(self, step: int) -> Cuts | None:
        """The cuts that place ``step``: None before the first exclusion (or with none), the loader's own
        from the latest one on; ValueError naming the steps between two exclusions (``placeable``)."""
        skipped = self._skipped_cuts(check_int("step", step, 0, 2**63 - 1))
        if skipped is not False:
            return skipped
        if not self.excluded.exclusion or not placeable(step, self.excluded_at):
            return None
        if self._which_excluded.exclusion is not self.excluded.exclusion:  # its own skips: the live ones stay
            self._which_excluded = Excluded(self.orders.n)
            self._which_excluded.replace(self.excluded.exclusion, self.orders.n)
        return self.history_cuts(self._which_excluded, self._lookup.orders(self.orders))

    def _skipped_cuts(self, step: int) -> Cuts | None | Literal[False]:
        """Where every exclusion is a skipped sample the record still holds: the cuts that place ``step`` with the
        samples skipped before it excluded, the set that was in effect then (None: none yet). False where the
        record cannot say (``placeable`` decides). Under a deal that re-deals (``spans``) each exclusion re-dealt
        what its epoch had left: ``_replayed_cuts`` rebuilds what it had handed out, exclusion by exclusion."""
        record, n = self.skipped, self.orders.n
        if not record or not self.excluded.exclusion:
            return False
        at = tuple(sorted({skip.step + 1 for skip in record}))  # an exclusion takes effect at the next step
        if at != self.excluded_at or Exclusion.from_indices([s.index for s in record], n) != self.excluded.exclusion:
            return False
        in_effect = [skip.index for skip in record if skip.step < step]
        if not in_effect:
            return None
        if self.deal.redeals:
            return self._replayed_cuts(at, step)
        excluded = Excluded(n)
        excluded.replace(Exclusion.from_indices(in_effect, n), n)
        return history_cuts(self.history, self.deal, self._lookup.orders(self.orders), excluded,
                            tuple(a for a in at if a <= step), (self.epoch, None))

    def _replayed_cuts(self, at: tuple[int, ...], step: int) -> Cuts:
        """Under ``spans``, the cuts in effect at ``step`` (at or after ``at[0]``): from the first skip's exclusion
        to the one before ``step``, each placed where the run stood at the step before it (with the cuts of the
        exclusions before), and what its epoch had handed out by then rebuilt as ``exclude()`` built it
        (``Deal.exclusion_start``). O(exclusions) placements; every leg from an exclusion on is in the history."""
        n, orders = self.orders.n, self._lookup.orders(self.orders)
        cuts: Cuts | None = None
        for number, begins in enumerate(at):
            if begins > step:
                break
            placed = self.history.place(begins - 1, cuts)  # the last batch read before this exclusion
            done = (placed.batch + 1) * placed.layout.batch_size
            segments = placed.cut.after(done)[1]
            _, handed = self.deal.exclusion_start(placed.cut, done, placed.layout, segments, None)
            live = (placed.epoch, handed)
            if done >= placed.cut.samples_per_rank():  # it read its epoch to the end: the next one begins afresh
                live = (placed.epoch + 1, None)
            excluded = Excluded(n)
            excluded.replace(Exclusion.from_indices([s.index for s in self.skipped if s.step < begins], n), n)
            cuts = history_cuts(self.history, self.deal, orders, excluded, at[:number + 1], live)
        assert cuts is not None  # at[0] <= step: the caller found a skip before it
        return cuts

    def batches_this_epoch(self) -> int | None:
        """Batches each rank has received of the current epoch, whatever changed inside it; None where the
        history cannot tell (binary search over the history's steps)."""
        legs, step, epoch = self.history.legs, self.step, self.epoch
        back = max((i for i in range(1, len(legs)) if legs[i].start.epoch < legs[i - 1].start.epoch), default=0)
        first = legs[back].step  # epochs only grow from there (set_epoch goes back)
        try:
            if legs[back].start.epoch == epoch:  # the history begins in this epoch: known if it begins at its start
                return step - first if self.history.begins_its_epoch(legs[back], self._cuts_of(first)) else None
            low, high = first, step  # epoch_of(low) < epoch; the first step of the epoch is in (low, step]
            while high - low > 1:
                middle = (low + high) // 2
                if self.history.place(middle, self._cuts_of(middle)).epoch < epoch:
                    low = middle
                else:
                    high = middle
            return step - high
        except ValueError:
            return None

    # -- state out, state in -----------------------------------------------------------------
    def state(self, *, kind: str, seed: int, shuffle: bool, dataset_fingerprint: str | None) -> dict[str, Any]:
        """The state of the run at this position (``_core/state.py``), the same on every rank."""
        cursor, segments = self.position()
        handed = self.handed()
        layout = self.layout
        return _state.build(
            kind=kind, seed=seed, epoch=self.epoch, cursor=cursor, n=layout.n, shuffle=shuffle,
            order=self.orders.name, order_version=self.orders.version_for(self.deal.stretched),
            world_size=layout.world_size, batch_size=layout.batch_size, drop_last=layout.drop_last,
            dataset_fingerprint=dataset_fingerprint, deal=self.deal, segments=segments, steps=self.step,
            history=self.history,
            excluded=self.excluded.exclusion.to_state(), handed=handed.to_state() if handed else [],
            excluded_at=list(self.excluded_at), parameters=self.orders.parameters, ramp=self.ramp,
            buckets=self.deal.keys_fingerprint, skipped=self.skipped,
        )

    def load(self, state: object, expected: Expecting, validate: Validate) -> None:
        """Place the saved run's position here, in one trip: the orders and deal the state is read with (from those
        this position was built with), the state validated and agreed on (``validate``), its exclusions and
        history rebuilt, then applied. A refused state raises (``StateError``) with nothing changed."""
        undo = self.adopt_phases(state)  # a live phase set_weights added: rebuilt from the state, undone if refused
        try:
            self._load(state, expected, validate)
        except BaseException:
            undo()
            raise

    def _load(self, state: object, expected: Expecting, validate: Validate) -> None:
        built_orders, built_deal = self._built
        deal = built_deal.for_state(recorded_deal(state))
        orders = orders_for_state(built_orders, state, deal)
        saved = validate(state, expected(orders, deal, state))
        excluded = Excluded.for_state(saved.excluded, orders)
        start = excluded.start(deal, orders, self.layout, saved)
        within_bounds(orders, saved.epoch, start, field="state field 'epoch'")
        history = arrived(saved, excluded, deal, orders, start, self.layout)
        start = excluded.cut(deal, orders, self.layout, saved.epoch, saved.cursor, saved.segments,
                             history.parts(), saved.handed)
        if orders.identity != built_orders.identity:  # a state's block or grid adopted
            check_grid(orders.dataset, orders.grid, self.layout.world_size * self.layout.batch_size)
        self.restore(orders, deal, saved.steps, history, excluded, saved.excluded_at)
        self._epoch, self._start = saved.epoch, start
        self.ramp, self._ramp_unchecked = saved.ramp, True
        self.skipped = saved.skipped

    def restore(self, orders: OrderCache, deal: Deal, steps: int, history: History, excluded: Excluded | None = None,
                excluded_at: tuple[int, ...] = ()) -> None:
        """Take a validated state's run as this one's (no live pass; ``jump`` places the next pass)."""
        self.orders, self.deal, self.live, self._steps, self.history = orders, deal, None, steps, history
        if orders.epoch_parts != self.epoch_parts:  # orders built to check the state: place their lays anew
            orders.epoch_parts = self.epoch_parts
            orders.forget()
        self.excluded = excluded if excluded is not None else Excluded(self.layout.n)
        self.excluded_at, self._which_excluded = excluded_at, Excluded(self.layout.n)

"""``shufflepoint.Mixture``: several corpora mixed by weight, with an order that is still a pure function.

An epoch of the mixture has ``samples_per_epoch`` positions; source s owns exactly ``count[s]`` of
them (its weight's share, by largest remainder). The source of a position, and which of the
source's samples it is, are arithmetic on (seed, epoch, position), so a resume is a seek, across
epoch boundaries too, and no world size enters it:

1. The epoch is cut into windows of about ``shuffle_block`` positions. Window k gives source s
   the slots between its cumulative quotas ``c_s(kB)`` and ``c_s((k+1)B)``, where
   ``c_s(x) = floor(x * count[s] / L)`` for every source but the largest, which takes the rest;
   the quotas only grow, because each window holds at least ``S - 1`` slots of the largest source
   (checked). The slots of a window are shuffled (a keyed Feistel permutation per window).
2. The t-th slot of source s in epoch e is position ``q = e * count[s] + t`` of the source's own
   endless stream: pass ``q // len(s)``, row ``q % len(s)`` of that pass's order (the ``blocks``
   order for a sharded source, ``feistel`` for any other map-style dataset), keyed per source and
   per pass. A source smaller than its share repeats, each pass in a new order; a larger one is
   covered across mixture epochs before any of its samples repeats: the case a mixture resumed
   past one epoch gets wrong elsewhere (MosaicML Streaming #869). A ``Packed`` source's pass p is
   its own ``packed`` epoch p, so its stream position q is exactly its index q.

With ``schedule=`` the weights follow the run's position instead of a count per epoch (order
version 2, ``scheduled_mixture.py``); everything below 2. is the same. Without one, a loader reads the
counts as the schedule ``[(0, counts)]`` on its grid (``fixed.py``): each epoch still holds ``counts``, and
``set_weights`` can append a phase; steps 1. and 2. above are then its *fixed order* (version 1), which a
sampler reads, and a run begun before 0.6. Both orders live beside this module
(``mixture_order.py``, ``scheduled_mixture.py``) and read the mixture through ``MixedSources``.

The loader sees ``len(mixture) == samples_per_epoch`` and dataset indices into the concatenation
of the sources (``mixture[i]`` is row ``i - offset[s]`` of source s), so a mixed epoch keeps the
locality of each source's own order.

Words: docs/glossary.md (mixture, source, pass, window, phase, live phase, schedule, fixed order).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core.capabilities import (
    Identified,
    LegacyIdentified,
    PrefetchesDealt,
    Prefetching,
    ReadsAtDensity,
    ReadsBatches,
    hooks_of,
)
from shufflepoint._core.schedule import (
    Schedule,
    changed_phase,
    of_counts,
    on_edge,
    parse_shares,
    shares_text,
    unweighted,
)
from shufflepoint._errors import Plain, field_error, refusal
from shufflepoint._order import check_int
from shufflepoint._order.distinct import distinct
from shufflepoint._shards.corpora.mixture.caps import Caps, apportion, check_budget, check_caps
from shufflepoint._shards.corpora.mixture.fixed import VERSIONS as FIXED_VERSIONS
from shufflepoint._shards.corpora.mixture.fixed import fixed_order
from shufflepoint._shards.corpora.mixture.order import _MAX_STREAM, NAME, VERSION, MixtureOrder, decode, offsets
from shufflepoint._shards.corpora.mixture.scheduled import VERSION as SCHEDULED  # the order's version with a schedule
from shufflepoint._shards.corpora.mixture.scheduled import ScheduledMixtureOrder, check_global_batch
from shufflepoint._shards.corpora.mixture.sources import check_sources, is_packed
from shufflepoint._shards.corpora.mixture.stretches import PARTS_IN_TURN_VERSION, UNKEPT_VERSIONS, StretchedMixtureOrder
from shufflepoint._shards.corpora.mixture.stretches import SCHEDULED_VERSION as STRETCHED_SCHEDULED
from shufflepoint._shards.corpora.mixture.stretches import VERSION as STRETCHED
from shufflepoint._shards.corpora.shards.batch import Batch, Columnar, Columns, Rows, Stacked, checked_indices, gather
from shufflepoint._shards.corpora.shards.locate import mixture_location
from shufflepoint._shards.corpora.shards.shown import shown

FINGERPRINT_PREFIX = "mixture:"


def _identity(dataset: Any, *, legacy: bool) -> str | None:
    """A source's own fingerprint (its 0.2 one where ``legacy`` and it has one), or None."""
    hooks = hooks_of(dataset) if legacy else None
    if isinstance(hooks, LegacyIdentified) and hooks.legacy_fingerprint:
        return hooks.legacy_fingerprint
    return (dataset.fingerprint or None) if isinstance(dataset, Identified) else None


def _read_source(dataset: Any, rows: np.ndarray, reads_batches: bool) -> Batch:
    if reads_batches:  # ours give a Batch; a user's ReadsBatches any sequence of the samples
        found = dataset.read_batch(rows)
        return found if isinstance(found, (Rows, Columns, Stacked)) else Rows(list(found))
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return Rows(list(getitems(rows.tolist())))
    return Rows([dataset[row] for row in rows.tolist()])


class Mixture(torch.utils.data.Dataset[Any]):
    """Several datasets mixed by weight: ``Mixture([(web, 0.7), (code, 0.3)])``.

    Use it with ``shufflepoint.DataLoader``, which then takes the ``mixture`` order; ``shuffle_block`` is
    the window and block size of that order. Each source gets its weight's share of a mixed epoch,
    repeating when it is smaller than that share, each pass in a new order.

    Packed sources (``Mixture([(Packed(web, L), 0.7), (Packed(code, L), 0.3)])``, one ``seq_len``)
    mix rows of equal token counts, so the weights are shares of tokens; each source's pass p is its
    own ``packed`` epoch p (keyed by the loader's seed per source, its blocks of ``shuffle_block``
    documents), so its rows come in its own packing order and resume with it.

    >>> mixture = Mixture([(list(range(10)), 3), (list(range(100, 104)), 1)], samples_per_epoch=8)
    >>> mixture.counts
    [6, 2]

    With a schedule the weights change as training goes, and ``counts`` is then the first epoch's. Under the
    ``spans`` deal (the loader's default) each rank draws every source from its own stretch of it, so a node
    keeps its share of every source across epochs (``mixture_stretches.py``). See docs/shards.md.

    >>> annealed = Mixture([list(range(10)), list(range(100, 104))], samples_per_epoch=8,
    ...                    schedule=[(0, [3, 1]), (6, [0, 1])])
    >>> annealed.counts
    [5, 3]

    Args:
        sources (Sequence): the datasets to mix, map-style, none empty: ``(dataset, weight)`` pairs, a
            weight any finite number > 0 (only their ratios count); with ``schedule``, the datasets alone.
            Required. A dataset with an order of its own is refused, but ``Packed`` (then every source
            must be a ``Packed`` of the same ``seq_len``).
        samples_per_epoch (int | None): positions of a mixed epoch, the loader's ``len``; each source
            gets its weight's share of them (largest remainder), and a source whose share rounds to 0 is
            refused. Default None: the sources' total length.
        schedule (Sequence | None): phases ``(start, weights)``, or ``(start, weights, k)`` to ramp
            linearly to the next phase's weights in k steps: ``start`` counts the samples consumed since
            the run began, all ranks together (tokens for ``Packed`` sources), the first phase starting at
            0, and a weight may be 0 (the source pauses). A resume may append phases after the position it
            reached, never change one that began. Default None: the weights of ``sources``, the same
            every epoch; a loader reads them as the schedule ``[(0, counts)]``, so ``set_weights`` may still
            change them (``fixed.py``).
        max_repeats (Sequence | None): a cap per source (None: none) on how many times each of its rows may be
            read (a number > 0: its slots stay within ``cap * rows``, so no row is read more than ``ceil(cap)``
            times), in every epoch, or over ``budget``. A mixture that breaks a cap is refused, naming the
            source, its rows, its share and the repeats it would need (``caps.py``). Default None: no caps.
        budget (int | None): the run's samples, all ranks together (tokens for Packed sources, as a schedule's
            starts), over which ``max_repeats`` counts, to the end of the epoch it ends in. Default None: the caps
            hold in every epoch.
        spill (bool): give what a cap takes from a source to the other sources, by their weights, instead of
            refusing (a phase at a time with a schedule). Default False.
    """

    order_name = NAME
    order_version = SCHEDULED  # as a loader reads it, on its grid; a sampler reads one without a schedule in VERSION

    def __init__(self, sources: Sequence[Any], *, samples_per_epoch: int | None = None,
                 schedule: Sequence[tuple[int, Sequence[float]] | tuple[int, Sequence[float], int]] | None = None,
                 max_repeats: Sequence[float | None] | None = None, budget: int | None = None,
                 spill: bool = False) -> None:
        pairs = check_sources(sources if schedule is None else [(dataset, 1.0) for dataset in unweighted(sources)])
        self.sources = [dataset for dataset, _ in pairs]
        self._reads_batches = [isinstance(dataset, ReadsBatches) for dataset in self.sources]  # once, not per batch
        self.weights = [weight for _, weight in pairs]
        self.lengths = [len(dataset) for dataset in self.sources]
        self._offsets = offsets(self.lengths)
        total = int(self._offsets[-1])
        length = total if samples_per_epoch is None else check_int("samples_per_epoch", samples_per_epoch,
                                                                     1, _MAX_STREAM)
        self.samples_per_epoch = length
        self._packed = is_packed(self.sources[0])
        unit = self.sources[0].seq_len if self._packed else 1
        if not isinstance(spill, bool):
            raise TypeError(refusal("spill", spill, "True or False", "pass spill=True to spill, else leave it out"))
        caps = None if max_repeats is None else Caps(check_caps(max_repeats, len(self.sources)), self.lengths, length,
                                                     check_budget(budget), unit)
        if caps is None and budget is not None:
            raise ValueError(refusal("budget", budget, "None without max_repeats", "pass max_repeats with it, or "
                                     "leave budget out", why="the budget is what the caps count over"))
        self._caps = None if max_repeats is None else (list(max_repeats), budget, spill)  # as given, for repr
        if schedule is not None and caps is not None:
            schedule = caps.phases([tuple(phase) for phase in schedule],
                                   lambda phases: Schedule(phases, len(self.sources), unit=unit), spill)
        self._fixed = schedule is None  # built with weights: one count per source every epoch (``fixed.py``)
        self.schedule = None if schedule is None else Schedule(schedule, len(self.sources), unit=unit)
        if self.schedule is not None:
            self.weights = [float(share) for share in self.schedule.shares[0]]
        self.counts = apportion(self.weights, length) if self.schedule is None else self.schedule.counts(length)
        if caps is not None and self.schedule is None:
            self.counts = caps.counts(self.counts, self.weights, spill)
        empty = [s for s, count in enumerate(self.counts) if count == 0]
        if empty and self.schedule is None:
            raise ValueError(refusal("weights", Plain(f"source {empty[0]} gets 0 of the {length} samples per epoch"),
                                     "a share of at least 1 sample for every source",
                                     "raise its weight or samples_per_epoch"))
        if self._fixed:  # as a loader reads it: one phase of exactly these counts, so set_weights appends to it
            self.schedule = of_counts(self.counts)
        self._index_limit = _MAX_STREAM if self._packed else total  # Packed: pass * rows + offset + row

    def __len__(self) -> int:
        return self.samples_per_epoch

    @property
    def rows(self) -> int:
        """The sources' rows, end to end: the range of the indices the mixture order yields (of
        ``index % rows`` for Packed sources: the index is ``pass * rows + offset[s] + row``)."""
        return int(self._offsets[-1])

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self._index_limit:
            raise IndexError(refusal("Mixture index", index, f"an int in [0, {self._index_limit})",
                                     "pass an index of the mixture's rows"))
        source, row = self.source_of(int(index))
        return self.sources[source][row]

    def _decode(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index into that source) of mixture indices: ``pass * rows + offset[s] + row`` is
        source s's index ``pass * len(s) + row`` (pass 0 but for Packed sources)."""
        return decode(self._offsets, self.lengths, flat)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``, each source's samples read as one batch."""
        return self.read_batch(indices).samples()

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """The samples at ``indices``, in that order, read source by source: a source's own
        ``read_batch`` or ``__getitems__`` when it has one, else one ``[i]`` at a time."""
        source, within = self._decode(checked_indices("Mixture", indices, self._index_limit))
        return gather(source, lambda s, where: _read_source(self.sources[s], within[where],
                                                            self._reads_batches[s]))

    def columnar(self) -> Columnar:
        """This mixture with batches kept as read, for ``shufflepoint.collate`` (see ``Columnar``)."""
        return Columnar(self)

    def source_of(self, index: int) -> tuple[int, int]:
        """(source, index into that source) of a mixture index."""
        source, within = self._decode(np.array([index], dtype=np.int64))
        return int(source[0]), int(within[0])

    def locate(self, index: int) -> dict[str, Any]:
        """Where mixture index ``index`` lives: ``{"index", "source", "source_index"}``, plus the
        source's own ``locate`` under ``"where"`` when it has one (``Shards``, ``Packed``)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self._index_limit:
            raise IndexError(refusal("Mixture index", index, f"an int in [0, {self._index_limit})",
                                     "pass an index of the mixture's rows"))
        source, within = self.source_of(int(index))
        return mixture_location(int(index), source, within, self.sources[source])

    @property
    def fingerprint(self) -> str:
        """The sources (their own fingerprints, else their lengths), weights and epoch length."""
        return self._fingerprint("fingerprint")

    def _fingerprint(self, attribute: str, fixed: bool | None = None, counts: list[int] | None = None) -> str:
        """``fixed`` (with ``counts``): as a Mixture of the other kind with these sources would have it (built with
        weights of these counts, or with a schedule), to name that change."""
        parts = [_identity(d, legacy=attribute == "legacy_fingerprint") or f"len={n}"
                 for d, n in zip(self.sources, self.lengths, strict=True)]
        if self._fixed if fixed is None else fixed:
            text = json.dumps({"sources": parts, "counts": self.counts if counts is None else counts})
            return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]
        # the phases are the state's own field (``phases``), so that a resume may append phases (phase_changed)
        text = json.dumps({"sources": parts, "samples_per_epoch": self.samples_per_epoch, "scheduled": True})
        return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def phases(self) -> tuple[tuple[Any, ...], ...]:
        """The schedule's phases as ``(start, hash)`` pairs, recorded in a state (built without a schedule: the one
        phase of its counts, as a loader reads it); a phase ``set_weights`` added while the run trained also carries
        its exact shares, ``(start, hash, shares)``, so that a resume rebuilds it from the state."""
        if self.schedule is None:
            return ()
        live = self.__dict__.get("_live", {})
        return tuple((start, digest, list(live[start])) if start in live else (start, digest)
                     for start, digest in self.schedule.identities())

    def set_weights(self, weights: Sequence[float] | Mapping[int, float], *, at: int) -> None:
        """Read the sources by ``weights`` from run position ``at`` on (samples consumed, all ranks together;
        tokens for Packed sources, as a schedule's starts): a phase appended to the schedule, recorded in the
        state with its weights. Under a loader call ``loader.set_weights``, which picks the next global batch,
        agrees on the weights across ranks and drops what was prefetched; this is what it calls. Called here
        directly, do so before a loader or sampler reads the run past ``at`` (what it has cached is not told).

        A Mixture built without a schedule reads its counts as the phase from 0 (``fixed.py``) under a loader; a
        ``ResumableSampler``, and a run begun before 0.6, read it in its fixed order, which refuses the change.

        Refused with nothing changed: weights that break a ``max_repeats`` cap (with the numbers, as at
        construction; ``spill`` does not move live weights); ``weights`` not one finite number >= 0 per
        source (a list, or a dict naming every source by its number) or all 0; ``at`` not after the last phase's
        start (a phase that began is never rewritten; a live phase at ``at`` itself, of which nothing was read, is
        replaced)."""
        assert self.schedule is not None  # built with one, or its counts as one (``_fixed``)
        listed = self._listed(weights)
        unit = self.sources[0].seq_len if self._packed else 1
        if isinstance(at, bool) or not isinstance(at, (int, np.integer)) or at < 0:
            raise ValueError(refusal("at", at, "a run position, an int >= 0", "pass where the new weights begin"))
        live = dict(self.__dict__.get("_live", {}))
        row = -(-int(at) // unit)
        # a live phase at this very position (two calls between the same batches): the later one wins
        schedule = self.schedule.appended(row, listed, replace=row in live)
        if self._caps is not None:  # the new weights within the caps, as the schedule is checked when built
            max_repeats, budget, _ = self._caps
            caps = Caps(check_caps(max_repeats, len(self.sources)), self.lengths, self.samples_per_epoch, budget, unit)
            found = caps.over(schedule)
            if found is not None:
                caps.refuse(*found)  # with the numbers; nothing changed (spill does not move live weights)
        live[row] = shares_text(schedule.shares[-1])
        self._take(schedule, live)

    def _listed(self, weights: object) -> list[Any]:
        """``weights`` as one per source: a dict must name every source by its number, and only those."""
        if not isinstance(weights, Mapping):
            return weights  # type: ignore[return-value]  # Schedule checks the list
        count = len(self.sources)
        for key in weights:
            if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= key < count:
                raise ValueError(refusal("weights", Plain(f"source {key!r}"), f"a source number in [0, {count})",
                                     "name the sources by their place in the Mixture", why="an unknown source"))
        missing = [s for s in range(count) if s not in weights]
        if missing:
            raise ValueError(refusal("weights", Plain(f"no weight for source {missing[0]}"), "a weight for every "
                                     "source", "give every source its weight (0 pauses it)"))
        return [weights[s] for s in range(count)]

    def _take(self, schedule: Schedule, live: dict[int, list[str]]) -> None:
        """Read by ``schedule`` from now on, its live phases' shares ``live``; the orders per grid are rebuilt."""
        self.schedule, self._live = schedule, live
        self.__dict__.pop("_on_grid", None)

    def adopt_phases(self, saved: Sequence[Sequence[Any]]) -> Callable[[], None]:
        """Read by the state's live phases (``[start, hash, shares]``), each checked against its hash, in place of
        this Mixture's own (a state loaded into a Mixture that changed its weights since: the state is the run);
        returns what undoes it (a refused load changes nothing). A saved phase without shares is left to the
        load's check of the phases."""
        schedule, live = self.schedule, dict(self.__dict__.get("_live", {}))
        undo = functools.partial(self._take, schedule, live)  # type: ignore[arg-type]
        if schedule is None:
            return undo
        if live:  # live phases always follow the phases the Mixture was built with (set_weights appends)
            schedule, live = schedule.first(len(schedule.identities()) - len(live)), {}
        for number, phase in enumerate(saved):
            if not isinstance(phase, list) or len(phase) != 3 or not isinstance(phase[0], int) \
                    or isinstance(phase[0], bool) or phase[0] <= schedule.identities()[-1][0]:
                continue
            shares = parse_shares(phase[2], len(self.sources))
            if shares is None:
                raise field_error(f"phases[{number}]", phase, f"[start, hash, shares]: {len(self.sources)} exact "
                                  "fractions that sum to 1", "use a checkpoint written by this run",
                                  why="the state is damaged")
            try:
                grown = schedule.with_shares(int(phase[0]), shares, f"phases[{number}]")
            except ValueError as error:
                raise field_error(f"phases[{number}]", phase, f"a live phase after the schedule's last start "
                                  f"({schedule.identities()[-1][0]})", "use a checkpoint written by this run",
                                  why=str(error).splitlines()[0]) from None
            if grown.identities()[-1][1] != phase[1]:
                raise field_error(f"phases[{number}]", phase, "shares that hash to the phase's hash",
                                  "use a checkpoint written by this run", why="the state is damaged")
            schedule, live = grown, {**live, int(phase[0]): list(phase[2])}
        self._take(schedule, live)
        return undo

    def schedule_on_grid(self, grid: int) -> Schedule:
        """The schedule with its phases on the edges of global batches of ``grid`` rows (kept per grid)."""
        assert self.schedule is not None
        kept = self.__dict__.setdefault("_on_grid", {})
        if grid not in kept:
            kept[grid] = self.schedule.on_grid(grid, self.samples_per_epoch)
        found: Schedule = kept[grid]
        return found

    def live_starts(self, grid: int | None) -> list[int]:
        """Where the live phases (``set_weights``) start, sorted: on the edges of global batches of ``grid`` rows
        where there is one (as ``schedule_on_grid`` places them), else at the rows they name."""
        live = sorted(self.__dict__.get("_live", {}))
        return live if grid is None else [on_edge(start, grid, self.samples_per_epoch) for start in live]

    def known_schedule(self, phases: int, grid: int | None) -> Schedule:
        """The schedule's first ``phases`` phases (on ``grid``'s edges where there is one) counted by their
        chains of floors, as an order laid along the stretches counts them: what was known at an event of a live
        phase (``mixture/lays.py``). Kept per (phases, grid)."""
        assert self.schedule is not None
        kept = self.__dict__.setdefault("_on_grid", {})
        key = ("known", phases, grid)
        if key not in kept:
            known = self.schedule.first(phases)
            kept[key] = (known if grid is None else known.on_grid(grid, self.samples_per_epoch)).chained()
        found: Schedule = kept[key]
        return found

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int, grid: int | None = None,
                    stretches: int | None = None) -> MixtureOrder | StretchedMixtureOrder:
        """The order of one epoch; ``grid`` (a loader's global batch) places a schedule's phases and shares on
        its global batches (``scheduled_mixture.py``); without a schedule it changes nothing. ``stretches``
        (the ``spans`` deal's first world size) lays the order along the deal's stretches, each rank drawing
        every source from its own stretch of it (``mixture_stretches.py``)."""
        if self._fixed and grid is None:  # a sampler's: the order of one count per source every epoch
            return fixed_order(self, seed, epoch, shuffle_block, stretches)
        if stretches is not None:
            return StretchedMixtureOrder(self, seed, epoch, shuffle_block, stretches, grid)
        return ScheduledMixtureOrder(self, seed, epoch, shuffle_block, grid)

    def __repr__(self) -> str:
        """``Mixture(2 sources, weights=[0.75, 0.25], counts=[6, 2], samples_per_epoch=8, rows=14, schedule=None,
        sources=[list of 10 rows, list of 4 rows])``; with a schedule, its phases as written (the weights and
        counts are then the first phase's and the first epoch's)."""
        live = self.__dict__.get("_live", {})
        schedule = "None" if self._fixed and not live else f"{len(self.phases)} phases"
        weights = [round(weight, 4) for weight in self.weights]
        return (f"Mixture({len(self.sources)} sources, weights={weights}, counts={self.counts}, "
                f"samples_per_epoch={self.samples_per_epoch:,}, rows={self.rows:,}, schedule={schedule}, "
                + ("" if self._caps is None else
                   f"max_repeats={self._caps[0]}, budget={self._caps[1]}, spill={self._caps[2]}, ")
                + f"sources=[{', '.join(shown(dataset) for dataset in self.sources)}])")

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """``Prefetching``: fetch in the background what these upcoming indices read, as a rank that reads
        them densely would (``prefetch_dealt`` with density 1.0). The loader calls it; a script need not."""
        self.prefetch_dealt(indices, 1.0)

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None:
        """Pass upcoming indices on to the sources that read ahead (``Shards``), with this rank's density
        (a source's rows are read as densely as the mixture's positions)."""
        source, within = self._decode(np.asarray(indices, dtype=np.int64))
        for s in distinct(source).tolist():
            dataset = self.sources[s]
            if isinstance(dataset, PrefetchesDealt):
                dataset.prefetch_dealt(within[source == s], density)
            elif isinstance(dataset, Prefetching):
                dataset.prefetch(within[source == s])

    def _loader_hooks(self) -> MixtureHooks:
        """What the loader asks of this mixture beyond its public surface (``Hooked``); ``Scheduled`` only
        where it was built with a schedule."""
        return FixedMixtureHooks(self) if self._fixed else ScheduledMixtureHooks(self)


class MixtureHooks:
    """What the loader asks of a ``Mixture`` beyond its public surface, one object (``_core/capabilities.py``:
    ``LaysOnStretches``, ``ExplainsFingerprint``, ``LegacyIdentified``, ``ExplainsOrderVersion``,
    ``ReadsAtDensity``)."""

    def __init__(self, mixture: Mixture) -> None:
        self._mixture = mixture

    @property
    def stretched_version(self) -> int:
        """The order's version under ``spans`` (``stretches.py``) as a loader reads it: 7 (a sampler reads a Mixture
        built without a schedule in 5, ``fixed.py``; the torchft loader reads 6, ``earlier_laid_version``)."""
        return STRETCHED_SCHEDULED

    @property
    def earlier_laid_version(self) -> int:
        """6: every window's slots numbered part after part (0.5's; the torchft loader's, ``pass_edges.py``)."""
        return PARTS_IN_TURN_VERSION

    def stretched_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int,
                        grid: int | None = None, version: int | None = None,
                        lot: int | None = None) -> StretchedMixtureOrder:
        """The order of one epoch laid along the ``spans`` deal's stretches (``Mixture.epoch_order``), in its
        ``version`` (None: the newest), its parts whole lots of ``lot`` where given (the torchft loader's)."""
        return StretchedMixtureOrder(self._mixture, seed, epoch, shuffle_block, stretches, grid, version=version,
                                     lot=lot)

    @property
    def legacy_fingerprint(self) -> str:
        """As shufflepoint 0.2 computed it, from its sources' 0.2 fingerprints (``ShardsHooks.legacy_fingerprint``)."""
        return self._mixture._fingerprint("legacy_fingerprint")

    def explain_fingerprint(self, saved: str) -> str:
        mixture = self._mixture
        other = [mixture._fingerprint("fingerprint", fixed=not mixture._fixed, counts=counts) for counts in
                 (mixture.counts, apportion(mixture.weights, mixture.samples_per_epoch))]  # its first phase's
        if saved in other:
            was, now = ("with", "without") if mixture._fixed else ("without", "with")
            return (f"the state was written by a Mixture {was} a schedule, and this one is built {now}: build the "
                    "Mixture as the run did (its sources and their weights or schedule) to resume it, or start fresh")
        return ("the mixture changed (a source, its weight or samples_per_epoch, or schedule= added or removed); "
                "each source's own fingerprint is part of the mixture's")

    def explain_order_version(self, saved: int) -> str | None:
        """Why a state of another order version is refused, where it is this mixture's other kind, or a version
        this shufflepoint no longer reads (3 and 4)."""
        if saved in UNKEPT_VERSIONS:
            return (f"The state was written in mixture order version {saved}, by a development build of shufflepoint "
                    f"0.5 (each rank read its own stream of a source in its own stretch, so a source's passes came "
                    f"apart on another world); this one reads version {STRETCHED}, {PARTS_IN_TURN_VERSION} or "
                    f"{STRETCHED_SCHEDULED} under 'spans' (stretches.py): start the run fresh, or resume it with the "
                    "build that wrote it.")
        laid_scheduled = (PARTS_IN_TURN_VERSION, STRETCHED_SCHEDULED)
        if saved not in (VERSION, SCHEDULED, STRETCHED, *laid_scheduled):
            return None
        fixed = self._mixture._fixed
        if fixed or saved in (SCHEDULED, *laid_scheduled):
            return (f"The state was written in mixture order version {saved} ({STRETCHED}, {PARTS_IN_TURN_VERSION} "
                    f"and {STRETCHED_SCHEDULED}: laid along the 'spans' deal's stretches; 1 and 2: not; "
                    f"{PARTS_IN_TURN_VERSION}: the torchft loader's), which this loader does not read under its deal: "
                    "resume with the loader and the deal the run used, or start fresh.")
        saved = SCHEDULED if saved in (SCHEDULED, *laid_scheduled) else VERSION
        was, now = ("with", "without") if saved == SCHEDULED else ("without", "with")
        return (f"The state was written by a Mixture {was} a schedule, and this one is built {now}: build the "
                "Mixture as the run did (its sources and their weights or schedule) to resume it, or start fresh.")

    def read_at_density(self, density: float) -> None:
        """Tell the sources how densely this rank reads (``ReadsAtDensity``): as densely as the mixture's
        positions, as ``prefetch_dealt`` says; a source's own reads then join gaps (or not) as its read-ahead does."""
        for dataset in self._mixture.sources:
            hooks = hooks_of(dataset)
            if isinstance(hooks, ReadsAtDensity):
                hooks.read_at_density(density)


class ScheduledMixtureHooks(MixtureHooks):
    """A ``Mixture`` built with a schedule also offers ``Scheduled``."""

    @property
    def required_deal(self) -> str | None:
        """None: a scheduled Mixture is read under either deal (under ``spans`` in the order laid along its
        stretches, ``stretches.py``, where a phase starts at the global batch it names)."""
        return None

    @property
    def phases(self) -> tuple[tuple[Any, ...], ...]:
        return self._mixture.phases

    @property
    def has_live(self) -> bool:
        """Whether ``set_weights`` (or a loaded state) appended phases to the schedule."""
        return bool(self._mixture.__dict__.get("_live"))

    def adopt_phases(self, saved: Sequence[Sequence[Any]]) -> Callable[[], None]:
        """A state's live phases in place of the Mixture's own before it is checked (``Mixture.adopt_phases``);
        returns the undo."""
        return self._mixture.adopt_phases(saved)

    def laid_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int, grid: int | None,
                   epoch_parts: Callable[[int], int | None], version: int | None = None,
                   lot: int | None = None) -> StretchedMixtureOrder:
        """``stretched_order`` told each earlier epoch's first world (the run's history), where a lay of that
        epoch maps this one's slots (``mixture/lays.py``)."""
        return StretchedMixtureOrder(self._mixture, seed, epoch, shuffle_block, stretches, grid, epoch_parts,
                                     version, lot)

    def set_weights(self, weights: Any, at: int) -> None:
        """``Mixture.set_weights`` from run position ``at`` in rows (a loader's positions; tokens for Packed)."""
        mixture = self._mixture
        mixture.set_weights(weights, at=at * (mixture.sources[0].seq_len if mixture._packed else 1))

    def phase_changed(self, saved: list[list[Any]], epoch: int, cursor: int, grid: int | None,
                      shuffle_block: int, laid: bool = False) -> int | None:
        """The first of a state's ``saved`` phases this schedule changed before the end of the window a state at
        (epoch, cursor) had reached (the global batch of ``grid`` rows, else the ``shuffle_block`` window; ``laid``,
        read in the order laid along the ``spans`` stretches: the epoch's end, as its rows of each source are laid
        out when it begins, ``stretches.py``), or None: the same schedule there, phases appended after it."""
        mixture = self._mixture
        return changed_phase(saved, mixture.phases, mixture.samples_per_epoch, shuffle_block, epoch, cursor, grid,
                             laid)

    def check_global_batch(self, global_batch: int, grid: int) -> None:
        """Warn when global batches of ``global_batch`` rows are not whole windows of the run's ``grid``."""
        check_global_batch(grid, global_batch)

    def scheduled_order(self, seed: int, epoch: int, shuffle_block: int, grid: int) -> ScheduledMixtureOrder:
        """The order of one epoch, its phases and shares on the global batches of ``grid`` rows."""
        return ScheduledMixtureOrder(self._mixture, seed, epoch, shuffle_block, grid)


class FixedMixtureHooks(ScheduledMixtureHooks):
    """A ``Mixture`` built without a schedule: a loader reads it as the schedule of its counts (``fixed.py``), and
    it also offers ``FixedOrder``, its order before that, for a sampler and for a state written in it."""

    @property
    def fixed_versions(self) -> tuple[int, int]:
        """The fixed order's versions: (1, 5), not laid and laid along the ``spans`` stretches."""
        return FIXED_VERSIONS

    def fixed_order(self, seed: int, epoch: int, shuffle_block: int,
                    stretches: int | None) -> MixtureOrder | StretchedMixtureOrder:
        """The fixed order of one epoch (``fixed.py``), laid along ``stretches`` where given."""
        return fixed_order(self._mixture, seed, epoch, shuffle_block, stretches)

    def check_global_batch(self, global_batch: int, grid: int) -> None:
        """Warn as a scheduled Mixture does only once its weights changed: before, one phase holds every global
        batch, whatever its size."""
        if self.has_live:
            check_global_batch(grid, global_batch)

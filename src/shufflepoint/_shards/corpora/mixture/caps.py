"""Repetition caps of a ``Mixture``'s sources: how many times a source may be read, over an epoch or over the
run's budget.

A cap c on source s of L rows bounds the slots the mixture gives it (``passes.py``: slot q of a source reads
row ``q % L`` of its pass ``q // L``) to ``floor(c * L)``: in every epoch (``budget=None``), or over the epochs
up to the end of the one that holds the run's ``budget`` (its first ``budget`` positions, counted as a
schedule's starts: rows, tokens for ``Packed`` sources). A source is read pass after pass, so within its cap
no row of it is read more than ``ceil(c)`` times (an integer cap k: every row at most k times).

A mixture that would break a cap is refused when it is built, with the numbers: the source, its rows, its
share and the repeats it would need. With ``spill=True`` the capped source gets what its cap allows and the
rest of its share goes to the other sources, in proportion to their weights (water-filling: a source the
excess pushes over its own cap is capped in turn). The result is an ordinary mixture, its counts (or its
schedule's phases) those a resume rebuilds from the same arguments, so it is exact and elastic as any.

Worked: A of 3,000 rows and B of 500, weights 3:2, 3,000 samples an epoch: B would get 1,200, 2.4 reads of
each row. ``max_repeats=[None, 2]`` refuses it; with ``spill=True`` B gets 1,000 (2 reads) and A 2,000
(``tests/shards/test_mixture_caps.py`` pins these values).

Words: docs/glossary.md (repetition cap, spill, budget, source, pass).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from shufflepoint._core.schedule import Schedule
from shufflepoint._errors import Plain, refusal

_MOST_EPOCHS = 1 << 16  # a schedule's epochs counted one by one; past this, its last phase's share bounds them
_TRIES = 64  # spill rounds: each caps one more source, or lowers a capped one by its rounding
_FIX = "raise its cap, lower its weight (or samples_per_epoch), or pass spill=True to give the excess to the others"


def check_caps(found: object, sources: int) -> list[Fraction | None]:
    """``max_repeats`` as given: one cap per source, None (no cap) or a finite number > 0; or a dict of the capped
    sources' numbers to their caps (the others uncapped)."""
    if isinstance(found, Mapping):
        for key in found:
            if isinstance(key, bool) or not isinstance(key, numbers.Integral) or not 0 <= int(key) < sources:
                raise ValueError(refusal("max_repeats", Plain(f"source {key!r}"), f"a source number in [0, {sources})",
                                         "name the sources by their place in the Mixture", why="an unknown source"))
        found = [found.get(s) for s in range(sources)]
    if isinstance(found, (str, bytes)) or not isinstance(found, Sequence):
        raise TypeError(refusal("max_repeats", found, f"a list of {sources} caps, one per source (None: no cap), "
                                "or a dict {source: cap}", "pass max_repeats=[None, 2.0, ...] or {1: 2.0}"))
    if len(found) != sources:
        raise ValueError(refusal("max_repeats", Plain(f"{len(found)} cap(s)"), f"{sources}, one per source",
                                 "give every source a cap, None for none"))
    caps: list[Fraction | None] = []
    for s, cap in enumerate(found):
        if cap is None:
            caps.append(None)
            continue
        if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not math.isfinite(cap) or cap <= 0:
            raise ValueError(refusal(f"max_repeats[{s}]", cap, "None or a finite number > 0 (reads of each row)",
                                     "give the source a cap > 0, or None"))
        caps.append(Fraction(float(cap)).limit_denominator(1 << 32))
    return caps


def check_budget(budget: object) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or not 1 <= int(budget) < 2**62:
        raise ValueError(refusal("budget", budget, "None or an int in [1, 2**62): the run's samples (tokens for "
                                 "Packed sources), all ranks together", "pass the samples the run will train on"))
    return int(budget)


def limits(caps: Sequence[Fraction | None], lengths: Sequence[int]) -> list[int | None]:
    """Slots each source may have: ``floor(cap * rows)``."""
    return [None if cap is None else math.floor(cap * length) for cap, length in zip(caps, lengths, strict=True)]


class Caps:
    """The caps of one mixture: ``limits`` per source over an epoch (``budget`` None) or over ``epochs`` epochs."""

    def __init__(self, caps: Sequence[Fraction | None], lengths: Sequence[int], samples_per_epoch: int,
                 budget: int | None, unit: int = 1) -> None:
        self.caps, self.lengths, self.n, self.budget = list(caps), list(lengths), samples_per_epoch, budget
        self.limits = limits(caps, lengths)
        rows = None if budget is None else -(-budget // unit)  # a budget in tokens ends at the row holding it
        self.epochs = None if rows is None else -(-rows // samples_per_epoch)  # to the end of its epoch

    # -- without a schedule: counts per epoch ------------------------------------------------------
    def counts(self, counts: list[int], weights: Sequence[float], spill: bool) -> list[int]:
        """The epoch's counts within the caps: ``counts`` checked, or (``spill``) water-filled from ``weights``."""
        per_epoch = self._per_epoch()
        unlimited = self.n + 1  # more than any count: no cap
        most = [unlimited if limit is None else limit for limit in per_epoch]
        over = [s for s, count in enumerate(counts) if count > most[s]]
        if not over:
            return counts
        if not spill:
            self.refuse(over[0], counts[over[0]] * (self.epochs or 1), Fraction(counts[over[0]], self.n))
        fixed: dict[int, int] = {}
        while True:
            for s in over:
                fixed[s] = most[s]
            free = [s for s in range(len(counts)) if s not in fixed]
            left = self.n - sum(fixed.values())
            if not free:
                self._cannot_fill(left)
            shares = apportion([weights[s] for s in free], left)
            counts = [fixed.get(s, 0) for s in range(len(counts))]
            for s, count in zip(free, shares, strict=True):
                counts[s] = count
            over = [s for s in free if counts[s] > most[s]]
            if not over:
                return counts

    def _per_epoch(self) -> list[int | None]:
        """Slots a source may have per epoch: its limit, or over a budget its limit over the budget's epochs."""
        if self.epochs is None:
            return list(self.limits)
        return [None if limit is None else limit // self.epochs for limit in self.limits]

    # -- with a schedule: counts over the epochs -----------------------------------------------------
    def phases(self, phases: list[tuple[Any, ...]], make: Any, spill: bool) -> list[tuple[Any, ...]]:
        """A schedule's phases within the caps: ``phases`` checked, or (``spill``) with the capped sources' shares
        lowered and the rest given to the others by their weights: per epoch, each phase's share at most the cap's
        (water-filled phase by phase); over a budget, the capped source's weights lowered by one factor in every
        phase. ``make`` builds a ``Schedule`` of phases (it checks them first)."""
        found = self.over(make(phases))
        if found is None:
            return phases
        if not spill:
            self.refuse(*found)
        weights = [tuple(Fraction(w) for w in phase[1]) for phase in phases]
        less: dict[int, int] = {}  # per epoch: slots taken off a cap for the chains' rounding
        factors: dict[int, Fraction] = {}  # over a budget: a capped source's factor on its shares
        for _ in range(_TRIES):
            s, have, _ = found
            limit = self.limits[s]
            assert limit is not None
            if self.epochs is None:
                less[s] = less[s] + have - limit if s in less else 0  # over again: by the rounding, take it off
                most = [None if cap is None else Fraction(max(cap - less.get(t, 0), 0), self.n)
                        for t, cap in enumerate(self.limits)]
                spilled = [_filled(shares, most, self._cannot_fill) for shares in weights]
            else:  # its share lowered to its cap, less a row per source for the chains' rounding (again if short)
                factors[s] = factors.get(s, Fraction(1)) * Fraction(max(limit - len(self.lengths), 0), have)
                spilled = [_spilled(shares, factors, self._cannot_fill) for shares in weights]
            current = [(phase[0], spilled[i], *phase[2:]) for i, phase in enumerate(phases)]
            found = self.over(make(current))
            if found is None:
                return current
        raise ValueError(refusal("max_repeats", Plain("caps that spilling does not meet"), "caps a schedule can "
                                 "spill into", _FIX))

    def over(self, schedule: Schedule) -> tuple[int, int, Fraction] | None:
        """The first source over its cap under ``schedule``: (source, its slots, its share), or None."""
        if self.epochs is not None:
            end = self.epochs * self.n
            totals = schedule.counts(end)
            for s, limit in enumerate(self.limits):
                if limit is not None and totals[s] > limit:
                    return s, totals[s], Fraction(totals[s], end)
            return None
        last = schedule.starts[-1] // self.n + 2  # past it every epoch is in the last phase
        epochs = min(last, _MOST_EPOCHS)
        edges = schedule.counts_many(np.arange(epochs + 1, dtype=np.int64) * self.n)
        per_epoch = np.diff(edges, axis=0)
        for s, limit in enumerate(self.limits):
            if limit is None:
                continue
            most = int(per_epoch[:, s].max())
            if last > _MOST_EPOCHS:  # the rest: the phases' largest share, rounded up, bounds an epoch
                most = max(most, max(math.ceil(share[s] * self.n) + len(self.limits) for share in schedule.shares))
            if most > limit:
                return s, most, Fraction(most, self.n)
        return None

    # -- refusals ---------------------------------------------------------------------------------------
    def refuse(self, s: int, have: int, share: Fraction) -> None:
        cap, rows = self.caps[s], self.lengths[s]
        assert cap is not None
        over = ("an epoch" if self.epochs is None else
                f"the budget of {self.budget:,} (to the end of epoch {self.epochs - 1})")
        raise ValueError(refusal(
            f"max_repeats[{s}]", Plain(f"{float(cap):g}"),
            f"a mixture that reads source {s} at most {float(cap):g} times ({self.limits[s]:,} samples) over {over}",
            _FIX, why=f"source {s} has {rows:,} rows and a share of {float(share):.4g}: {have:,} samples over {over}, "
            f"{have / rows:.4g} reads of each row"))

    def _cannot_fill(self, left: int | Fraction) -> None:
        shown = f"{left:,} samples" if isinstance(left, int) else f"a share of {float(left):.4g}"
        raise ValueError(refusal("max_repeats", Plain(f"caps on every source that can take samples, {shown} "
                                                      "still to place"),
                                 "at least one source whose cap leaves room for the rest",
                                 "raise a cap, leave one source uncapped, or lower samples_per_epoch or budget"))


def _spilled(weights: tuple[Fraction, ...], factors: dict[int, Fraction], refuse: Any) -> list[Fraction]:
    """One phase's shares with the capped sources' lowered by their factors and the excess given to the others in
    proportion to their weights."""
    shares = _shares(weights)
    return _filled(weights, [shares[s] * factors[s] if s in factors else None for s in range(len(shares))], refuse)


def _filled(weights: tuple[Fraction, ...], most: list[Fraction | None], refuse: Any) -> list[Fraction]:
    """One phase's shares, none above its ``most``: a source over it gets it, the rest is given to the others in
    proportion to their weights, until none is over (water-filling). ``refuse(left)`` where none can take it."""
    shares = _shares(weights)
    fixed: dict[int, Fraction] = {}
    while True:
        free = [s for s in range(len(shares)) if s not in fixed and shares[s] > 0]
        left = 1 - sum(fixed.values(), Fraction(0))
        weight = sum((shares[s] for s in free), Fraction(0))
        if not free or weight == 0:
            if left > 0:
                refuse(left)
            return [fixed.get(s, Fraction(0)) for s in range(len(shares))]
        found = [fixed[s] if s in fixed else shares[s] * left / weight for s in range(len(shares))]
        over = [s for s in free if most[s] is not None and found[s] > most[s]]  # type: ignore[operator]
        if not over:
            return found
        for s in over:
            fixed[s] = most[s]  # type: ignore[assignment]


def _shares(weights: Sequence[Fraction]) -> list[Fraction]:
    total = sum(weights, Fraction(0))
    return [w / total for w in weights] if total else list(weights)


def apportion(weights: list[float], total: int) -> list[int]:
    """Integers proportional to ``weights`` that sum to ``total`` (largest remainder, ties by index)."""
    scale = sum(weights)
    exact = [w * total / scale for w in weights]
    counts = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(weights)), key=lambda s: (-(exact[s] - counts[s]), s))
    for s in by_remainder[: total - sum(counts)]:
        counts[s] += 1
    return counts

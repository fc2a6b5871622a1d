"""Mixture schedules: a mixture's weights as a pure function of the samples training has consumed.

A schedule is a list of phases ``(start, weights)``. ``start`` counts positions of the run's stream
(``epoch * samples_per_epoch + position``: under the ``strided`` deal, the samples training consumed,
all ranks together, since the run began); the phase holds until the next one starts. ``weights`` are
one per source, any non-negative numbers (a source may pause at 0), read as exact fractions. A
third element ``(start, weights, k)`` ramps linearly to the next phase's weights in k equal steps
(steps that start at ``start + j * length // k`` with weights ``w + (w_next - w) * j / k``; the ramp's
identity holds the phase it ramps to, so once it has begun neither changes).

``counts(g)`` says how many of the first g positions of the run belong to each source. Inside a
phase it grows by a chain of floors (source by source, the largest share last), so every source's
count is non-decreasing at every position and the counts sum to g: any window of positions can be
dealt between the sources by differences of ``counts``, however a phase boundary cuts it. Worked
example, two phases, the second an annealing mix::

    schedule = Schedule([(0, [3, 1]), (8, [1, 1])], sources=2)
    g            0  1  2  3  4  5  6  7  8  9 10 11 12
    phase        0  0  0  0  0  0  0  0  1  1  1  1  1
    counts(g)  [0,0] ... counts(8) = [6, 2]  (3:1 of 8)  counts(12) = [8, 4]  (+2, +2: 1:1 of 4)

Source s's t-th slot of the run reads row t of its own endless stream, so the stream advances by
exactly what the schedule gave it, across epochs, phases and resizes. Each phase's identity (start
and a hash of its weights) is recorded in the state (its ``phases``); a resume may append phases after
the position it reached (``compatible``), never change one that began. Evaluation is O(log phases + sources).

Read in global batches (``Schedule.on_grid``, a ``GridSchedule``): with three sources or more, each holds
its phase's share to within one row at every global batch edge, where a chain of floors (``Schedule``)
leaves up to S - 1 rows to the last source.

At an edge x rows into a phase, the counts are largest remainders (Hamilton's method) of share * x:
every source gets the floor or the ceiling of its exact share, so a window of global batches is within
two rows (measured over random weights: at most 1.4 rows in one global batch, 2.25 with the chain), and
no window can do better than about two for every weight set (Tijdeman's bound on the chairman
assignment problem). Largest remainders only grow from one edge to the next when every source with a
share holds at least one row of each window (share * G >= 1, and share * t >= 1 for an epoch's short
last global batch of t rows); a phase where one does not keeps the chain, which always grows. Two
sources keep the chain too: it is already within one row over any window. The counts always sum to the
rows, so every row of each source's stream is read once, in order.

Words: docs/glossary.md (schedule, phase, grid, mixture, source).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from bisect import bisect_right
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._order.distinct import distinct

_LIMIT = 2**62  # run positions stay int64
_DENOMINATOR = 1 << 32  # weights are read as the nearest fraction with a denominator up to 2**32 (0.7 -> 7/10)
_ONE_EACH = "give every phase one weight per source, in the order of sources (0 pauses a source)"


def _weights(found: object, sources: int, where: str) -> tuple[Fraction, ...]:
    if isinstance(found, (str, bytes)) or not isinstance(found, Sequence):
        raise TypeError(refusal(where, found, f"a list of {sources} weights, one per source", _ONE_EACH))
    if len(found) != sources:
        raise ValueError(refusal(where, Plain(f"{len(found)} weight(s)"), f"{sources}, one per source", _ONE_EACH))
    checked = []
    for number, weight in enumerate(found):
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) \
                or weight < 0:
            raise ValueError(refusal(f"{where}[{number}]", weight, "a finite number >= 0",
                                     "give each source a weight >= 0 (0 pauses it)"))
        near = Fraction(float(weight)).limit_denominator(_DENOMINATOR)
        checked.append(near if near or not weight else Fraction(float(weight)))  # a tiny weight stays > 0
    total = sum(checked, Fraction(0))
    if total == 0:
        raise ValueError(refusal(where, Plain(f"{list(found)!r}, all 0"), "at least one weight > 0",
                                 "give at least one source a weight > 0"))
    return tuple(weight / total for weight in checked)


def _chain(shares: tuple[Fraction, ...]) -> tuple[tuple[tuple[int, int, int], ...], int]:
    """((source, numerator, denominator) of each source's share of what is left, ...), the last source."""
    present = [s for s, share in enumerate(shares) if share > 0]
    last = max(present, key=lambda s: (shares[s], -s))
    left, links = Fraction(1), []
    for s in present:
        if s != last:
            part = shares[s] / left
            links.append((s, part.numerator, part.denominator))
            left -= shares[s]
    return tuple(links), last


class Schedule:
    """A validated schedule: ``phases`` as ``(start, weights)``, ``unit`` the stream units per position
    (``Packed`` sources: ``seq_len`` tokens per row; a start in tokens begins at the row holding it,
    rounded up so that no row is split between phases)."""

    def __init__(self, phases: object, sources: int, *, unit: int = 1) -> None:
        if isinstance(phases, (str, bytes)) or not isinstance(phases, Sequence) or not phases:
            raise TypeError(refusal("schedule", phases, "a non-empty list of (start, weights) phases",
                                    "pass schedule=[(0, [wa, wb]), ...]"))
        self.sources = sources
        starts: list[int] = []
        shares: list[tuple[Fraction, ...]] = []
        ramps: list[int] = []
        for number, phase in enumerate(phases):
            if isinstance(phase, (str, bytes)) or not isinstance(phase, Sequence) or len(phase) not in (2, 3):
                raise TypeError(refusal(f"schedule[{number}]", phase, "a (start, weights) pair or a (start, "
                                        "weights, ramp steps) triple", "write the phase as (start, weights)"))
            start, weights, *ramp = phase
            if isinstance(start, bool) or not isinstance(start, numbers.Integral) or not 0 <= int(start) < _LIMIT:
                raise ValueError(refusal(f"schedule[{number}] start", start, "an int in [0, 2**62)",
                                         "start the phase at a run position in that range"))
            start = int(start)
            row = -(-start // unit)
            if number == 0 and start != 0:
                raise ValueError(refusal("schedule[0] start", start, "0", "put the weights the run begins with "
                                         "first, as (0, weights)", why="the first phase starts the run"))
            if starts and row <= starts[-1]:
                raise ValueError(refusal(
                    f"schedule[{number}] start", Plain(f"{start} after schedule[{number - 1}] start "
                                                       f"{phases[number - 1][0]}"),
                    "a later start (phases go in order, one per position"
                    + (f"; {unit} tokens make a row" if unit > 1 else "") + ")",
                    "sort the phases by start and merge phases that start together"))
            starts.append(row)
            shares.append(_weights(weights, sources, f"schedule[{number}] weights"))
            ramps.append(_ramp_steps(ramp, number, len(phases)))
        self._phases = list(zip(starts, shares, ramps, strict=True))  # as the user wrote them (in rows)
        self.starts, self.shares, self._origins = _expand(starts, shares, ramps)
        self._finish()

    def _finish(self) -> None:
        self._chains = [_chain(shares) for shares in self.shares]
        self._before = [[0] * self.sources]  # counts at each phase's start
        for i in range(1, len(self.starts)):
            self._before.append(self._within(i - 1, self.starts[i] - self.starts[i - 1]))

    def name(self, phase: int) -> str:
        """How the user wrote phase ``phase`` of ``starts``: ``schedule[i]``, or a step of its ramp."""
        number = self._origins[phase]
        step = phase - self._origins.index(number)
        return f"schedule[{number}]" + (f" (ramp step {step})" if step else "")

    def _within(self, phase: int, x: int) -> list[int]:
        """counts at the phase's start plus the phase's own first x positions, source by source."""
        return [a + b for a, b in zip(self._before[phase], self._chained(phase, x), strict=True)]

    def _chained(self, phase: int, x: Any) -> list[Any]:
        """The phase's first x positions, source by source, by its chain of floors (x an int, or a numpy
        array of Python ints: the same exact arithmetic, element by element)."""
        counts: list[Any] = [0] * self.sources
        links, last = self._chains[phase]
        rest = x
        for s, numerator, denominator in links:
            taken = rest * numerator // denominator
            counts[s] = counts[s] + taken
            rest = rest - taken
        counts[last] = counts[last] + rest
        return counts

    def _increments(self, phase: int, x: np.ndarray) -> list[Any]:
        """``_within`` less the phase's start, for an array of x (Python ints): one array per source."""
        return self._chained(phase, x)

    def counts_many(self, g: np.ndarray) -> np.ndarray:
        """``counts(g)`` for an array of run positions: an int64 array (positions x sources), exact."""
        g = np.asarray(g, dtype=np.int64).reshape(-1)
        found = np.empty((g.size, self.sources), dtype=np.int64)
        phases = np.searchsorted(np.asarray(self.starts, dtype=np.int64), g, side="right") - 1
        for i in distinct(phases).tolist():
            where = phases == i
            x = (g[where] - self.starts[i]).astype(object)
            found[where] = np.asarray(self._before[i], dtype=np.int64) + np.stack(
                [np.asarray(column, dtype=object) * np.ones(x.size, dtype=object) for column in
                 self._increments(i, x)], axis=1).astype(np.int64)
        return found

    def phase(self, g: int) -> int:
        """The phase position g of the run belongs to (O(log phases))."""
        return bisect_right(self.starts, g) - 1

    def counts(self, g: int) -> list[int]:
        """How many of the run's first g positions belong to each source."""
        i = self.phase(g)
        return self._within(i, g - self.starts[i])

    def on_grid(self, grid: int, samples_per_epoch: int) -> Schedule:
        """This schedule as a loader reads it in global batches of ``grid`` positions: each (ramp step of a)
        phase starts at the first global batch edge at or after its start (edges: ``e * samples_per_epoch +
        k * grid``, and every epoch's end), so a global batch follows the phase of its first sample. Steps
        that round to one edge leave the last of them (the one the batch after the edge is in)."""
        found = object.__new__(GridSchedule)
        found.sources, found._phases = self.sources, self._phases
        found.grid, found.samples_per_epoch = grid, samples_per_epoch
        rounded: dict[int, int] = {}
        for i, start in enumerate(self.starts):
            rounded[on_edge(start, grid, samples_per_epoch)] = i  # a later step at the same edge wins
        kept = sorted(rounded.items())
        found.starts = [start for start, _ in kept]
        found.shares = [self.shares[i] for _, i in kept]
        found._origins = [self._origins[i] for _, i in kept]
        found._finish()
        return found

    def chained(self) -> Schedule:
        """This schedule's phases counted by their chains of floors alone (a ``GridSchedule``'s edges kept, its
        largest remainders not): every source's count then grows by at most one per position, anywhere."""
        found = object.__new__(Schedule)
        found.sources, found._phases = self.sources, self._phases
        found.starts, found.shares, found._origins = list(self.starts), list(self.shares), list(self._origins)
        found._finish()
        return found

    def appended(self, start: int, weights: object, where: str = "weights", *, replace: bool = False) -> Schedule:
        """This schedule with one more phase, ``(start, weights)``, after its last (a weight change made while the
        run trains, ``Mixture.set_weights``): ``start`` in positions, after the last phase's start. Every count
        before ``start`` is unchanged, so what was read before it is read the same. Nothing changes here."""
        return self.with_shares(start, _weights(weights, self.sources, where), where, replace=replace)

    def with_shares(self, start: object, shares: tuple[Fraction, ...], where: str = "weights", *,
                    replace: bool = False) -> Schedule:
        """``appended`` with the phase's exact shares (a state's live phase, ``parse_shares``); ``replace``: a
        last phase that starts at ``start`` is replaced (a live phase nothing was read of yet)."""
        kept = self._phases[:-1] if replace and len(self._phases) > 1 and self._phases[-1][0] == start else \
            self._phases
        last = kept[-1][0]
        if isinstance(start, bool) or not isinstance(start, numbers.Integral) or not last < int(start) < _LIMIT:
            raise ValueError(refusal(f"{where} start", start, f"a run position after the last phase's start ({last})",
                                     "change the weights from a later position",
                                     why="a phase that began is never rewritten"))
        found = object.__new__(Schedule)
        found.sources, found._phases = self.sources, [*kept, (int(start), shares, 1)]
        found.starts, found.shares, found._origins = _expand(*(list(column) for column in zip(*found._phases,
                                                                                                strict=True)))
        found._finish()
        return found

    def first(self, count: int) -> Schedule:
        """This schedule's first ``count`` phases as written (a Mixture's own, its live phases dropped)."""
        found = object.__new__(Schedule)
        found.sources, found._phases = self.sources, self._phases[:count]
        found.starts, found.shares, found._origins = _expand(*(list(column) for column in zip(*found._phases,
                                                                                                strict=True)))
        found._finish()
        return found

    def identities(self) -> list[tuple[int, str]]:
        """One ``(start, hash)`` per phase as written (start in positions; the hash of its exact shares, and for
        a ramp its steps and the next phase it ramps to): a few bytes per phase, however many steps."""
        found = []
        for i, (start, shares, steps) in enumerate(self._phases):
            parts = [[str(f) for f in shares], steps]
            if steps > 1:
                parts += [self._phases[i + 1][0], [str(f) for f in self._phases[i + 1][1]]]
            found.append((start, hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]))
        return found


def of_counts(counts: Sequence[int]) -> Schedule:
    """One phase from 0 whose shares are exactly ``counts / sum(counts)`` (no weight read as a float): a
    ``Mixture`` built without a schedule, as a loader reads it on its grid. Its chain of floors, and its largest
    remainders, give exactly ``e * counts`` at the end of every epoch e of ``sum(counts)`` positions.

    >>> of_counts([6, 2]).counts(24)
    [18, 6]
    """
    total = sum(counts)
    found = object.__new__(Schedule)
    found.sources, found._phases = len(counts), [(0, tuple(Fraction(int(c), total) for c in counts), 1)]
    found.starts, found.shares, found._origins = _expand(*(list(column) for column in zip(*found._phases,
                                                                                            strict=True)))
    found._finish()
    return found


def shares_text(shares: Sequence[Fraction]) -> list[str]:
    """Exact shares as a state keeps a live phase's weights: ``["3/4", "1/4"]`` (``parse_shares`` reads them)."""
    return [str(share) for share in shares]


def parse_shares(found: object, sources: int) -> tuple[Fraction, ...] | None:
    """A state's live phase weights (``shares_text``) as exact shares, or None where they are not ``sources``
    fractions >= 0 that sum to 1."""
    if not isinstance(found, list) or len(found) != sources or not all(isinstance(x, str) for x in found):
        return None
    try:
        shares = tuple(Fraction(x) for x in found)
    except (ValueError, ZeroDivisionError):
        return None
    return shares if all(x >= 0 for x in shares) and sum(shares) == 1 else None


def largest_remainder(shares: tuple[Fraction, ...], total: Any) -> list[Any]:
    """Integers near ``share * total`` that sum to ``total``: the floors, then one more for the largest
    remainders (ties by source). Each is the floor or the ceiling of its exact share. ``total`` an int,
    or a numpy array of Python ints (one array per source comes back).

    >>> largest_remainder((Fraction(6, 10), Fraction(3, 10), Fraction(1, 10)), 8)
    [5, 2, 1]
    """
    common = math.lcm(*(share.denominator for share in shares))
    parts = [share.numerator * (common // share.denominator) for share in shares]  # share = part / common
    floors = [total * part // common for part in parts]
    remainders = [total * part % common for part in parts]
    if not isinstance(total, np.ndarray):
        by_remainder = sorted(range(len(shares)), key=lambda s: (-remainders[s], s))
        for s in by_remainder[: total - sum(floors)]:
            floors[s] += 1
        return floors
    left = (total - sum(floors)).astype(np.int64)  # < sources
    order = np.argsort(-np.stack(remainders, axis=1).astype(object), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(len(shares))[None, :].repeat(len(total), axis=0), axis=1)
    return [floors[s] + (rank[:, s] < left) for s in range(len(shares))]


class GridSchedule(Schedule):
    """A ``Schedule`` on the edges of global batches of ``grid`` rows (phases start on them)."""

    grid: int
    samples_per_epoch: int

    def _steady(self, phase: int) -> bool:
        """Whether largest remainders only grow from one window edge to the next in this phase: three
        sources or more (two are within one row by the chain already), each with a share holding at least
        one row of a global batch and of an epoch's short last one."""
        sizes = [self.grid] + ([self.samples_per_epoch % self.grid] if self.samples_per_epoch % self.grid else [])
        shares = self.shares[phase]
        return sum(1 for share in shares if share) > 2 and all(
            share == 0 or share * size >= 1 for share in shares for size in sizes)

    def _within(self, phase: int, x: int) -> list[int]:
        return [b + c for b, c in zip(self._before[phase], self._increments(phase, x), strict=True)]

    def _increments(self, phase: int, x: Any) -> list[Any]:
        return largest_remainder(self.shares[phase], x) if self._steady(phase) else self._chained(phase, x)


def _ramp_steps(ramp: list[object], number: int, phases: int) -> int:
    if not ramp:
        return 1
    steps = ramp[0]
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or int(steps) < 1:
        raise ValueError(refusal(f"schedule[{number}] ramp steps", steps, "an int >= 1",
                                 "give the ramp 1 or more steps"))
    if number == phases - 1 and int(steps) > 1:
        raise ValueError(refusal(f"schedule[{number}] ramp steps", steps, "1 on the last phase",
                                 "add the phase the ramp ends at, or drop the third element",
                                 why="the last phase has no next phase to ramp to"))
    return int(steps)


def _expand(starts: list[int], shares: list[tuple[Fraction, ...]],
            ramps: list[int]) -> tuple[list[int], list[tuple[Fraction, ...]], list[int]]:
    """Phases with ramps as steps: ``(start, weights, k)`` goes linearly, in k equal steps of positions,
    from its weights to the next phase's (exact fractions); (starts, shares, the written phase of each)."""
    out_starts, out_shares, origins = [], [], []
    for i, (start, share, steps) in enumerate(zip(starts, shares, ramps, strict=True)):
        if steps > 1 and starts[i + 1] - start < steps:
            raise ValueError(refusal(f"schedule[{i}] ramp steps", steps, f"at most {starts[i + 1] - start}, the "
                                     "positions to the next phase", "use fewer steps"))
        for j in range(steps):
            out_starts.append(start + j * (starts[i + 1] - start) // steps if j else start)
            out_shares.append(tuple(a + (b - a) * j / steps for a, b in zip(share, shares[i + 1], strict=True))
                              if j else share)
            origins.append(i)
    return out_starts, out_shares, origins


def unweighted(sources: object) -> list[object]:
    """The sources of a scheduled ``Mixture``, given alone: its weights are the schedule's."""
    if not isinstance(sources, Sequence) or isinstance(sources, (str, bytes)) or not sources:
        raise TypeError(refusal("sources", sources, "a non-empty list of datasets", "pass the datasets to mix"))
    for number, dataset in enumerate(sources):
        if isinstance(dataset, tuple) and len(dataset) == 2 and isinstance(dataset[1], (int, float)):
            raise TypeError(refusal(f"sources[{number}]", Plain("a (dataset, weight) pair"), "a dataset alone",
                                    "pass the datasets alone, Mixture([a, b], schedule=[(0, [wa, wb]), ...])",
                                    why="with a schedule the weights are the schedule's"))
    return list(sources)


def on_edge(g: int, grid: int, samples_per_epoch: int) -> int:
    """The first global batch edge at or after run position g: ``e * samples_per_epoch + k * grid``, or
    the next epoch's start where the epoch's last (short) global batch holds g."""
    epoch, position = divmod(g, samples_per_epoch)
    up = -(-position // grid) * grid
    return epoch * samples_per_epoch + up if up < samples_per_epoch else (epoch + 1) * samples_per_epoch


def windows(samples_per_epoch: int, window: int, grid: bool) -> int:
    """The windows of an epoch: global batches (``grid``: the last one short), or ``shuffle_block`` windows
    (the last one takes the remainder)."""
    return -(-samples_per_epoch // window) if grid else max(1, samples_per_epoch // window)


def reached(samples_per_epoch: int, window: int, epoch: int, cursor: int, grid: bool = False) -> int:
    """The run position up to which a state at (epoch, cursor) fixed the order: the cursor, or the end of
    the window it is inside (that window's pieces were already dealt). A resume may append phases there."""
    count = windows(samples_per_epoch, window, grid)
    k = min(cursor // window, count - 1)
    if cursor == k * window:
        return epoch * samples_per_epoch + cursor
    return epoch * samples_per_epoch + (samples_per_epoch if k == count - 1 else (k + 1) * window)


def changed_phase(saved: Sequence[Sequence[Any]], current: Sequence[tuple[int, str]], samples_per_epoch: int,
                  shuffle_block: int, epoch: int, cursor: int, grid: int | None, laid: bool = False) -> int | None:
    """The first of a state's ``saved`` phases (``[start, hash]``) that the ``current`` schedule changed before
    the position a state at (epoch, cursor) had fixed (the end of its window: the global batch of ``grid``
    rows under a loader, the ``shuffle_block`` window otherwise; ``laid``, an order that lays out each epoch's
    rows of its sources when the epoch begins, ``mixture/stretches.py``: the end of an epoch begun), or None:
    phases appended after it resume."""
    if laid and cursor:
        past = (epoch + 1) * samples_per_epoch
    else:
        past = reached(samples_per_epoch, grid or shuffle_block, epoch, cursor, grid is not None)
    return compatible([(int(phase[0]), str(phase[1])) for phase in saved],  # a live phase's weights: its hash
                      [(int(phase[0]), str(phase[1])) for phase in current], past)


def compatible(saved: list[tuple[int, str]], current: list[tuple[int, str]], reached: int) -> int | None:
    """None when ``current`` keeps every phase of ``saved`` that starts before ``reached`` (and adds none
    there), else the number of the first phase that differs: a resume may append, never rewrite."""
    past_saved = [p for p in saved if p[0] < reached]
    past_current = [p for p in current if p[0] < reached]
    if past_saved == past_current:
        return None
    return next((i for i, (a, b) in enumerate(zip(past_saved, past_current, strict=False)) if a != b),
                min(len(past_saved), len(past_current)))


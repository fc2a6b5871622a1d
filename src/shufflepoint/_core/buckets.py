"""Buckets as arithmetic: every per-rank batch holds samples of one bucket (``DataLoader(buckets=keys)``).

Diffusion and vision training batch images of one aspect ratio (or resolution, or clip length)
together. Here that is one more seekable function of a few integers, like the rest of the order.

Vocabulary (all integers)::

    keys       one small int >= 0 per sample; a *bucket* is the samples of one key value (K buckets)
    bucket k   its members in index order, n_k of them; its *stream* in epoch e is its members
               in a seekable permutation of its own (the loader's order, keyed by seed and bucket)
    unit       B consecutive samples of one bucket's stream: one per-rank batch
    segment    a stretch of the epoch read at one batch size B: it cuts what is left of every bucket
               (r_k samples) into u_k units (r_k // B, or ceil(r_k / B) padded: the tail), U = sum(u_k), into
               *slots* ordered by the interleave (below); ``[B, slots taken]`` pairs are the epoch's segments
    step       W ranks take the next W slots: rank r takes slot s + r (s: slots taken so far)

The interleave: bucket k's j-th unit of a segment gets the time ``(j + h) / u_k``, h a keyed jitter in
[0, 1) of (seed, epoch, segment, k, j); the slots are the units sorted by (time, k, j). So each
bucket's units are spread evenly over the segment, each at a random place inside its own 1/u_k of it
(stratified: never all of bucket 0 first), and they are read in their own order (j = 0, 1, ...), so
what an epoch has read of each bucket is a *prefix* of its stream: the segments alone say how much
(``consumed``). Slot g is found in O(K + g1 - g0) for a range of slots [g0, g1): the units with a time
below a threshold t are counted per bucket exactly, around ``floor(t * u_k)`` (``_Interleave``). Two
ranks, B = 2, buckets a (6 samples) and b (2 samples): u = (3, 1), U = 4 slots, e.g.::

    slots      : a0 b0 | a1 a2            (a0 = bucket a's unit 0: its stream's samples 0, 1)
    rank 0     : a0      a1               step 0: rank 0 a batch of a, rank 1 a batch of b
    rank 1     : b0      a2

What a resize does: another W reads on from the same slot (the segment goes on); another B begins a
new segment over what is left of every bucket. Either way each sample is read once an epoch (padding
aside, below).

The tail, per epoch, as ``drop_last`` says (D, the layout's):

- ``drop_last=False`` (the default): nothing is dropped. A segment cuts bucket k's r_k samples into
  u_k = ceil(r_k / B) units; the last one, short of ``B - r_k % B`` samples, is filled with the first
  samples of the same segment's part of that bucket's stream (as ``DistributedSampler`` pads: unit j's
  i-th sample is the stream's ``(j * B + i) mod r_k``-th of the segment), so every batch stays full and
  one bucket. The last step's ranks past the segment's last slot U read the segment's slots again from
  its first (slot g >= U reads slot ``(g - U) mod U``): every rank reads ceil((U - s) / W) batches. An epoch
  repeats at most ``B - 1`` samples of each bucket per segment and ``(W - 1) * B`` at its last step.
- ``drop_last=True``: u_k = r_k // B; the ``r_k % B`` samples of each bucket that fill no batch and the
  ``(U - s) % W`` units that fill no step are dropped, at most ``K * (B - 1) + (W - 1) * B`` samples an
  epoch (B and W those of the epoch's end); the dropped samples differ from epoch to epoch.

A segment's meaning depends on D, so D changes only where an epoch begins (``BucketDeal``). Keys
fingerprinted ``v1`` (before padding) were read dropping whatever D said: ``older_states`` reads such a
state as ``drop_last=True``.

Words: docs/glossary.md (bucket, bucket key, bucket unit, bucket segment, slot, bucket padding, tail).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence, Sized
from typing import Any

import numpy as np

from shufflepoint._core.cut import rank_rows
from shufflepoint._core.segments import BucketSegments
from shufflepoint._errors import DAMAGED, Plain, Refused, refusal
from shufflepoint._order import Order, check_int, make_order
from shufflepoint._order.feistel import _base_key, _splitmix64

NAME = "buckets"  # the deal's name in a state
VERSION = 2  # of the interleave, the tail and the bucket streams' seeds: in the keys' fingerprint (v1: no padding)
MAX_KEY = 2**31 - 1  # keys are small ints: an aspect-ratio or a length bucket's number
MAX_UNITS = 2**36  # units of one bucket in a segment: j + h stays exact in a float64 (36 + 16 bits)
MAX_SEGMENTS = 64  # batch-size changes inside one epoch; a state with more is refused as damaged
_JITTER_BITS = 16
_DOMAIN = 0x4255434B45545321  # b"BUCKETS!": the interleave's keys are no order's
_MAX_WINDOW = 1 << 18  # slots sorted at once by a rank's read
_WINDOW = 3  # count_below looks at units floor(t * u) - 3 .. + 3


def check_keys(keys: object, n: int) -> np.ndarray:
    """``keys`` as an int64 array of ``n`` values in [0, 2**31); ValueError/TypeError naming ``buckets``."""
    expected = f"one int in [0, {MAX_KEY}] per sample: a sequence or 1-D integer array of length {n}"
    if isinstance(keys, (str, bytes, dict)) or not isinstance(keys, Sized):
        raise TypeError(refusal("buckets", Plain(type(keys).__name__), expected,
                                "pass a list or numpy array of bucket numbers, one per sample"))
    try:
        found = np.asarray(keys)
    except (ValueError, TypeError) as error:
        raise TypeError(refusal("buckets", Plain(type(keys).__name__), expected, "pass a flat list of ints",
                                why=str(error))) from None
    if found.ndim != 1 or len(found) != n:
        raise ValueError(refusal("buckets", Plain(f"shape {found.shape}"), expected,
                                 "pass exactly one key per sample of the dataset (len(dataset) of them)"))
    if found.dtype == np.bool_ or not (np.issubdtype(found.dtype, np.integer) or found.size == 0):
        raise TypeError(refusal("buckets", Plain(f"dtype {found.dtype}"), expected,
                                "map each sample's bucket to an int, e.g. np.asarray(keys).astype(np.int64) "
                                "after checking it holds whole numbers, or np.unique(values, "
                                "return_inverse=True)[1]"))
    found = found.astype(np.int64, copy=False)
    if found.size and (found.min() < 0 or found.max() > MAX_KEY):
        bad = int(np.flatnonzero((found < 0) | (found > MAX_KEY))[0])
        raise ValueError(refusal("buckets", Plain(f"key {int(found[bad])} at sample {bad}"), expected,
                                 "number the buckets from 0, e.g. np.unique(values, return_inverse=True)[1]"))
    return found


class BucketTable:
    """The buckets of a dataset, sorted once: their sizes, members and the keys' fingerprint.

    >>> table = BucketTable([1, 0, 1, 1, 0, 5])
    >>> table.labels.tolist(), table.sizes.tolist(), table.members.tolist()
    ([0, 1, 5], [2, 3, 1], [1, 4, 0, 2, 3, 5])
    """

    def __init__(self, keys: object, n: int | None = None) -> None:
        values = check_keys(keys, len(keys) if n is None else n)  # type: ignore[arg-type]
        self.n = len(values)
        self.members = np.argsort(values, kind="stable").astype(np.int64)  # bucket by bucket, index order inside
        ordered = values[self.members]  # one sort gives the members, the labels and the sizes
        firsts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if self.n else np.zeros(0, int)
        self.labels = ordered[firsts]
        self.starts = np.concatenate([firsts, [self.n]]).astype(np.int64)  # bucket k: members[starts[k]:starts[k+1]]
        self.sizes = np.diff(self.starts)
        digest = hashlib.sha256(f"n={self.n}".encode())
        digest.update(values.tobytes())
        self.fingerprint = f"buckets:v{VERSION}:{len(self.sizes)}:{digest.hexdigest()[:16]}"

    def __len__(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        return f"BucketTable({len(self.sizes)} buckets of {self.n} samples, {self.fingerprint})"


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array (wrapping arithmetic)."""
    values = values + np.uint64(0x9E3779B97F4A7C15)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.asarray(values ^ (values >> np.uint64(31)))


def segment_key(seed: int, epoch: int, segment: int) -> int:
    """The interleave's key for one segment of one epoch."""
    return _splitmix64(_base_key(seed, epoch) ^ _DOMAIN ^ ((segment + 1) * 0x9E3779B97F4A7C15 & (2**64 - 1)))


class _Interleave:
    """One segment's slots: the units of every bucket sorted by (time, bucket, unit) (module docstring)."""

    def __init__(self, remaining: np.ndarray, batch_size: int, key: int, pad: bool = False) -> None:
        self.units = -(-remaining // batch_size) if pad else remaining // batch_size  # pad: the last unit filled
        if self.units.size and int(self.units.max()) > MAX_UNITS:
            raise Refused("buckets", Plain(f"{int(self.units.max())} batches in one bucket"),
                          f"at most {MAX_UNITS} batches of a bucket in an epoch", "use a larger batch_size")
        self.total = int(self.units.sum())
        self._key = np.uint64(key)
        self._live = np.flatnonzero(self.units > 0)
        self._scale = self.units.astype(np.float64)

    def times(self, buckets: np.ndarray, units: np.ndarray) -> np.ndarray:
        """Each unit's time, (j + h) / u_k: exact up to the one rounding of the division."""
        keyed = _mix(self._key ^ _mix(buckets.astype(np.uint64) * np.uint64(0x100000001B3) ^ units.astype(np.uint64)))
        jitter = (keyed >> np.uint64(64 - _JITTER_BITS)).astype(np.float64) / float(1 << _JITTER_BITS)
        return np.asarray((units.astype(np.float64) + jitter) / self._scale[buckets])

    def count_below(self, threshold: float) -> np.ndarray:
        """Per bucket, its units whose time is below ``threshold``: exact, O(K)."""
        counts = np.zeros(len(self.units), np.int64)
        if threshold == -np.inf:
            return counts
        if threshold == np.inf:
            return np.asarray(self.units.copy())
        live = self._live
        guess = np.floor(threshold * self._scale[live]).astype(np.int64)
        low = np.clip(guess - _WINDOW, 0, self.units[live])  # every unit below low is surely below the threshold
        near = low[:, None] + np.arange(2 * _WINDOW + 1)[None, :]
        inside = near < self.units[live][:, None]
        buckets = np.broadcast_to(live[:, None], near.shape)
        below = np.zeros(near.shape, bool)
        below[inside] = self.times(buckets[inside], near[inside]) < threshold
        counts[live] = low + below.sum(axis=1)
        return counts

    def window(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(units of each bucket before the window, the window's buckets, its units), the window sorted by
        (time, bucket, unit) and covering slots [first, stop): O(K + stop - first)."""
        spread = len(self._live) + 2
        while True:
            low = (first - spread) / self.total if first - spread > 0 else -np.inf
            high = (stop + 2 * spread) / self.total if stop + 2 * spread < self.total else np.inf
            before, until = self.count_below(low), self.count_below(high)
            if int(before.sum()) <= first and int(until.sum()) >= stop:
                break
            spread *= 2  # never needed by the bounds (docs), kept so that a rounding surprise costs time only
        sizes = until - before
        buckets = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        units = np.repeat(before, sizes) + offsets
        order = np.lexsort((units, buckets, self.times(buckets, units)))
        return before, buckets[order], units[order]

    def slots(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, unit) of slots first..stop-1."""
        before, buckets, units = self.window(first, stop)
        skip = first - int(before.sum())
        return buckets[skip:skip + stop - first], units[skip:skip + stop - first]

    def taken(self, slots: int) -> np.ndarray:
        """Per bucket, its units among the first ``slots`` slots."""
        if slots >= self.total:
            return np.asarray(self.units.copy())
        before, buckets, _ = self.window(slots, slots)
        return before + np.bincount(buckets[:slots - int(before.sum())], minlength=len(self.units))


def check_segments(n: int, segments: object) -> BucketSegments:
    """An epoch's ``[batch_size, slots]`` pairs, well formed (Refused naming the pair); whether the slots were
    there to take is the cut's check (it needs the keys). Every slot holds a sample not read before in the
    epoch (a padded unit too), so there are at most n slots in all."""
    if not isinstance(segments, list) or len(segments) > MAX_SEGMENTS:
        raise Refused("segments", segments, f"at most {MAX_SEGMENTS} [batch_size, slots] pairs (deal 'buckets')",
                      DAMAGED)
    total = 0
    for number, pair in enumerate(segments):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                  for v in pair)
                and 1 <= pair[0] <= 2**31 and 1 <= pair[1] <= n):
            raise Refused(f"segments[{number}]", pair, "a [batch_size, slots] pair, 1 <= batch_size <= 2**31, "
                          f"1 <= slots <= n={n}", DAMAGED)
        total += pair[1]
    if total > n:
        raise Refused("segments", segments, f"at most n={n} slots in all (each holds a sample read once)", DAMAGED)
    return BucketSegments(segments)


class BucketCut:
    """The rest of one epoch under ``buckets`` for a world of ``world_size`` ranks reading ``batch_size``
    (a ``Cut``, ``_core/cut.py``): ``segments`` say what the epoch read so far, ``drop_last`` its tail
    (module docstring: False pads each bucket's last unit and the last step, True drops them)."""

    stretches = None  # the bucket order is laid along no stretches

    def __init__(self, table: BucketTable, seed: int, epoch: int, world_size: int, batch_size: int,
                 segments: Sequence[Sequence[int]], drop_last: bool = True) -> None:
        self.table, self.seed, self.epoch = table, seed, epoch
        self._world, self._batch, self.drop_last = world_size, batch_size, bool(drop_last)
        self.segments = BucketSegments(segments)
        consumed = np.zeros(len(table), np.int64)
        goes_on = bool(self.segments) and self.segments[-1][0] == batch_size
        finished = self.segments[:-1] if goes_on else self.segments
        for number, (size, slots) in enumerate(finished):
            left = table.sizes - consumed
            consumed += np.minimum(size * self._segment(number, size, consumed, slots).taken(slots), left)
        self.consumed = consumed  # of each bucket's stream, before the current segment
        self._left = table.sizes - consumed  # r_k: what the current segment cuts into units
        self.slot = self.segments[-1][1] if goes_on else 0  # slots the current segment has handed out
        self._interleave = self._segment(len(finished), batch_size, consumed, self.slot)
        self._kept = BucketSegments(self.segments[:-1]) if goes_on else self.segments
        if not goes_on and len(self.segments) >= MAX_SEGMENTS and self.samples_per_rank():
            # LIMIT(buckets-batch-sizes-per-epoch): docs/buckets.md#limits
            raise ValueError(refusal("batch_size", batch_size, f"at most {MAX_SEGMENTS} batch sizes in one epoch "
                                     f"(epoch {epoch} was read at {len(self.segments)})", "finish the epoch at "
                                     f"batch_size={self.segments[-1][0]} and change it after"))

    def _segment(self, number: int, size: int, consumed: np.ndarray, slots: int) -> _Interleave:
        interleave = _Interleave(self.table.sizes - consumed, size, segment_key(self.seed, self.epoch, number),
                                 pad=not self.drop_last)
        if slots > interleave.total:
            raise Refused(f"segments[{number}]", [size, slots], f"at most {interleave.total} slots: the batches of "
                          f"{size} that the keys' buckets hold then", DAMAGED)
        return interleave

    @property
    def world_size(self) -> int:
        return self._world

    def _steps(self) -> int:
        """Steps left: every rank reads this many batches (the last step padded, or dropped, as D says)."""
        left = max(self._interleave.total - self.slot, 0)
        return left // self._world if self.drop_last else -(-left // self._world)

    def samples_per_rank(self) -> int:
        return self._batch * self._steps()

    def real_samples(self, rank: int) -> int:
        """All but a rank's last batch where that one re-reads a slot (the last step's padding): a padded unit
        of a bucket is no tail padding (it sits anywhere in the epoch)."""
        steps = self._steps()
        repeats = steps > 0 and self.slot + (steps - 1) * self._world + rank >= self._interleave.total
        return self._batch * (steps - int(repeats))

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Positions (``BucketOrder``'s: bucket k's stream at starts[k]..) of ``rank``'s samples start..stop-1."""
        stop = min(stop, self.samples_per_rank())
        if stop <= start:
            return np.zeros(0, np.int64)
        size = self._batch
        first, last = start // size, (stop - 1) // size
        buckets, units = self._batches(rank, first, last + 1)
        samples = np.arange(start, stop, dtype=np.int64)
        batch = samples // size - first
        chosen = buckets[batch]
        inside = (units[batch] * size + samples % size) % self._left[chosen]  # a padded unit wraps to its first
        return np.asarray(self.table.starts[chosen] + self.consumed[chosen] + inside)

    def _batches(self, rank: int, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, unit) of ``rank``'s batches first..stop-1: the slots between are sorted too, so a wide world
        is read in pieces of at most ``_MAX_WINDOW`` slots (bounded memory, the same time)."""
        world, pieces = self._world, []
        step = max(1, _MAX_WINDOW // world)
        for low in range(first, stop, step):
            high = min(low + step, stop)
            buckets, units = self._slots(self.slot + low * world, self.slot + high * world)
            mine = np.arange(high - low, dtype=np.int64) * world + rank
            pieces.append((buckets[mine], units[mine]))
        return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])

    def _slots(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(bucket, unit) of the current segment's slots first..stop-1; a slot g past the last, U, is the
        last step's padding and reads slot (g - U) mod U again (fewer than W of them)."""
        total = self._interleave.total
        buckets, units = self._interleave.slots(min(first, total), min(stop, total))
        if stop <= total or total == 0:
            return buckets, units
        again = (np.arange(max(first, total), stop, dtype=np.int64) - total) % total
        head_buckets, head_units = self._interleave.slots(0, int(again.max()) + 1)
        return np.concatenate([buckets, head_buckets[again]]), np.concatenate([units, head_units[again]])

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank, one row a rank (``which``)."""
        return rank_rows(self, start, stop)

    def after(self, received: int) -> tuple[int, BucketSegments]:
        """(cursor, segments) once every rank has received ``received`` more samples."""
        batches = min(received, self.samples_per_rank()) // self._batch
        slots = min(self.slot + batches * self._world, self._interleave.total)  # the last step's padding: none left
        segments = BucketSegments((*self._kept, *([(self._batch, slots)] if slots else [])))
        return segments.cursor_of(self.table.n), segments

    def bucket_of_slots(self, first: int, stop: int) -> np.ndarray:
        """The bucket label of the current segment's slots first..stop-1 (what ``which`` shows of a step)."""
        return np.asarray(self.table.labels[self._slots(self.slot + first, self.slot + stop)[0]])


def bucket_seed(seed: int, bucket: int) -> int:
    """Bucket ``bucket``'s own seed: equal-sized buckets get unrelated streams."""
    return _splitmix64(_splitmix64(seed) ^ _DOMAIN ^ (bucket * 0xD1B54A32D192ED03 & (2**64 - 1)))


class BucketOrder:
    """Epoch ``epoch``'s bucket streams side by side: position starts[k] + i is bucket k's i-th sample, its
    stream a ``name`` order of n_k keyed by (the bucket's seed, epoch). An ``Order`` (``_order``)."""

    version = VERSION

    def __init__(self, table: BucketTable, name: str, seed: int, epoch: int) -> None:
        self.table, self.name, self.seed, self.epoch, self.n = table, name, seed, epoch, table.n
        self._streams: dict[int, Order] = {}

    def _stream(self, bucket: int) -> Order:
        found = self._streams.get(bucket)
        if found is None:
            found = make_order(self.name, int(self.table.sizes[bucket]), bucket_seed(self.seed, bucket), self.epoch)
            self._streams[bucket] = found
        return found

    def take(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        starts = self.table.starts
        buckets = np.searchsorted(starts, positions, side="right") - 1
        found = np.empty(len(positions), np.int64)
        for bucket in np.unique(buckets).tolist():
            here = buckets == bucket
            found[here] = self._stream(bucket).take(positions[here] - starts[bucket]) + starts[bucket]
        return self.table.members[found]

    def index(self, position: int) -> int:
        check_int("position", position, 0, self.n - 1)
        return int(self.take(np.array([position]))[0])


def describe(table: BucketTable, seed: int, world_size: int, batch_size: int, drop_last: bool = True) -> dict[str, Any]:
    """A fresh epoch's numbers at this layout: batches per rank, and samples dropped (``drop_last=True``) or
    served twice (padded, ``drop_last=False``) at the tail, with the documented bound on either."""
    cut = BucketCut(table, seed, 0, world_size, batch_size, [], drop_last)
    served = cut.samples_per_rank() * world_size
    return {"buckets": len(table), "batches_per_rank": cut.samples_per_rank() // batch_size,
            "dropped": max(table.n - served, 0), "padded": max(served - table.n, 0),
            "bound": len(table) * (batch_size - 1) + (world_size - 1) * batch_size}

"""The data wait, measured: how long the training loop waits in ``next(loader)``, and where a batch's time goes.

What is timed, per batch, and where::

    main process                                  worker w (or the main process with num_workers=0)
    ------------                                  ---------------------------------------------------
    the loop asks: next()  ── t0                  the batch's indices arrive (unpickled): started
      batches in flight counted (prefetch depth)    read: dataset[i] / __getitems__, transform= inside
                                                    collate_fn                       ── read_s, transform_s, collate_s
    pin_memory (torch's pin thread)  ── pin_s      the batch leaves in an envelope: Timed(batch, w, times)
    the batch is handed over         ── t1
    wait_s += t1 - t0;  step_s += t1 - (the previous hand-over, or t0 for an iterator's first)

A worker's times travel with its batch, in its own envelope (``Timed``), which the loader opens before the loop
sees the batch: the order, the batches and the state are untouched, and nothing crosses processes but the batch.
The cost is a few clock reads per batch (``benchmarks/bench_data_wait.py``).

Words: docs/glossary.md (data wait, wait share, prefetch depth, batch, rank).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

_clock = time.perf_counter
# Per process (each worker has its own): when the current batch's indices arrived, and the transform's seconds so far.
_started = [0.0]
_transform_s = [0.0]


def transform_timer() -> Callable[[float], None]:
    """How ``transform=`` reports its seconds (``keyed.py``): added to this process's count."""
    def add(seconds: float) -> None:
        _transform_s[0] += seconds
    return add


def batch_begins() -> None:
    """A batch read in a process torch did not start (a Ray actor): its read seconds count from now."""
    _started[0] = _clock()


def _arrived(indices: list[Any]) -> list[Any]:
    """A batch's indices unpickled in a worker: the batch begins now."""
    _started[0] = _clock()
    return indices


class BatchIndices(list):  # type: ignore[type-arg]
    """A batch's indices as a worker receives them: a plain list once unpickled, marking when the batch began."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _arrived, (list(self),)


class CountedBatches(torch.utils.data.BatchSampler):
    """torch's ``BatchSampler``, counting the batches handed to the fetchers (the prefetch depth is that count
    minus the batches the loop received); to workers, each is sent as ``BatchIndices``."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool, to_workers: bool) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.dispatched, self.to_workers = 0, to_workers

    def __iter__(self) -> Iterator[list[int]]:
        if self.to_workers:
            for batch in super().__iter__():
                self.dispatched += 1
                yield BatchIndices(batch)
        else:
            for batch in super().__iter__():
                self.dispatched += 1
                _started[0] = _clock()  # read in this process: the batch begins now
                yield batch


class Timed:
    """A batch and where its time went, from the worker that made it to the loader, which opens it."""

    __slots__ = ("batch", "worker", "read_s", "transform_s", "collate_s", "pin_s")

    def __init__(self, batch: Any, worker: int, read_s: float, transform_s: float, collate_s: float,
                 pin_s: float = 0.0) -> None:
        self.batch, self.worker, self.read_s, self.transform_s, self.collate_s, self.pin_s = (
            batch, worker, read_s, transform_s, collate_s, pin_s)

    def __reduce__(self) -> tuple[Any, ...]:
        return Timed, (self.batch, self.worker, self.read_s, self.transform_s, self.collate_s, self.pin_s)

    def pin_memory(self, device: Any = None) -> Timed:
        """torch's pin thread pins what it is handed: the batch inside, timed (transfer)."""
        from torch.utils.data._utils.pin_memory import pin_memory  # the function torch's pin thread calls

        start = _clock()
        pinned = pin_memory(self.batch, device)  # type: ignore[no-untyped-call]
        return Timed(pinned, self.worker, self.read_s, self.transform_s, self.collate_s, _clock() - start)


class TimedCollate:
    """The loader's collate, timed in the process that runs it; the batch leaves as ``Timed``."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Timed:
        start, transform = _clock(), _transform_s[0]
        batch = self.collate_fn(samples)
        end = _clock()
        _transform_s[0] = 0.0
        info = torch.utils.data.get_worker_info()
        return Timed(batch, info.id if info is not None else -1, max(start - _started[0] - transform, 0.0), transform,
                     end - start)


@dataclasses.dataclass(frozen=True)
class WorkerTime:
    """One worker's share of the batches the loop received: how many, and the seconds each stage took in it.
    ``worker`` -1 is the main process (``num_workers=0``)."""

    worker: int
    batches: int = 0
    read_s: float = 0.0
    transform_s: float = 0.0
    collate_s: float = 0.0

    def __sub__(self, other: WorkerTime) -> WorkerTime:
        return WorkerTime(self.worker, self.batches - other.batches, self.read_s - other.read_s,
                          self.transform_s - other.transform_s, self.collate_s - other.collate_s)


@dataclasses.dataclass(frozen=True)
class DataWait:
    """The data wait of one rank's loader, from its first batch (``loader.data_wait()``); ``later - earlier`` is the
    window between two readings.

    ``batches``: batches the loop received. ``wait_s``: seconds it waited inside ``next()``. ``step_s``: seconds
    of the loop those batches cover (from each iterator's first ``next()`` to the last batch handed over; time
    between two iterators, an evaluation say, is not counted). ``wait_share``: ``wait_s / step_s``, the part of
    the step spent waiting for data (0 to 1). ``pin_s``: seconds torch's pin thread spent pinning them.
    ``prefetch_depth``: the mean number of batches in flight (asked of the workers, not yet received) when the
    loop asked for one; ``prefetch_limit``: the most torch keeps in flight, ``num_workers * prefetch_factor``.
    ``workers``: per worker, the batches it made and its read, transform and collate seconds. ``workers_busy``: the
    part of the loop's time the workers spent making batches (0 to 1, on average over the workers that made one):
    with a high ``wait_share``, near 1 says the workers are the bound, low says they idle while the loop waits.
    """

    rank: int
    batches: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    pin_s: float = 0.0
    in_flight: int = 0  # batches in flight, summed over the loop's asks
    prefetch_limit: int = 0
    workers: tuple[WorkerTime, ...] = ()

    @property
    def wait_share(self) -> float:
        """``wait_s / step_s``: the part of the loop's time spent waiting for data, 0 to 1 (0 before a batch)."""
        return self.wait_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def prefetch_depth(self) -> float:
        """The batches in flight when the loop asked for one, on average (0 before a batch, or without workers)."""
        return self.in_flight / self.batches if self.batches else 0.0

    @property
    def workers_busy(self) -> float:
        """The workers' read, transform and collate seconds over ``len(workers) * step_s``: how busy the processes
        that make batches were (0 before a batch; a worker that made none in the window is not counted)."""
        making = [w for w in self.workers if w.batches > 0]
        if not making or self.step_s <= 0:
            return 0.0
        return min(sum(w.read_s + w.transform_s + w.collate_s for w in making) / (len(making) * self.step_s), 1.0)

    def __sub__(self, other: DataWait) -> DataWait:
        earlier = {w.worker: w for w in other.workers}
        return DataWait(self.rank, self.batches - other.batches, self.wait_s - other.wait_s,
                        self.step_s - other.step_s, self.pin_s - other.pin_s, self.in_flight - other.in_flight,
                        self.prefetch_limit,
                        tuple(w - earlier.get(w.worker, WorkerTime(w.worker)) for w in self.workers))

    def summary(self) -> dict[str, float]:
        """The numbers a run logs: ``data_wait_share``, ``data_wait_s``, ``data_batches``, ``data_prefetch_depth``,
        ``data_workers_busy``."""
        return {"data_wait_share": round(self.wait_share, 4), "data_wait_s": round(self.wait_s, 4),
                "data_batches": self.batches, "data_prefetch_depth": round(self.prefetch_depth, 2),
                "data_workers_busy": round(self.workers_busy, 4)}

    def __str__(self) -> str:
        workers = ", ".join(f"{'main' if w.worker < 0 else f'worker {w.worker}'}: {w.batches} batches, read "
                            f"{w.read_s:.3f} s, transform {w.transform_s:.3f} s, collate {w.collate_s:.3f} s"
                            for w in self.workers)
        return (f"rank {self.rank}: {self.batches} batches, waited {self.wait_s:.3f} s of {self.step_s:.3f} s "
                f"({100 * self.wait_share:.1f}%), prefetch depth {self.prefetch_depth:.1f} of {self.prefetch_limit}, "
                f"workers busy {100 * self.workers_busy:.0f}%" + (f"; {workers}" if workers else ""))


class WaitMeter:
    """What a loader has measured so far (see the module); ``reading()`` is its ``DataWait``."""

    def __init__(self, rank: int, prefetch_limit: int) -> None:
        self.rank, self.prefetch_limit = rank, prefetch_limit
        self.batches, self.in_flight = 0, 0
        self.wait_s = self.step_s = self.pin_s = 0.0
        self.workers: dict[int, list[float]] = {}  # worker -> [batches, read, transform, collate]
        self.last: float | None = None  # the last hand-over of the live iterator
        self.windows: dict[str, DataWait] = {}  # window name -> the reading it last ended at

    def begin(self) -> None:
        """A new iterator: its first step is counted from its first ``next()``."""
        self.last = None

    def received(self, start: float, end: float, in_flight: int, batch: Any) -> Any:
        """One batch handed over, ``next()`` having run from ``start`` to ``end``: counted; the batch, opened."""
        self.batches += 1
        self.in_flight += max(in_flight, 0)
        self.wait_s += end - start
        self.step_s += end - (start if self.last is None else self.last)
        self.last = end
        if type(batch) is not Timed:
            return batch
        times = self.workers.get(batch.worker)
        if times is None:
            times = self.workers[batch.worker] = [0, 0.0, 0.0, 0.0]
        times[0] += 1
        times[1] += batch.read_s
        times[2] += batch.transform_s
        times[3] += batch.collate_s
        self.pin_s += batch.pin_s
        return batch.batch

    def reading(self, window: str | None = None) -> DataWait:
        """Since the loader was built; or, named ``window``, since the last reading of that window."""
        workers = tuple(WorkerTime(w, int(t[0]), t[1], t[2], t[3]) for w, t in sorted(self.workers.items()))
        now = DataWait(self.rank, self.batches, self.wait_s, self.step_s, self.pin_s, self.in_flight,
                       self.prefetch_limit, workers)
        if window is None:
            return now
        before = self.windows.get(window)
        self.windows[window] = now
        return now if before is None else now - before


def prefetch_limit(num_workers: int, prefetch_factor: int | None) -> int:
    """The batches torch keeps in flight: ``num_workers * prefetch_factor`` (2 by default), 0 without workers."""
    return num_workers * (2 if prefetch_factor is None else prefetch_factor) if num_workers > 0 else 0

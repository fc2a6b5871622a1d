"""The cost of measuring the data wait (``DataLoader.data_wait()``, ``_loading/wait.py``), on the worst case: an
in-memory dataset of ints, where the loader itself is all the time a batch takes.

Two numbers: the measurement's own calls per batch, timed alone (the envelope made and opened, the clock read, the
indices wrapped), in microseconds; and the loader's batches per second with the measurement and with its calls
replaced by pass-throughs, interleaved rounds, median. ``make bench-data-wait``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import timeit
from collections.abc import Iterator
from unittest import mock

import torch.utils.data

import shufflepoint
from shufflepoint._loading import wait


def per_batch_cost_us(batch_size: int) -> float:
    meter, collate = wait.WaitMeter(0, 0), wait.TimedCollate(torch.utils.data.default_collate)
    samples, indices = list(range(batch_size)), list(range(batch_size))

    def one() -> None:
        start = time.perf_counter()
        batch = wait.BatchIndices(indices)  # to a worker (0 workers: a clock read instead)
        envelope = collate(samples)
        meter.received(start, time.perf_counter(), 0, envelope)
        del batch

    def bare() -> None:
        torch.utils.data.default_collate(samples)

    rounds = 20_000
    return (timeit.timeit(one, number=rounds) - timeit.timeit(bare, number=rounds)) / rounds * 1e6


@contextlib.contextmanager
def unmeasured() -> Iterator[None]:
    """The loader with the measurement's calls replaced by pass-throughs (the batch sampler still counts)."""
    def plain(self: wait.CountedBatches) -> Iterator[list[int]]:  # counted, not wrapped, no clock
        for batch in torch.utils.data.BatchSampler.__iter__(self):
            self.dispatched += 1
            yield batch

    with mock.patch("shufflepoint._loading.loader.TimedCollate", lambda collate: collate), \
            mock.patch.object(wait.CountedBatches, "__iter__", plain), \
            mock.patch.object(wait.WaitMeter, "received", lambda self, start, end, flight, batch: batch):
        yield


def rate(samples: int, batch_size: int, workers: int) -> float:
    loader = shufflepoint.DataLoader(list(range(samples)), batch_size, num_workers=workers)
    start = time.perf_counter()
    count = sum(1 for _ in loader)
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=64_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="*", default=[0, 2])
    args = parser.parse_args()
    print(f"measurement's own calls: {per_batch_cost_us(args.batch_size):.2f} us per batch (batch {args.batch_size})")
    for workers in args.workers:
        measured, bare = [], []
        for _ in range(args.rounds):
            measured.append(rate(args.samples, args.batch_size, workers))
            with unmeasured():
                bare.append(rate(args.samples, args.batch_size, workers))
        m, b = statistics.median(measured), statistics.median(bare)
        print(f"num_workers={workers}: {m:,.0f} batches/s measured, {b:,.0f} without ({100 * (b - m) / b:+.1f}% "
              f"slower measured; rounds {[round(x) for x in measured]} vs {[round(x) for x in bare]})")


if __name__ == "__main__":
    main()

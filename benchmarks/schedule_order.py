"""The scheduled ``Mixture`` order's cost per position (docs/shards.md, Mixture schedules).

``python benchmarks/schedule_order.py``: positions/s of one epoch's ``take`` (200,000 positions, three
sources 0.6 / 0.3 / 0.1), read on a loader's grid of G rows (global batches of 8, 64, 512) and, for
comparison, in windows of ``shuffle_block`` rows (what a ``ResumableSampler`` reads). Median of 5, in
this process after one warm-up take (the order itself, not the first batch of a fresh process:
``make bench-cold`` measures that).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from shufflepoint._shards.corpora.mixture.mixture import Mixture

POSITIONS = 200_000


def rate(order) -> float:
    positions = np.arange(POSITIONS)
    order.take(positions[:1000])
    times = []
    for _ in range(5):
        start = time.perf_counter()
        order.take(positions)
        times.append(time.perf_counter() - start)
    return POSITIONS / statistics.median(times)


def main() -> None:
    sources = [np.arange(10**6), np.arange(10**6, 2 * 10**6), np.arange(2 * 10**6, 3 * 10**6)]
    mixture = Mixture(sources, samples_per_epoch=POSITIONS, schedule=[(0, [0.6, 0.3, 0.1])])
    block = rate(mixture.epoch_order(1, 0, 65536))
    print(f"shuffle_block windows (65,536 rows): {block / 1e6:.2f}M positions/s")
    for grid in (8, 64, 512):
        found = rate(mixture.epoch_order(1, 0, 65536, grid=grid))
        print(f"global batches of {grid} rows: {found / 1e6:.2f}M positions/s ({found / block:.2f}x the windows)")


if __name__ == "__main__":
    main()

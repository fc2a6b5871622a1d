"""``DataLoader.data_wait()``: what the loop waited for, measured without changing what it receives.

The batches, their order and the state are those of the loader without the measurement (a batch's times travel in
an envelope the loader opens); the counts add up; a slow dataset shows as wait and read time, a slow loop as none;
a transform is told apart from the read; the prefetch depth is torch's in-flight batches. Timings are asserted only
where a sleep makes the answer unmistakable (the cost is a benchmark's: benchmarks/bench_data_wait.py)."""

import pickle
import time

import pytest
import torch

import shufflepoint
from shufflepoint._loading.wait import BatchIndices, Timed, TimedCollate


class Slow(torch.utils.data.Dataset):
    def __init__(self, n=32, seconds=0.0):
        self.n, self.seconds = n, seconds

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        if self.seconds:
            time.sleep(self.seconds)
        return index


def _batches(loader, loop_seconds=0.0, limit=None):
    found = []
    for batch in loader:
        found.append(batch.tolist())
        if loop_seconds:
            time.sleep(loop_seconds)
        if limit is not None and len(found) == limit:
            break
    return found


@pytest.mark.parametrize("workers", [0, 2])
def test_the_batches_and_the_state_are_untouched_and_the_counts_add_up(workers):
    loader = shufflepoint.DataLoader(Slow(30), 4, seed=3, num_workers=workers)
    reference = [loader.which(step)[0] for step in range(len(loader))]  # the order, by arithmetic
    assert _batches(loader, limit=5) == reference[:5]
    resumed = shufflepoint.DataLoader(Slow(30), 4, seed=3, num_workers=workers)
    resumed.load_state_dict(loader.state_dict())
    assert _batches(resumed) == reference[5:]
    wait = loader.data_wait()
    assert wait.batches == 5 == sum(w.batches for w in wait.workers)
    assert [w.worker for w in wait.workers] == ([-1] if workers == 0 else [0, 1])
    assert 0 <= wait.wait_s <= wait.step_s and 0 <= wait.wait_share <= 1
    assert resumed.data_wait().batches == len(reference) - 5  # per loader, from its first batch: not in the state


def test_a_slow_dataset_is_waited_for_and_read_and_a_slow_loop_is_not():
    slow_data = shufflepoint.DataLoader(Slow(16, seconds=0.01), 4)
    _batches(slow_data)
    wait = slow_data.data_wait()
    assert wait.wait_share > 0.8 and wait.wait_s >= 16 * 0.01
    (main,) = wait.workers
    assert main.read_s >= 16 * 0.01 and main.transform_s == 0 and main.read_s > 20 * main.collate_s
    slow_loop = shufflepoint.DataLoader(Slow(16), 4)
    _batches(slow_loop, loop_seconds=0.02)
    assert slow_loop.data_wait().wait_share < 0.3


def test_busy_workers_say_which_side_is_slow_where_the_prefetch_depth_cannot():
    """Slow workers: the loop waits and they never rest. A slow loop: they rest. The prefetch depth reads full in
    both (torch keeps asking), so it is not the diagnosis; ``workers_busy`` is."""
    slow_workers = shufflepoint.DataLoader(Slow(48, seconds=0.02), 4, num_workers=2)
    _batches(slow_workers)
    slow_loop = shufflepoint.DataLoader(Slow(48), 4, num_workers=2)
    _batches(slow_loop, loop_seconds=0.05)
    busy, idle = slow_workers.data_wait(), slow_loop.data_wait()
    assert busy.wait_share > 0.5 and busy.workers_busy > 0.6, busy
    assert idle.wait_share < 0.3 and idle.workers_busy < 0.2, idle
    assert busy.summary()["data_workers_busy"] == round(busy.workers_busy, 4)
    assert "workers busy" in str(busy)


def test_the_transform_is_told_apart_from_the_read():
    def transform(sample, rng):
        time.sleep(0.01)
        return sample

    loader = shufflepoint.DataLoader(Slow(8), 4, transform=transform)
    _batches(loader)
    (main,) = loader.data_wait().workers
    assert main.transform_s >= 8 * 0.01 and main.read_s < main.transform_s / 4


def test_the_prefetch_depth_is_what_torch_keeps_in_flight():
    loader = shufflepoint.DataLoader(Slow(64), 2, num_workers=2, prefetch_factor=2)
    _batches(loader, loop_seconds=0.01)
    wait = loader.data_wait()
    assert wait.prefetch_limit == 4 and 2 < wait.prefetch_depth <= 4
    alone = shufflepoint.DataLoader(Slow(8), 2)
    _batches(alone)
    assert (alone.data_wait().prefetch_depth, alone.data_wait().prefetch_limit) == (0, 0)


def test_a_window_is_the_difference_of_two_readings_and_a_break_leaves_the_depth_honest():
    loader = shufflepoint.DataLoader(Slow(40), 2, num_workers=2)
    _batches(loader, limit=3)  # a break: the prefetched batches are dropped
    first = loader.data_wait()
    _batches(loader, limit=5)
    window = loader.data_wait() - first
    assert (first.batches, window.batches) == (3, 5)
    assert sum(w.batches for w in window.workers) == 5 and window.in_flight >= 0
    assert 0 <= window.prefetch_depth <= window.prefetch_limit
    assert window.summary()["data_batches"] == 5 and "rank 0: 5 batches" in str(window)


def test_a_set_batch_size_mid_iteration_is_counted_once():
    loader = shufflepoint.DataLoader(Slow(40), 2, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    loader.set_batch_size(4)
    rest = [b.tolist() for b in iterator]
    wait = loader.data_wait()
    assert wait.batches == 1 + len(rest) and 0 <= wait.prefetch_depth <= wait.prefetch_limit


def test_the_envelope_is_opened_by_the_loader_and_pinned_inside():
    envelope = TimedCollate(torch.utils.data.default_collate)([1, 2])
    assert isinstance(envelope, Timed) and envelope.batch.tolist() == [1, 2] and envelope.worker == -1
    pinned = Timed([1, 2], 0, 0.0, 0.0, 0.0).pin_memory()  # no tensor: pinning keeps it as it is
    assert pinned.batch == [1, 2] and pinned.pin_s >= 0
    assert type(pickle.loads(pickle.dumps(BatchIndices([3, 4])))) is list  # a worker receives a plain list


def test_a_named_window_reads_since_its_own_last_reading():
    loader = shufflepoint.DataLoader(Slow(40), 2)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    assert loader.data_wait(window="log").batches == 3
    next(iterator)
    assert loader.data_wait(window="other").batches == 4  # a window of its own
    next(iterator)
    assert (loader.data_wait(window="log").batches, loader.data_wait().batches) == (2, 5)

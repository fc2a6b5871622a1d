"""Buckets with ``drop_last=False`` (``_core/buckets.py``, the tail): every sample of every epoch is read, through
any changes of world and batch size; every batch full and one bucket; every rank the same number of batches;
what repeats is each bucket's last unit's filling (fewer than B per bucket and segment, samples of that bucket)
and the last step's re-read slots (fewer than W units, ``real_samples`` says whose)."""

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.buckets import BucketCut, BucketOrder, BucketTable

sizes_of_buckets = st.lists(st.integers(1, 40), min_size=1, max_size=7)
layouts = st.tuples(st.integers(1, 5), st.integers(1, 9))  # (world_size, batch_size)


def table_of(sizes, seed=0):
    keys = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(keys)
    return BucketTable(keys)


def key_of(table):
    keys = np.empty(table.n, np.int64)
    keys[table.members] = np.repeat(table.labels, table.sizes)
    return keys


@settings(max_examples=200, deadline=None)
@given(sizes_of_buckets, st.lists(st.tuples(layouts, st.integers(0, 6)), max_size=4), layouts,
       st.integers(0, 2**64 - 1), st.integers(0, 3))
def test_every_sample_is_read_through_any_resizes_and_only_the_documented_padding_repeats(sizes, legs, last, seed,
                                                                                          epoch):
    table = table_of(sizes, seed % 5)
    keys = key_of(table)
    order = BucketOrder(table, "radix-feistel", seed, epoch)
    segments, reads, bound = [], Counter(), 0
    for (world, batch), steps in [*legs, (last, None)]:
        cut = BucketCut(table, seed, epoch, world, batch, segments, drop_last=False)
        per_rank = cut.samples_per_rank()
        assert per_rank % batch == 0  # every rank the same number of full batches
        steps = per_rank // batch if steps is None else min(steps, per_rank // batch)
        if not segments or segments[-1][0] != batch:
            bound += len(sizes) * (batch - 1)  # a new segment: each bucket's last unit may be filled
        for rank in range(world):
            batches = order.take(cut.rank_positions(rank, 0, steps * batch)).reshape(steps, batch)
            assert all(len(set(keys[b].tolist())) == 1 for b in batches)  # full, one bucket
            reads.update(batches.ravel().tolist())
        if 0 < per_rank == steps * batch:
            bound += (world - 1) * batch  # this leg read the epoch's last step: fewer than W slots again
        cursor, segments = cut.after(steps * batch)
        assert 0 <= cursor <= table.n
    world, batch = last
    assert set(reads) == set(range(table.n)), "a sample was not read"
    assert sum(reads.values()) - table.n <= bound  # the documented padding
    assert BucketCut(table, seed, epoch, world, batch, segments, drop_last=False).samples_per_rank() == 0


@settings(max_examples=200, deadline=None)
@given(sizes_of_buckets, layouts, st.integers(0, 2**64 - 1))
def test_a_bucket_s_last_unit_is_filled_from_its_own_first_samples_and_the_last_step_reads_whole_slots_again(
        sizes, layout, seed):
    table = table_of(sizes, seed % 3)
    keys = key_of(table)
    world, batch = layout
    cut = BucketCut(table, seed, 2, world, batch, [], drop_last=False)
    order = BucketOrder(table, "radix-feistel", seed, 2)
    steps = cut.samples_per_rank() // batch
    real, units, again = Counter(), set(), []
    for rank in range(world):
        batches = order.take(cut.rank_positions(rank, 0, steps * batch)).reshape(steps, batch).tolist()
        kept = cut.real_samples(rank) // batch
        assert kept in (steps, steps - 1) and (kept == steps or rank > 0)  # rank 0 always reads a real slot
        for unit in batches[:kept]:
            real.update(unit)
            units.add(tuple(unit))
        again.extend(batches[kept:])
    assert set(real) == set(range(table.n))  # the slots alone read every sample
    for label, size in zip(table.labels.tolist(), table.sizes.tolist(), strict=True):
        extra = sum(count - 1 for index, count in real.items() if keys[index] == label)
        assert extra == -size % batch  # fewer than B: just what fills the bucket's last unit
        stream = order.take(table.starts[np.flatnonzero(table.labels == label)[0]] + np.arange(size)).tolist()
        twice = [index for index in stream if real[index] > 1]
        assert sorted(twice, key=stream.index) == stream[:len(twice)]  # its first samples, as DistributedSampler pads
    assert len(again) < world and all(tuple(unit) in units for unit in again)  # whole slots read again


@settings(max_examples=100, deadline=None)
@given(sizes_of_buckets, layouts, st.integers(0, 2**64 - 1), st.integers(0, 2))
def test_drop_last_true_reads_as_before_and_false_serves_at_least_as_many_batches(sizes, layout, seed, epoch):
    table = table_of(sizes)
    world, batch = layout
    dropped = BucketCut(table, seed, epoch, world, batch, [], drop_last=True)
    padded = BucketCut(table, seed, epoch, world, batch, [], drop_last=False)
    assert padded.samples_per_rank() * world >= table.n > dropped.samples_per_rank() * world - 1
    assert table.n - dropped.samples_per_rank() * world <= len(sizes) * (batch - 1) + (world - 1) * batch
    assert padded.samples_per_rank() * world - table.n <= len(sizes) * (batch - 1) + (world - 1) * batch

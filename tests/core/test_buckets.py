"""The bucket arithmetic (``_core/buckets.py``): every batch one bucket, each sample at most once an epoch
through any resizes with ``drop_last=True`` (the tail's bound) and at least once with ``drop_last=False`` (the
padding's bound: ``test_bucket_padding.py``), seekable slots, and shares spread over the epoch."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.buckets import BucketCut, BucketOrder, BucketTable, _Interleave, check_segments, describe
from shufflepoint._errors import Refused

sizes_of_buckets = st.lists(st.integers(1, 60), min_size=1, max_size=8)
layouts = st.tuples(st.integers(1, 5), st.integers(1, 9))  # (world_size, batch_size)


def table_of(sizes, seed=0):
    keys = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(keys)
    return BucketTable(keys)


def read(cut, order, steps):
    """Each rank's batches of the next ``steps`` steps (all that is left when None), as index lists."""
    per_rank = cut.samples_per_rank() // cut._batch
    steps = per_rank if steps is None else min(steps, per_rank)
    stop = steps * cut._batch
    return [order.take(cut.rank_positions(rank, 0, stop)).reshape(steps, cut._batch) for rank in range(cut.world_size)]


@settings(max_examples=150, deadline=None)
@given(sizes_of_buckets, st.lists(st.tuples(layouts, st.integers(0, 6)), min_size=1, max_size=4), layouts,
       st.integers(0, 2**64 - 1), st.integers(0, 3))
def test_resizes_mid_epoch_read_each_sample_at_most_once_in_one_bucket_batches(sizes, legs, last, seed, epoch):
    table = table_of(sizes, seed % 7)
    keys = np.empty(table.n, np.int64)
    keys[table.members] = np.repeat(table.labels, table.sizes)
    order = BucketOrder(table, "radix-feistel", seed, epoch)
    segments, seen = [], []
    for (world, batch), steps in [*legs, (last, None)]:
        cut = BucketCut(table, seed, epoch, world, batch, segments, drop_last=True)
        batches = read(cut, order, steps)
        for rank_batches in batches:
            assert all(len(set(keys[b].tolist())) == 1 for b in rank_batches)  # one bucket per batch
            seen.extend(rank_batches.ravel().tolist())
        taken = len(batches[0])
        cursor, segments = cut.after(taken * batch)
        assert cursor == len(seen)
    assert len(seen) == len(set(seen)), "a sample was read twice"
    world, batch = last
    assert table.n - len(seen) <= len(sizes) * (batch - 1) + (world - 1) * batch  # the documented tail
    assert BucketCut(table, seed, epoch, world, batch, segments, drop_last=True).samples_per_rank() == 0


@settings(max_examples=100, deadline=None)
@given(sizes_of_buckets, layouts, st.integers(0, 2**64 - 1), st.booleans(), st.data())
def test_a_rank_s_positions_are_seekable_and_a_cut_read_on_from_after_is_the_same_stream(sizes, layout, seed,
                                                                                          drop_last, data):
    table = table_of(sizes)
    world, batch = layout
    cut = BucketCut(table, seed, 1, world, batch, [], drop_last)
    total = cut.samples_per_rank()
    rank = data.draw(st.integers(0, world - 1))
    whole = cut.rank_positions(rank, 0, total)
    start = data.draw(st.integers(0, total))
    stop = data.draw(st.integers(start, total))
    assert cut.rank_positions(rank, start, stop).tolist() == whole[start:stop].tolist()
    steps = start // batch
    _, segments = cut.after(steps * batch)
    on = BucketCut(table, seed, 1, world, batch, segments, drop_last)
    assert on.rank_positions(rank, 0, on.samples_per_rank()).tolist() == whole[steps * batch:].tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=1, max_size=12), st.integers(1, 5), st.integers(0, 2**64 - 1))
def test_slots_match_a_full_sort_and_each_bucket_s_share_stays_even(sizes, batch, key):
    interleave = _Interleave(np.array(sizes, np.int64), batch, key)
    units = interleave.units
    buckets = np.repeat(np.arange(len(units)), units)
    js = np.concatenate([np.arange(u) for u in units]) if interleave.total else np.zeros(0, np.int64)
    order = np.lexsort((js, buckets, interleave.times(buckets, js)))
    total, live = interleave.total, int((units > 0).sum())
    for first in range(0, total + 1, max(total // 9, 1)):
        stop = min(first + 17, total)
        found = interleave.slots(first, stop)
        assert found[0].tolist() == buckets[order][first:stop].tolist()
        assert found[1].tolist() == js[order][first:stop].tolist()
        taken = interleave.taken(first)
        assert taken.tolist() == np.bincount(buckets[order][:first], minlength=len(units)).tolist()
        # stratified: after any number of slots each bucket has had its share, within K + 1 units
        assert np.all(np.abs(taken - first * units / max(total, 1)) <= live + 1)


def test_a_fresh_epoch_s_numbers_are_pinned():
    """A worked example the docs quote: 3 buckets of 10, 7 and 2 samples, 2 ranks, batches of 3."""
    table = BucketTable([0] * 10 + [1] * 7 + [2] * 2)
    assert describe(table, 0, 2, 3, drop_last=True) == {"buckets": 3, "batches_per_rank": 2, "dropped": 7,
                                                        "padded": 0, "bound": 9}
    cut = BucketCut(table, 0, 0, 2, 3, [], drop_last=True)
    assert cut.samples_per_rank() == 6 and cut.after(3) == (6, [[3, 2]])
    # drop_last=False: units of 4 + 3 + 1 = 8 slots (each bucket's last unit filled: 2 + 2 + 1 samples again)
    assert describe(table, 0, 2, 3, drop_last=False) == {"buckets": 3, "batches_per_rank": 4, "dropped": 0,
                                                         "padded": 5, "bound": 9}
    # 3 ranks: 3 steps of 3 slots, the last step's third rank reads slot 0 again (3 samples more)
    assert describe(table, 0, 3, 3, drop_last=False)["padded"] == 8
    padded = BucketCut(table, 0, 0, 3, 3, [], drop_last=False)
    assert [padded.real_samples(rank) for rank in range(3)] == [9, 9, 6]
    assert padded.after(9) == (19, [[3, 8]])  # the last step's padding records no slot: the cursor stays <= n


def test_buckets_take_turns_over_the_epoch_not_one_after_another():
    table = BucketTable(np.repeat([0, 1], 400))
    labels = BucketCut(table, 3, 0, 1, 4, []).bucket_of_slots(0, 200).tolist()
    assert abs(labels[:100].count(0) - 50) <= 3 and abs(labels[100:].count(1) - 50) <= 3
    other = BucketCut(table, 3, 1, 1, 4, []).bucket_of_slots(0, 200).tolist()
    assert other != labels  # the interleave is the epoch's own


def test_segments_a_state_could_not_have_written_are_refused_by_name():
    with pytest.raises(Refused, match=r"segments\[1\]: found \[0, 3\]"):
        check_segments(100, [[4, 2], [0, 3]])
    with pytest.raises(Refused, match="at most n=10 slots in all"):
        check_segments(10, [[4, 6], [1, 5]])
    table = BucketTable([0] * 10)
    with pytest.raises(Refused, match=r"segments\[0\]: found \[3, 4\]\n  expected: at most 3 slots"):
        BucketCut(table, 0, 0, 1, 5, [[3, 4]])


@pytest.mark.parametrize("keys, error, match", [
    ([0, 1], ValueError, r"buckets: found shape \(2,\)\n  expected: one int in \[0, 2147483647\] per sample.*length 3"),
    ([0, -1, 2], ValueError, r"buckets: found key -1 at sample 1"),
    (np.array([0.0, 1.0, 1.0]), TypeError, r"buckets: found dtype float64"),
    ([0, 1.5, 2], TypeError, r"buckets: found dtype float64"),
    ([True, False, True], TypeError, r"buckets: found dtype bool"),
    (["a", "b", "c"], TypeError, r"buckets: found dtype <U1"),
    ("abc", TypeError, r"buckets: found str"),
    ([[0], [1], [2]], ValueError, r"buckets: found shape \(3, 1\)"),
    ([0, 2**40, 1], ValueError, r"buckets: found key 1099511627776 at sample 1"),
])
def test_bad_keys_are_refused_naming_buckets_and_what_was_expected(keys, error, match):
    with pytest.raises(error, match=match):
        BucketTable(keys, 3)


def test_a_wide_world_reads_its_batches_in_pieces_with_the_same_result(monkeypatch):
    from shufflepoint._core import buckets

    table = table_of([300, 120, 45, 7])
    whole = BucketCut(table, 9, 2, 6, 2, []).rank_positions(4, 0, 40)
    monkeypatch.setattr(buckets, "_MAX_WINDOW", 7)  # pieces of one batch per rank
    assert BucketCut(table, 9, 2, 6, 2, []).rank_positions(4, 0, 40).tolist() == whole.tolist()


def test_golden_epochs_pin_the_interleave_and_the_streams():
    """An accidental change of the algorithm (the jitter, the sort, a bucket's seed) fails here; a deliberate
    one bumps ``buckets.VERSION`` (in the keys' fingerprint: old states are then refused, not misread)."""
    table = BucketTable([0] * 9 + [1] * 6 + [2] * 5)
    golden = {0: [[2, 5, 7, 8, 10, 12, 9, 14], [13, 11, 17, 16, 0, 3, 6, 4]],
              1: [[14, 11, 15, 17, 12, 10, 13, 9], [0, 8, 3, 1, 6, 5, 16, 19]]}
    for epoch, ranks in golden.items():
        cut, order = BucketCut(table, 1234, epoch, 2, 2, []), BucketOrder(table, "radix-feistel", 1234, epoch)
        assert [order.take(cut.rank_positions(rank, 0, 8)).tolist() for rank in range(2)] == ranks

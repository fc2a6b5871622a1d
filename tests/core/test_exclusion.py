"""Exclusion arithmetic: ranges, their state form, and the strided deal skipping excluded positions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.exclusion import MAX_RANGES, Exclusion, FilteredStridedCut, Skips
from shufflepoint._core.plan import Layout, StridedCut


def test_the_worked_example_of_the_module_docstring():
    layout = Layout(10, 2, 2, False)
    cut = FilteredStridedCut(layout, 2, Skips(np.array([3, 4, 8]), 10))
    assert cut.skips.nth(2, np.arange(5)).tolist() == [2, 5, 6, 7, 9]
    assert cut.samples_per_rank() == 3
    assert cut.rank_positions(0, 0, 3).tolist() == [2, 6, 9]
    assert cut.rank_positions(1, 0, 3).tolist() == [5, 7, 0]  # padding: the epoch's first kept position
    assert [cut.real_samples(r) for r in (0, 1)] == [3, 2]
    assert cut.after(1) == (6, [])  # 2 and 5 handed out: the cursor is past 5 (the next kept is 6)
    assert cut.after(3) == (10, [])


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_ranges_round_trip_through_the_state_and_hold_exactly_the_indices(n, data):
    indices = data.draw(st.lists(st.integers(0, n - 1), max_size=60))
    excluded = Exclusion.from_indices(indices, n)
    assert excluded.indices().tolist() == sorted(set(indices))
    assert excluded.count == len(set(indices))
    assert Exclusion.from_state(excluded.to_state(), n) == excluded
    starts, stops = excluded.starts, excluded.stops
    assert (stops > starts).all() and (starts[1:] > stops[:-1]).all()  # sorted, disjoint, never touching
    probe = np.arange(n)
    assert excluded.contains(probe).tolist() == [i in set(indices) for i in range(n)]
    more = data.draw(st.lists(st.integers(0, n - 1), max_size=30))
    assert excluded.union(Exclusion.from_indices(more, n)) == Exclusion.from_indices(indices + more, n)


@pytest.mark.parametrize(("bad", "error", "match"), [
    ([3, -1], ValueError, r"indices: found -1\n  expected: dataset indices in \[0, 10\)"),
    ([10], ValueError, r"indices: found 10\n  expected: dataset indices in \[0, 10\)"),
    ([1.0], TypeError, r"indices: found 1.0 of type float\n  expected: int"),
    ([True], TypeError, r"indices: found True of type bool"),
    (5, TypeError, r"indices: found int\n  expected: an iterable"),
    (np.array([0.5]), TypeError, r"indices: found an array of float64"),
])
def test_bad_indices_are_refused_by_name(bad, error, match):
    with pytest.raises(error, match=match):
        Exclusion.from_indices(bad, 10)


@pytest.mark.parametrize(("value", "match"), [
    ([1], r"found 1 numbers\n  expected: an even count"),
    ([1, 0], r"element 1: found 0\n  expected: a range length >= 1"),
    ([0, 2, 0, 1], r"element 2: found 0\n  expected: a gap >= 1 between ranges"),
    ([-1, 2], r"element 0: found -1\n  expected: an int >= 0"),
    ([1, True], r"element 1: found True"),
    ([8, 3], r"the ranges: found index 10 reached\n  expected: every index < n = 10"),
    ([0, 1] * (MAX_RANGES + 1), rf"found {MAX_RANGES + 1} ranges\n  expected: at most {MAX_RANGES}"),
])
def test_malformed_state_ranges_are_refused_naming_the_element(value, match):
    with pytest.raises(ValueError, match=match):
        Exclusion.from_state(value, 10)


def served(cut, world_size: int) -> list[list[int]]:
    count = cut.samples_per_rank()
    return [cut.rank_positions(r, 0, count).tolist()[: cut.real_samples(r)] for r in range(world_size)]


layouts = st.builds(Layout, n=st.integers(1, 300), world_size=st.integers(1, 7), batch_size=st.integers(1, 9),
                    drop_last=st.booleans())


@settings(max_examples=400, deadline=None)
@given(layout=layouts, data=st.data())
def test_the_rest_of_the_epoch_is_every_kept_position_once_in_order(layout, data):
    n = layout.n
    excluded = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64)
    cursor = data.draw(st.integers(0, n))
    cut = FilteredStridedCut(layout, cursor, Skips(excluded, n))
    kept = [p for p in range(cursor, n) if p not in set(excluded.tolist())]
    per_rank = served(cut, layout.world_size)
    interleaved = sorted((t * layout.world_size + r, p) for r, ps in enumerate(per_rank) for t, p in enumerate(ps))
    got = [p for _, p in interleaved]
    if layout.drop_last:  # only the tail (< W*B kept positions) is dropped
        assert got == kept[: len(got)] and len(kept) - len(got) < layout.step_size
    else:
        assert got == kept
        count = cut.samples_per_rank()
        padding = [p for r in range(layout.world_size)
                   for p in cut.rank_positions(r, 0, count).tolist()[cut.real_samples(r):]]
        assert len(padding) < layout.world_size
        assert set(padding) <= set(range(n)) - set(excluded.tolist())  # padding never serves an excluded sample
    assert len({len(cut.rank_positions(r, 0, cut.samples_per_rank())) for r in range(layout.world_size)}) == 1


@settings(max_examples=300, deadline=None)
@given(layout=layouts, data=st.data())
def test_without_exclusions_the_filtered_cut_is_the_strided_cut(layout, data):
    cursor = data.draw(st.integers(0, layout.n))
    plain, filtered = StridedCut(layout, cursor), FilteredStridedCut(layout, cursor, Skips(np.zeros(0), layout.n))
    count = plain.samples_per_rank()
    assert filtered.samples_per_rank() == count
    for rank in range(layout.world_size):
        assert filtered.rank_positions(rank, 0, count).tolist() == plain.rank_positions(rank, 0, count).tolist()
        assert filtered.real_samples(rank) == plain.real_samples(rank)
    received = data.draw(st.integers(0, count))
    assert filtered.after(received) == plain.after(received)


@settings(max_examples=400, deadline=None)
@given(layout=layouts, new_world=st.integers(1, 7), new_batch=st.integers(1, 9), data=st.data())
def test_a_resume_continues_the_same_stream_and_a_resize_deals_the_rest_once(layout, new_world, new_batch, data):
    n = layout.n
    skips = Skips(np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64), n)
    start = data.draw(st.integers(0, n))
    cut = FilteredStridedCut(layout, start, skips)
    total = cut.samples_per_rank()
    batches = data.draw(st.integers(0, -(-total // layout.batch_size)))
    received = min(batches * layout.batch_size, total)
    cursor, segments = cut.after(received)
    assert segments == [] and start <= cursor <= n
    same = FilteredStridedCut(layout, cursor, skips)
    for rank in range(layout.world_size):  # same world: the resumed stream is the rest of the whole one
        whole = cut.rank_positions(rank, 0, total).tolist()
        assert same.rank_positions(rank, 0, same.samples_per_rank()).tolist() == whole[received:]
    if not layout.drop_last:  # another world: what was served plus what the new world serves is each kept once
        before = [p for ps in served(cut, layout.world_size) for p in ps[:received]]
        new = Layout(n, new_world, new_batch, False)
        after = [p for ps in served(FilteredStridedCut(new, cursor, skips), new_world) for p in ps]
        kept = sorted(set(range(start, n)) - set(skips.positions.tolist()))
        assert sorted(before + after) == kept

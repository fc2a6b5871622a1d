"""``which`` answers a whole world in one pass (issue 33.5): ``world_positions`` of a cut is, row by row, each
rank's own ``rank_positions``, and a ``blocks`` order's many-block ``take`` is each block's own order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.plan import Layout, StridedCut
from shufflepoint._core.spans import SpanCut
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder


def _rows(cut, start, stop):
    return np.stack([cut.rank_positions(rank, start, stop) for rank in range(cut.world_size)])


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 400), world=st.integers(1, 40), batch=st.integers(1, 7), drop_last=st.booleans(),
       data=st.data())
def test_strided_world_positions_are_each_rank_s(n, world, batch, drop_last, data):
    cursor = data.draw(st.integers(0, n))
    cut = StridedCut(Layout(n, world, batch, drop_last), cursor)
    per_rank = cut.samples_per_rank()
    start = data.draw(st.integers(0, per_rank))
    stop = data.draw(st.integers(start, per_rank))
    assert np.array_equal(cut.world_positions(start, stop), _rows(cut, start, stop).reshape(world, stop - start))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 400), worlds=st.lists(st.integers(1, 30), min_size=1, max_size=6), batch=st.integers(1, 5),
       drop_last=st.booleans(), data=st.data())
def test_span_world_positions_are_each_rank_s_after_any_resizes(n, worlds, batch, drop_last, data):
    segments: list[list[int]] = []
    for world in worlds[:-1]:  # earlier segments: each world took some of what was left
        cut = SpanCut(n, segments, world, batch, drop_last)
        if cut.samples_per_rank() == 0 or segments and segments[-1][0] == world:
            continue
        taken = data.draw(st.integers(1, cut.samples_per_rank()))
        segments = cut.after(taken)[1]
    cut = SpanCut(n, segments, worlds[-1], batch, drop_last)
    per_rank = cut.samples_per_rank()
    start = data.draw(st.integers(0, per_rank))
    stop = data.draw(st.integers(start, per_rank))
    found = cut.world_positions(start, stop)
    assert np.array_equal(found, _rows(cut, start, stop).reshape(cut.world_size, stop - start))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 40), min_size=1, max_size=60), block=st.integers(1, 30),
       stretches=st.integers(0, 9), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 5), data=st.data())
def test_a_take_over_many_blocks_is_each_block_s_own_order(rows, block, stretches, seed, epoch, data):
    if sum(rows) == 0:
        return
    order = (StretchBlockOrder(rows, seed, epoch, block, stretches) if stretches
             else BlockOrder(rows, seed, epoch, block))
    positions = np.asarray(data.draw(st.permutations(range(sum(rows)))), dtype=np.int64)
    one_by_one = [order.index(int(p)) for p in positions.tolist()]  # a block or two per call: each block's own order
    assert order.take(positions).tolist() == one_by_one
    assert sorted(order.take(np.arange(sum(rows), dtype=np.int64)).tolist()) == list(range(sum(rows)))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 300), world=st.integers(1, 9), batch=st.integers(1, 4),
       deal=st.sampled_from(["strided", "spans"]), drop_last=st.booleans(), data=st.data())
def test_with_samples_excluded_the_world_is_each_rank_s(n, world, batch, deal, drop_last, data):
    """The filtered cuts (``exclude``) place a world at once too: row by row each rank's ``rank_positions``."""
    import shufflepoint

    loader = shufflepoint.DataLoader(list(range(n)), batch, seed=3, rank=0, world_size=world, deal=deal,
                                     drop_last=drop_last)
    iterator = iter(loader)
    for _ in range(data.draw(st.integers(0, 2))):
        if next(iterator, None) is None:
            return
    excluded = data.draw(st.lists(st.integers(0, n - 1), max_size=n // 2, unique=True))
    if not excluded:
        return
    loader.exclude(excluded)
    position = loader._position
    step = position.step
    if position.batches_left() == 0:
        return
    placed = position.history.place(step, position._cuts_of(step))
    found = placed.world_positions()
    size = placed.layout.batch_size
    first = placed.batch * size
    stop = min(first + size, placed.cut.samples_per_rank())
    assert np.array_equal(found, _rows(placed.cut, first, stop).reshape(world, stop - first))

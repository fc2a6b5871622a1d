"""The arithmetic, as properties over many (n, world size, batch size, drop_last, save point)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.plan import Layout


def all_rank_positions(layout: Layout, cursor: int) -> list[np.ndarray]:
    count = layout.samples_per_rank(cursor)
    return [layout.rank_positions(r, cursor, 0, count) for r in range(layout.world_size)]


def padding(layout: Layout, cursor: int) -> int:
    """Samples given out beyond the epoch's end: the documented tail padding."""
    return layout.world_size * layout.samples_per_rank(cursor) - (layout.n - cursor)


layouts = st.builds(
    Layout, n=st.integers(0, 400), world_size=st.integers(1, 9), batch_size=st.integers(1, 12),
    drop_last=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(layout=layouts)
def test_one_epoch_covers_every_position_once_up_to_the_documented_tail(layout):
    per_rank = all_rank_positions(layout, 0)
    positions = np.concatenate(per_rank)
    counts = np.bincount(positions, minlength=layout.n)
    tail = layout.n % layout.step_size
    if layout.drop_last:
        assert sorted(positions.tolist()) == list(range(layout.n - tail))  # only the tail is dropped
    else:
        assert (counts >= 1).all()  # nothing dropped
        extra = padding(layout, 0)
        assert 0 <= extra < layout.world_size
        assert int((counts - 1).sum()) == extra  # the only repeats are the padding
    assert len({len(p) for p in per_rank}) == 1  # every rank takes the same number of samples
    assert layout.batches_per_rank(0) == -(-len(per_rank[0]) // layout.batch_size)


@settings(max_examples=300, deadline=None)
@given(layout=layouts, data=st.data())
def test_rank_stream_is_a_continuation_from_any_cursor_reached_in_lockstep(layout, data):
    """Positions after receiving t samples each == positions of a fresh plan at cursor_after(t)."""
    total = layout.samples_per_rank(0)
    received = data.draw(st.integers(0, total))
    cursor = layout.cursor_after(0, received)
    for rank in range(layout.world_size):
        whole = layout.rank_positions(rank, 0, 0, total)
        resumed = layout.rank_positions(rank, cursor, 0, layout.samples_per_rank(cursor))
        if received % layout.batch_size == 0 and received < total:  # a batch boundary before the tail
            assert resumed.tolist() == whole[received:].tolist()


@settings(max_examples=400, deadline=None)
@given(old=layouts, new_world=st.integers(1, 9), new_batch=st.integers(1, 12), data=st.data())
def test_elastic_resume_sees_every_sample_once(old, new_world, new_batch, data):
    """Old ranks take k steps, new ranks (another W and B) finish: the epoch's set, each once."""
    steps = data.draw(st.integers(0, old.batches_per_rank(0)))
    received = min(steps * old.batch_size, old.samples_per_rank(0))
    cursor = old.cursor_after(0, received)
    new = Layout(old.n, new_world, new_batch, old.drop_last)
    after = np.concatenate(all_rank_positions(new, cursor))
    if cursor == old.n:  # the old run finished the epoch: nothing is left to deal
        assert after.size == 0
        return
    before = np.concatenate([old.rank_positions(r, 0, 0, received) for r in range(old.world_size)])
    assert sorted(before.tolist()) == list(range(cursor))  # the old ranks read a prefix, no gaps
    counts = np.bincount(after, minlength=old.n)[cursor:]
    if new.drop_last:
        kept = (old.n - cursor) - (old.n - cursor) % new.step_size
        assert sorted(after.tolist()) == list(range(cursor, cursor + kept))  # only the new tail dropped
    else:
        assert (counts >= 1).all()  # nothing of the rest is dropped
        repeats = after.size - (old.n - cursor)
        assert repeats == padding(new, cursor) and repeats < new.world_size
        wrapped = after[after < cursor]  # padding wraps to the start of the epoch's order
        assert len(wrapped) + int((counts - 1).sum()) == repeats


def test_layout_is_distributed_sampler_striding():
    layout = Layout(n=10, world_size=3, batch_size=2, drop_last=False)
    assert [p.tolist() for p in all_rank_positions(layout, 0)] == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    assert layout.batches_per_rank(0) == 2
    assert layout.cursor_after(0, 2) == 6
    assert layout.cursor_after(6, 2) == 10


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=-1, world_size=1, batch_size=1, drop_last=False), "n: found -1"),
        (dict(n=1, world_size=0, batch_size=1, drop_last=False), "world_size: found 0"),
        (dict(n=1, world_size=1, batch_size=0, drop_last=False), "batch_size: found 0"),
        (dict(n=1, world_size=1, batch_size=1, drop_last=1), "drop_last: found 1"),
        (dict(n=1, world_size=1, batch_size=1.5, drop_last=False), "batch_size: found 1.5"),
    ],
)
def test_layout_rejects_bad_values_naming_the_field(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        Layout(**kwargs)

"""``DataLoader.cursor_after(k)``: the cursor k batches on, by arithmetic, equal to the cursor after
receiving them, on either deal, from a fresh epoch, mid-epoch and after a resize; the loader never moves."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint


def _loaders(n, world, batch, drop_last, deal):
    dataset = torch.utils.data.TensorDataset(torch.arange(n))
    return [shufflepoint.DataLoader(dataset, batch_size=batch, seed=3, rank=r, world_size=world, drop_last=drop_last,
                                    deal=deal) for r in range(world)]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), world=st.integers(1, 3), batch=st.integers(1, 5), new_world=st.integers(1, 3),
       drop_last=st.booleans(), deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_cursor_after_is_the_cursor_after_receiving_the_batches(n, world, batch, new_world, drop_last, deal, data):
    (first, *_) = _loaders(n, world, batch, drop_last, deal)
    taken = data.draw(st.integers(0, len(first)))
    batches = iter(first)
    for _ in range(taken):
        next(batches)
    state = first.state_dict()
    resumed = _loaders(n, new_world, batch, drop_last, deal)
    for loader in resumed:
        loader.load_state_dict(state, verify_ranks=False)
    loader = resumed[0]
    ahead = data.draw(st.integers(0, loader.batches_left() + 2))
    loaded = loader.state_dict()
    predicted, fresh = loader.cursor_after(ahead), loader.cursor_after(ahead, from_epoch_start=True)
    assert loader.state_dict() == loaded, "cursor_after moved the loader"
    if loader.batches_left() == 0:
        return
    start = loader.cursor
    for other in resumed:  # every rank receives its batches: the cursor counts what all received
        it = iter(other)
        for _ in range(min(ahead, other.batches_left())):
            next(it)
    assert loader.cursor == predicted >= start
    from_start = _loaders(n, new_world, batch, drop_last, deal)  # new loaders, each rank reading from the start
    for other in from_start:
        it = iter(other)
        for _ in range(min(ahead, other.batches_left())):
            next(it)
    assert fresh == from_start[0].cursor


def test_a_negative_count_is_refused_by_name():
    (loader,) = _loaders(10, 1, 2, False, "strided")
    with pytest.raises(ValueError, match="batches"):
        loader.cursor_after(-1)

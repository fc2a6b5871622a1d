"""A Packed or Mixture supports fewer epochs than the orders' 2**62 (its indices stay below 2**62): a state, a
set_epoch or a seek past its last epoch is refused at once, naming the epoch, with the loader unchanged."""

import pytest
import torch

import shufflepoint
from shufflepoint import StateError


def _packed():
    documents = [{"input_ids": list(range(1, 3 + i % 5))} for i in range(30)]
    return shufflepoint.Packed(documents, 8)


def _mixture():
    a, b = torch.utils.data.TensorDataset(torch.arange(40)), torch.utils.data.TensorDataset(torch.arange(25))
    return shufflepoint.Mixture([a, b], schedule=[(0, [0.5, 0.5])])


@pytest.mark.parametrize("make", [_packed, _mixture])
def test_an_epoch_past_the_datasets_last_is_refused_before_anything_changes(make):
    dataset = make()
    loader = shufflepoint.DataLoader(dataset, 2, seed=1, collate_fn=list)
    next(iter(loader))
    before = loader.state_dict()
    last = 1
    while True:  # the dataset's last epoch, by doubling and bisecting set_epoch
        try:
            shufflepoint.DataLoader(make(), 2, seed=1, collate_fn=list).set_epoch(last * 2)
        except ValueError:
            break
        last *= 2
    high = last * 2
    while high - last > 1:
        middle = (last + high) // 2
        try:
            shufflepoint.DataLoader(make(), 2, seed=1, collate_fn=list).set_epoch(middle)
            last = middle
        except ValueError:
            high = middle
    assert last < 2**62
    for move in (lambda: loader.set_epoch(last + 1), lambda: loader.seek(last + 1, 1)):
        with pytest.raises(ValueError, match=r"epoch: found"):
            move()
        assert loader.state_dict() == before
    at_the_last = shufflepoint.DataLoader(make(), 2, seed=1, collate_fn=list)
    at_the_last.set_epoch(last)
    edited = at_the_last.state_dict()  # a state one epoch further: written for a longer dataset, or edited
    edited["epoch"] = edited["history"][0][4] = last + 1
    with pytest.raises(StateError, match=r"state field 'epoch': found \d+\n  expected: "):
        loader.load_state_dict(edited)
    assert loader.state_dict() == before
    assert next(iter(at_the_last))  # the last epoch itself reads

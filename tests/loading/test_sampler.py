"""ResumableSampler: a DistributedSampler drop-in, exact under torchdata and a plain DataLoader."""

import pytest
import torch
from torch.utils.data import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import shufflepoint
from resume_contract import Component, assert_resume_contract

N, B, W = 26, 3, 2


def sampler(rank=1, **kwargs):
    return shufflepoint.ResumableSampler(list(range(N)), num_replicas=W, rank=rank, seed=21, **kwargs)


def run_sampler(obj, first_epoch, epochs):
    for epoch in range(first_epoch, epochs):
        obj.set_epoch(epoch)
        for index in obj:
            yield "item", epoch, index
        yield "epoch_end", epoch, None


def test_sampler_resume_contract():
    component = Component("ResumableSampler", sampler, run_sampler, lambda state: state["epoch"])
    assert assert_resume_contract(component) > 30


class _PlainLoader:
    """A plain torch DataLoader over a ResumableSampler, checkpointed through the sampler."""

    def __init__(self, **kwargs):
        self.sampler = sampler(**kwargs)
        self.loader = torch.utils.data.DataLoader(list(range(N)), B, sampler=self.sampler)

    def state_dict(self):
        return self.sampler.state_dict()

    def load_state_dict(self, state):
        self.sampler.load_state_dict(state)


def run_plain(obj, first_epoch, epochs):
    for epoch in range(first_epoch, epochs):
        obj.sampler.set_epoch(epoch)
        for batch in obj.loader:
            yield "item", epoch, batch.tolist()
        yield "epoch_end", epoch, None


def test_plain_dataloader_resume_contract():
    component = Component("plain DataLoader + ResumableSampler", _PlainLoader, run_plain,
                          lambda state: state["epoch"])
    assert assert_resume_contract(component) > 10


class _Stateful:
    def __init__(self, num_workers):
        self.sampler = sampler()
        self.loader = StatefulDataLoader(list(range(N)), B, sampler=self.sampler, num_workers=num_workers)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


def _torchdata_epoch(state):
    """What a user's loop keeps: the epoch it was in, or the next one if the pass had finished."""
    main = state["_snapshot"]["_main_snapshot"] if "_snapshot" in state else state
    ours = main["_sampler_iter_state"]["sampler_state"]
    return ours["epoch"] + (1 if state["_iterator_finished"] else 0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchdata_stateful_dataloader_resume_contract(num_workers):
    component = Component(
        f"StatefulDataLoader(num_workers={num_workers}) + ResumableSampler",
        lambda: _Stateful(num_workers),
        lambda obj, first, epochs: run_plain(obj, first, epochs),
        _torchdata_epoch, json_state=False, round_trips=False,
    )
    assert assert_resume_contract(component, epochs=2, every=1 if num_workers == 0 else 2) >= 5


def test_torch_order_equals_distributed_sampler_exactly():
    for drop_last in (False, True):
        for rank in range(3):
            ours = shufflepoint.ResumableSampler(range(40), 3, rank, seed=5, drop_last=drop_last, order="torch")
            theirs = DistributedSampler(range(40), 3, rank, seed=5, drop_last=drop_last)
            for epoch in range(3):
                ours.set_epoch(epoch)
                theirs.set_epoch(epoch)
                assert list(ours) == list(theirs)
                assert len(ours) == len(theirs)


def test_sampler_state_refuses_a_loader_state():
    loader = shufflepoint.DataLoader(list(range(N)), B, rank=1, world_size=W, seed=21)
    with pytest.raises(shufflepoint.StateError, match="'kind'"):
        sampler().load_state_dict(loader.state_dict())


def test_sampler_defaults_to_one_replica_without_a_process_group():
    s = shufflepoint.ResumableSampler(range(5))
    assert (s.num_replicas, s.rank) == (1, 0)
    assert sorted(s) == list(range(5))


def test_the_sampler_resumes_through_the_loaders_path():
    """The sampler's resume is ``LoaderPosition.load``: a state's block is adopted where the sampler's is the default
    (as the loader does), the rest of the epoch is the run's on every rank, and a block of the caller's own that
    differs is refused by name with nothing changed."""
    from simulated import ShardRows

    def corpus_sampler(rank, **kwargs):
        return shufflepoint.ResumableSampler(ShardRows([9, 7, 11, 5]), num_replicas=2, rank=rank, seed=3, **kwargs)

    run = [corpus_sampler(rank, shuffle_block=4) for rank in range(2)]
    its = [iter(each) for each in run]
    for it in its:
        for _ in range(5):
            next(it)
    state = run[0].state_dict()
    resumed = [corpus_sampler(rank) for rank in range(2)]
    for each in resumed:
        each.load_state_dict(dict(state))
    assert resumed[0].state_dict() == state  # shuffle_block 4, adopted
    assert [list(each) for each in resumed] == [list(it) for it in its]
    chosen = corpus_sampler(0, shuffle_block=8)
    with pytest.raises(shufflepoint.StateError, match=r"'shuffle_block': found 4\n  expected: 8"):
        chosen.load_state_dict(dict(state))
    assert chosen.state_dict()["shuffle_block"] == 8 and chosen.state_dict()["cursor"] == 0

"""``loader.which(step)`` equals what every rank received at that step, over runs with resizes, batch-size
changes, epochs, jumps and save/load in between (ranks simulated in one process); ``set_batch_size``
keeps every sample once per epoch and a resume exact."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError
from simulated import ShardRows

SEED = 11


def make(n: int, batch_size: int, **options):
    """A loader over a list of n samples, or, n being a tuple of shard rows, over a corpus of those shards."""
    if isinstance(n, tuple):
        return shufflepoint.DataLoader(ShardRows(n), batch_size, seed=SEED, shuffle_block=3, **options)
    return shufflepoint.DataLoader(list(range(n)), batch_size, seed=SEED, **options)


def world(n, world_size: int, batch_size: int, drop_last: bool, deal: str, state=None):
    loaders = [make(n, batch_size, rank=r, world_size=world_size, drop_last=drop_last, deal=deal)
               for r in range(world_size)]
    for loader in loaders:
        if state is not None:
            loader.load_state_dict(state)
    return loaders


class Run:
    """Every rank's loader of the current world, their live iterators, and what each step served."""

    def __init__(self, loaders):
        self.loaders, self.iterators = loaders, None
        self.received: dict[int, dict[int, list[int]]] = {}

    def read(self, batches: int) -> None:
        empty_passes = 0
        while batches > 0 and empty_passes < 2:
            if self.iterators is None:
                self.iterators = [iter(loader) for loader in self.loaders]
            step = self.loaders[0].step
            assert all(loader.step == step for loader in self.loaders)
            got = [next(it, None) for it in self.iterators]
            if got[0] is None:
                assert all(batch is None for batch in got), "ranks disagree on the end of the epoch"
                self.iterators, empty_passes = None, empty_passes + 1
                continue
            empty_passes, batches = 0, batches - 1
            assert step not in self.received
            self.received[step] = {rank: batch.tolist() for rank, batch in enumerate(got)}

    def state(self) -> dict:
        states = [json.loads(json.dumps(loader.state_dict())) for loader in self.loaders]
        assert all(state == states[0] for state in states)
        return states[0]


def check_which(state: dict, received: dict[int, dict[int, list[int]]], n: int, deal: str, data) -> None:
    """A loader on any world size and rank, loaded with ``state``, places every step up to the state's."""
    world_size = data.draw(st.integers(1, 4), label="looking world")
    rank = data.draw(st.integers(0, world_size - 1), label="looking rank")
    batch_size = data.draw(st.integers(1, 5), label="looking batch")
    looking = make(n, batch_size, rank=rank, world_size=world_size, deal=deal)
    looking.load_state_dict(state)
    for step, served in received.items():
        if step < state["steps"]:
            assert looking.which(step) == served, f"step {step}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 40) | st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(0, 9)),
       deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_which_equals_what_every_rank_received(n, deal, data):
    """n: a list of n samples, or a corpus of three shards of those rows (the ``blocks`` order)."""
    warnings.simplefilter("ignore", shufflepoint.ResumeWarning)  # a resize after set_batch_size: on purpose
    warnings.simplefilter("ignore", UserWarning)  # seeks past an epoch's end: on purpose
    drop_last = data.draw(st.booleans(), label="drop_last")
    run = Run(world(n, data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5)), drop_last, deal))
    for _ in range(data.draw(st.integers(1, 5), label="phases")):
        action = data.draw(st.sampled_from(["read", "batch size", "set_epoch", "seek", "resize"]), label="action")
        if action == "batch size":  # between two batches of the live iterators
            batch_size = data.draw(st.integers(1, 5), label="new batch")
            for loader in run.loaders:
                loader.set_batch_size(batch_size)
        elif action == "set_epoch":
            epoch = data.draw(st.integers(0, 3), label="epoch")
            for loader in run.loaders:
                loader.set_epoch(epoch)
            run.iterators = None
        elif action == "seek":
            epoch, batches = data.draw(st.integers(0, 3), label="epoch"), data.draw(st.integers(0, 6), label="batches")
            for loader in run.loaders:
                loader.seek(epoch, batches)
            run.iterators = None
        elif action == "resize":
            state = run.state()
            check_which(state, run.received, n, deal, data)
            drop_last = data.draw(st.booleans(), label="drop_last")
            resized = world(n, data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5)), drop_last, deal, state)
            run.loaders, run.iterators = resized, None
        run.read(data.draw(st.integers(0, 12), label="batches"))
    state = run.state()
    check_which(state, run.received, n, deal, data)
    # the future of the unchanged layout: answered before it is read
    future = {step: run.loaders[0].which(step) for step in range(state["steps"], state["steps"] + 8)
              if _placed(run.loaders[0], step)}
    run.read(8)
    assert {step: run.received[step] for step in future} == future


def _placed(loader, step):
    try:
        loader.which(step)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("workers", [dict(num_workers=0), dict(num_workers=2),
                                     dict(num_workers=2, persistent_workers=True)])
def test_set_batch_size_mid_epoch_serves_every_sample_once_and_resumes_exactly(workers):
    n = 50
    loader = shufflepoint.DataLoader(list(range(n)), 2, seed=3, **workers)
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(4)]
    loader.set_batch_size(5)
    assert loader.batch_size == 5 and len(loader) == 10
    seen.append(next(it).tolist())  # the same iterator goes on, at the new size
    assert len(seen[-1]) == 5
    state = loader.state_dict()
    rest = [batch.tolist() for batch in it]
    assert sorted(i for batch in seen + rest for i in batch) == list(range(n))
    assert [len(b) for b in seen + rest] == [2, 2, 2, 2] + [5] * 8 + [2]
    assert state["history"] == [[0, 1, 2, 0, 0, 0], [4, 1, 5, 0]]
    resumed = shufflepoint.DataLoader(list(range(n)), 5, seed=3)  # built as for the new size
    resumed.load_state_dict(state)
    assert [batch.tolist() for batch in resumed] == rest
    assert [resumed.which(s)[0] for s in range(len(seen))] == seen


def test_set_batch_size_refuses_bad_input_by_name_and_changes_nothing():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=3)
    before = loader.state_dict()
    for bad, error in [(0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError), (2**31 + 1, ValueError)]:
        with pytest.raises(error, match="batch_size: found"):
            loader.set_batch_size(bad)
    assert loader.state_dict() == before and loader.batch_size == 2


def test_an_iterator_superseded_otherwise_still_refuses():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=3)
    old = iter(loader)
    next(old)
    loader.set_batch_size(3)
    iter(loader)  # a newer iterator: the old one no longer follows
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)


def test_which_says_which_steps_it_can_no_longer_place():
    """40 batch-size changes: the latest 32 are kept, and the steps from the first kept one on are still
    placed exactly, after a JSON round trip too; earlier ones are refused, naming the first placed step."""
    loader = shufflepoint.DataLoader(list(range(400)), 1, seed=3, world_size=2, rank=1)
    it, received = iter(loader), {}
    for size in range(2, 42):
        step = loader.step
        received[step] = next(it).tolist()
        loader.set_batch_size(size % 5 + 1 if size % 5 + 1 != loader.batch_size else 7)
    for _ in range(10):
        step, batch = loader.step, next(it, None)
        if batch is None:
            it = iter(loader)
            continue
        received[step] = batch.tolist()
    state = json.loads(json.dumps(loader.state_dict()))
    first = state["history"][0][0]
    assert len(state["history"]) == 33 and first == 8 and len(state["history"][0]) == 6
    fresh = shufflepoint.DataLoader(list(range(400)), 3, seed=3, world_size=3, rank=0)
    fresh.load_state_dict(state)  # its own layout is one more leg: the oldest kept one goes
    first = fresh.state_dict()["history"][0][0]
    assert first == 9
    assert all(fresh.which(step)[1] == batch for step, batch in received.items() if step >= first)
    with pytest.raises(ValueError, match=f"step: found {first - 1}\n"
                                         f"  expected: a step from {first} on, where this history starts"):
        fresh.which(first - 1)
    with pytest.raises(ValueError, match="step: found -1"):
        fresh.which(-1)


def test_the_example_of_the_steps_module():
    loader = shufflepoint.DataLoader(list(range(10)), batch_size=2, world_size=2, rank=0, seed=1)
    batches = [b.tolist() for b in loader]
    assert loader.which(1)[0] == batches[1]


GOLDEN_V2 = {  # written by shufflepoint 0.3: 2 ranks x 4, epoch 1, 3 batches into it
    "format": "shufflepoint", "version": 2, "kind": "loader", "seed": 1234, "epoch": 1, "cursor": 24, "n": 64,
    "shuffle": True, "order": "radix-feistel", "order_version": 1, "world_size": 2, "batch_size": 4,
    "drop_last": False, "torch_version": None, "dataset_fingerprint": None, "deal": "strided", "segments": [],
}
GOLDEN_V2_SPANS = dict(GOLDEN_V2, deal="spans", segments=[[4, 2], [2, 4]], cursor=8 + 8, batch_size=2)


def test_a_version_2_state_loads_and_its_steps_are_counted_from_its_layout():
    loader = shufflepoint.DataLoader(list(range(64)), 4, seed=1234, rank=0, world_size=2)
    loader.load_state_dict(dict(GOLDEN_V2))
    assert (loader.epoch, loader.cursor, loader.step) == (1, 24, 8 + 3)
    state = loader.state_dict()
    assert state["version"] == 4 and state["history"] == [[11, 2, 4, 0, 1, 24]]
    uninterrupted = shufflepoint.DataLoader(list(range(64)), 4, seed=1234, rank=0, world_size=2)
    served = [b.tolist() for b in uninterrupted] + [b.tolist() for b in uninterrupted]  # epochs 0 and 1
    assert [loader.which(s)[0] for s in range(11, 16)] == served[11:16]
    with pytest.raises(ValueError, match="step: found 10\n  expected: a step from 11 on, where this history starts"):
        loader.which(10)


def test_a_version_2_spans_state_loads():
    loader = shufflepoint.DataLoader(list(range(64)), 2, seed=1234, rank=1, world_size=2, deal="spans")
    loader.load_state_dict(dict(GOLDEN_V2_SPANS))
    assert (loader.epoch, loader.cursor) == (1, 16)
    assert loader.step == 16 + 4  # 16 batches an epoch on 2 x 2, 12 left
    rest = [b.tolist() for b in loader]
    assert len(rest) == 12
    reloaded = shufflepoint.DataLoader(list(range(64)), 2, seed=1234, rank=1, world_size=2, deal="spans")
    reloaded.load_state_dict(dict(GOLDEN_V2_SPANS))
    first = reloaded.step
    assert [reloaded.which(first + k)[1] for k in range(len(rest))] == rest


def test_a_version_2_sampler_state_loads():
    sampler = shufflepoint.ResumableSampler(range(64), num_replicas=2, rank=1, seed=1234)
    sampler.load_state_dict(dict(GOLDEN_V2, kind="sampler", batch_size=1))
    state = sampler.state_dict()
    assert (state["version"], state["steps"], state["history"]) == (4, 32 + 12, [[44, 2, 1, 0, 1, 24]])
    uninterrupted = shufflepoint.ResumableSampler(range(64), num_replicas=2, rank=1, seed=1234)
    uninterrupted.set_epoch(1)
    assert list(sampler) == list(uninterrupted)[12:]


def test_every_state_the_loader_writes_loads_at_the_last_epoch():
    loader = shufflepoint.DataLoader(list(range(6)), 2, seed=1)
    loader.set_epoch(2**62)
    assert len(list(loader)) == 3
    state = loader.state_dict()
    assert state["epoch"] == 2**62  # the last epoch stays at its end: no epoch the orders refuse
    fresh = shufflepoint.DataLoader(list(range(6)), 2, seed=1)
    fresh.load_state_dict(state)
    with pytest.raises(ValueError, match="epoch: found 4611686018427387904\n  expected: an epoch the loader has not "
                                         "finished.*\n  why: epoch 4611686018427387904 is the last"):
        iter(fresh)
    with pytest.raises(StateError, match="'epoch': found 4611686018427387905\n  expected: an int in"):
        fresh.load_state_dict(dict(state, epoch=2**62 + 1))
    with pytest.raises(ValueError, match="epoch: found 4611686018427387905"):
        fresh.set_epoch(2**62 + 1)
    with pytest.raises(ValueError, match="epoch: found 4611686018427387905"):
        fresh.seek(2**62 + 1)
    assert fresh.state_dict() == state


def test_the_65th_world_size_of_an_epoch_folds_it_and_is_read_on():
    n, state = 4000, None
    for number in range(64):
        size = 2 + number % 2  # 2, 3, 2, 3, ...: a new world size each time
        loader = shufflepoint.DataLoader(list(range(n)), 1, seed=5, rank=0, world_size=size, deal="spans")
        if state is not None:
            loader.load_state_dict(state)
        next(iter(loader))
        state = loader.state_dict()
    assert len(state["segments"]) == 64 and state["version"] == 4
    other = shufflepoint.DataLoader(list(range(n)), 1, seed=5, rank=0, world_size=2, deal="spans")
    other.load_state_dict(state)  # the 65th world size: the epoch folds (issue 33; no refusal)
    next(iter(other))
    folded = other.state_dict()
    assert folded["segments"][-1] == [0, 2] and len(folded["segments"]) == 65 and folded["version"] == 5
    fresh = shufflepoint.DataLoader(list(range(n)), 1, seed=5, rank=0, world_size=2, deal="spans")
    fresh.load_state_dict(folded)
    assert fresh.state_dict() == folded


def test_torch_refuses_batch_size_assignment_so_the_loader_sets_it_itself():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=3)
    with pytest.raises(ValueError):
        loader.batch_size = 3
    loader.set_batch_size(3)
    assert loader.batch_sampler.batch_size == 3 and isinstance(next(iter(loader)), torch.Tensor)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 30), deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_every_state_the_sampler_writes_loads(n, deal, data):
    """ResumableSampler writes the same format (its steps count samples): over epochs, partial passes,
    jumps and resizes, each state it writes loads, and its steps count what it yielded."""
    yielded, state = 0, None
    for _ in range(data.draw(st.integers(1, 4), label="phases")):
        world_size = data.draw(st.integers(1, 3), label="world")
        sampler = shufflepoint.ResumableSampler(range(n), num_replicas=world_size, rank=0, seed=2, deal=deal,
                                                drop_last=data.draw(st.booleans(), label="drop_last"))
        if state is not None:
            sampler.load_state_dict(state)
        for _ in range(data.draw(st.integers(0, 3), label="passes")):
            how = data.draw(st.sampled_from(["keep", "set_epoch", "attribute"]), label="epoch change")
            if how == "set_epoch":
                sampler.set_epoch(data.draw(st.integers(0, 3), label="epoch"))
            elif how == "attribute":  # DistributedSampler's own attribute, set directly
                sampler.epoch = data.draw(st.integers(0, 3), label="epoch")
            it = iter(sampler)
            taken = len([i for _, i in zip(range(data.draw(st.integers(0, 12), label="take")), it, strict=False)])
            yielded += taken
        if data.draw(st.booleans(), label="attribute before saving"):
            sampler.epoch = data.draw(st.integers(0, 3), label="epoch")
        state = json.loads(json.dumps(sampler.state_dict()))
        assert state["steps"] == yielded
        shufflepoint.ResumableSampler(range(n), num_replicas=2, rank=1, seed=2, deal=deal).load_state_dict(state)

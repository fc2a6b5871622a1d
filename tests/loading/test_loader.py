"""shufflepoint.DataLoader in one process: semantics, the resume contract, torch options."""

import json
import threading
import types

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

import shufflepoint
from resume_contract import Component, assert_resume_contract


def ids(batch):
    if isinstance(batch, dict):
        batch = batch["id"]
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    return batch.tolist()


def run_loader(loader, first_epoch, epochs):
    for epoch in range(first_epoch, epochs):
        loader.set_epoch(epoch)  # the usual loop; a no-op for the restored epoch
        for batch in loader:
            yield "item", epoch, ids(batch)
        yield "epoch_end", epoch, None


def loader_component(n=23, batch_size=3, rank=1, world_size=2, **kwargs):
    return Component(
        name=f"DataLoader(n={n}, B={batch_size}, r={rank}/{world_size}, {kwargs})",
        make=lambda: shufflepoint.DataLoader(
            list(range(n)), batch_size, rank=rank, world_size=world_size, seed=11, **kwargs),
        run=run_loader,
        resume_epoch=lambda state: state["epoch"],
    )


@pytest.mark.parametrize("kwargs", [
    dict(), dict(drop_last=True), dict(shuffle=False), dict(order="torch"),
    dict(n=8, batch_size=4, rank=0, world_size=2), dict(n=5, batch_size=2, rank=2, world_size=3),
])
def test_loader_resume_contract(kwargs):
    assert assert_resume_contract(loader_component(**kwargs)) >= 6


def test_loader_resume_contract_with_workers():
    component = loader_component(n=30, batch_size=4, num_workers=2, persistent_workers=True,
                                 prefetch_factor=2)
    assert assert_resume_contract(component, epochs=2, every=3) >= 4


def test_loader_without_set_epoch_advances_by_itself():
    loader = shufflepoint.DataLoader(list(range(12)), 3, seed=5)
    first, second = [ids(b) for b in loader], [ids(b) for b in loader]
    assert sorted(sum(first, [])) == sorted(sum(second, [])) == list(range(12))
    assert first != second
    assert loader.epoch == 2 and loader.cursor == 0
    expected = shufflepoint.permutation(12, 5, 1)[:].tolist()
    assert sum(second, []) == expected


def test_state_is_small_json_and_the_same_on_every_rank():
    loaders = [shufflepoint.DataLoader(list(range(100)), 4, rank=r, world_size=3, seed=2) for r in range(3)]
    iterators = [iter(loader) for loader in loaders]
    for _ in range(5):
        for it in iterators:
            next(it)
    states = [loader.state_dict() for loader in loaders]
    assert states[0] == states[1] == states[2]
    assert states[0]["cursor"] == 5 * 4 * 3 and states[0]["epoch"] == 0
    assert len(json.dumps(states[0])) <= 512
    assert tuple(states[0]) == shufflepoint.STATE_FIELDS


def test_state_counts_received_batches_not_prefetched_ones():
    loader = shufflepoint.DataLoader(list(range(200)), 2, num_workers=2, prefetch_factor=4, seed=1)
    it = iter(loader)
    next(it)
    next(it)
    assert loader.cursor == 4  # workers have fetched far more by now


def test_mid_epoch_state_survives_set_epoch_of_the_same_epoch():
    loader = shufflepoint.DataLoader(list(range(20)), 2, seed=3)
    for _ in range(2):
        for _ in loader:
            pass
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    fresh = shufflepoint.DataLoader(list(range(20)), 2, seed=3)
    fresh.load_state_dict(state)
    fresh.set_epoch(2)
    assert fresh.cursor == 2 and fresh.epoch == 2
    fresh.set_epoch(3)
    assert fresh.cursor == 0 and fresh.epoch == 3


def test_superseded_iterator_refuses_to_continue():
    loader = shufflepoint.DataLoader(list(range(20)), 2)
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert ids(next(new)) == shufflepoint.permutation(20, 0, 0)[2:4].tolist()  # continues the cursor
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)


def test_last_batch_and_between_epochs_are_different_states():
    loader = shufflepoint.DataLoader(list(range(8)), 4, seed=9)
    it = iter(loader)
    next(it)
    next(it)
    at_last_batch = loader.state_dict()
    with pytest.raises(StopIteration):
        next(it)
    between = loader.state_dict()
    assert (at_last_batch["epoch"], at_last_batch["cursor"]) == (0, 8)
    assert (between["epoch"], between["cursor"]) == (1, 0)
    resumed = shufflepoint.DataLoader(list(range(8)), 4, seed=9)
    resumed.load_state_dict(at_last_batch)
    assert [ids(b) for b in resumed] == []  # the rest of epoch 0 is empty ...
    assert resumed.epoch == 1  # ... and then epoch 1 follows


def test_elastic_resume_in_process_two_to_three_ranks():
    n, seed = 50, 4
    old = [shufflepoint.DataLoader(list(range(n)), 3, rank=r, world_size=2, seed=seed) for r in range(2)]
    its = [iter(loader) for loader in old]
    seen = [x for _ in range(4) for it in its for x in ids(next(it))]
    state = old[0].state_dict()
    new = [shufflepoint.DataLoader(list(range(n)), 2, rank=r, world_size=3, seed=seed) for r in range(3)]
    for loader in new:
        loader.load_state_dict(state)
    rest = [x for loader in new for b in loader for x in ids(b)]
    counts = np.bincount(seen + rest, minlength=n)
    padding = 3 * new[0]._position.layout.samples_per_rank(state["cursor"]) - (n - state["cursor"])
    assert (counts >= 1).all() and int((counts - 1).sum()) == padding


def test_matches_distributed_sampler_with_the_torch_order():
    dataset = list(range(37))
    for rank in range(3):
        ours = shufflepoint.DataLoader(dataset, 4, rank=rank, world_size=3, seed=8, order="torch")
        sampler = DistributedSampler(dataset, num_replicas=3, rank=rank, seed=8)
        theirs = torch.utils.data.DataLoader(dataset, 4, sampler=sampler)
        for epoch in range(2):
            ours.set_epoch(epoch)
            sampler.set_epoch(epoch)
            assert [ids(b) for b in ours] == [ids(b) for b in theirs]


def test_torch_dataloader_options_work():
    dataset = [{"id": torch.tensor(i), "x": torch.randn(2)} for i in range(16)]
    seen = []
    collate = lambda items: {"id": torch.stack([i["id"] for i in items]), "n": len(items)}  # noqa: E731
    loader = shufflepoint.DataLoader(dataset, 4, num_workers=2, pin_memory=False, persistent_workers=True,
                                     collate_fn=collate, seed=1)
    for _ in range(2):
        seen.append(sorted(x for b in loader for x in b["id"].tolist()))
    assert seen == [list(range(16))] * 2


def test_huggingface_dataset():
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"id": list(range(30)), "x": [float(i) for i in range(30)]})
    dataset = dataset.with_format("torch")
    loader = shufflepoint.DataLoader(dataset, 4, seed=2)
    it = iter(loader)
    first = [ids(next(it)) for _ in range(3)]
    fresh = shufflepoint.DataLoader(dataset, 4, seed=2)
    fresh.load_state_dict(loader.state_dict())
    rest = [ids(b) for b in fresh]
    assert sorted(sum(first + rest, [])) == list(range(30))
    assert sum(first + rest, []) == shufflepoint.permutation(30, 2, 0)[:].tolist()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(sampler=[1]), TypeError, "sampler: found a torch sampler\n  expected: none: .* builds its own order"),
    (dict(batch_sampler=[1]), TypeError, "batch_sampler: found a torch batch_sampler\n  expected: none: "
                                         ".* builds its own order"),
    (dict(rank=2, world_size=2), ValueError, r"rank: found 2\n  expected: an int in \[0, world_size=2\)"),
    (dict(shuffle=1), TypeError, "shuffle: found 1\n  expected: a bool"),
    (dict(seed=-5), ValueError, "seed: found -5"),
    (dict(order="randperm"), ValueError, "order: found 'randperm'"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        shufflepoint.DataLoader(list(range(10)), 2, **kwargs)


def test_iterable_dataset_is_refused():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match="map-style"):
        shufflepoint.DataLoader(Stream(), 2)


def test_two_threads_reading_state_while_iterating_do_not_crash():
    loader = shufflepoint.DataLoader(list(range(1000)), 1)
    states = []
    reader = threading.Thread(target=lambda: [states.append(loader.state_dict()) for _ in range(200)])
    reader.start()
    for _ in loader:
        pass
    reader.join()
    assert all(0 <= s["cursor"] <= 1000 for s in states)


def test_frameworks_that_count_batches_move_epochs_through_sampler_set_epoch():
    """Lightning stops after len(loader) batches without exhausting the iterator."""
    loader = shufflepoint.DataLoader(list(range(12)), 3, seed=4)
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)  # what Lightning's _set_sampler_epoch calls
        it = iter(loader)
        got = [ids(next(it)) for _ in range(len(loader))]
        assert sum(got, []) == shufflepoint.permutation(12, 4, epoch)[:].tolist()


def test_seek_equals_the_uninterrupted_continuation():
    for world_size, drop_last in ((1, False), (2, False), (3, True)):
        whole = [shufflepoint.DataLoader(list(range(29)), 2, seed=8, rank=r, world_size=world_size,
                                         drop_last=drop_last) for r in range(world_size)]
        reference = [[ids(b) for _ in range(2) for b in loader] for loader in whole]
        per_epoch = len(whole[0])
        for global_step in range(2 * per_epoch + 1):
            epoch, batches = divmod(global_step, per_epoch)
            for rank in range(world_size):
                fresh = shufflepoint.DataLoader(list(range(29)), 2, seed=8, rank=rank, world_size=world_size,
                                                drop_last=drop_last)
                fresh.seek(epoch, batches)
                rest = [ids(b) for _ in range(2) for b in fresh if fresh.epoch < 2]
                assert rest[: len(reference[rank]) - global_step] == reference[rank][global_step:]


def test_a_new_iter_after_every_batch_of_the_epoch_was_received_reads_the_next_epoch():
    # zip(range(len(loader)), loader) takes every batch without running the pass out; torch's loader then
    # starts anew, and so does this one: the next epoch, not an empty rest of this one.
    loader = shufflepoint.DataLoader(list(range(12)), 4, seed=1, collate_fn=list)
    epochs = [[b for _, b in zip(range(len(loader)), loader, strict=False)] for _ in range(3)]
    assert [sorted(i for b in epoch for i in b) for epoch in epochs] == [list(range(12))] * 3
    assert epochs[0] != epochs[1] and loader.epoch == 2
    state = loader.state_dict()  # saved after the last batch: a resumed loader reads the (empty) rest first
    resumed = shufflepoint.DataLoader(list(range(12)), 4, seed=1, collate_fn=list)
    resumed.load_state_dict(state)
    assert list(resumed) == [] and resumed.epoch == 3 and len(list(resumed)) == 3


class _Announced(torch.utils.data.Dataset):
    """A dataset told its upcoming indices, which says whether it has anything to fetch ahead."""

    def __init__(self, reads_ahead: bool) -> None:
        self.reads_ahead, self.told = reads_ahead, []

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return index

    def prefetch(self, indices) -> None:
        self.told.append(list(np.asarray(indices).tolist()))

    def _loader_hooks(self):  # ReadsAhead, as a Shards of local files says it has nothing to fetch
        return types.SimpleNamespace(reads_ahead=self.reads_ahead)


@pytest.mark.parametrize("reads_ahead", [True, False])
def test_upcoming_indices_are_announced_only_to_a_dataset_that_reads_ahead(reads_ahead):
    dataset = _Announced(reads_ahead)
    loader = shufflepoint.DataLoader(dataset, batch_size=8, seed=3)
    served = [int(i) for batch in loader for i in batch]
    if reads_ahead:  # every index told before it is served, in serving order
        assert [i for chunk in dataset.told for i in chunk] == served
    else:  # a local corpus: nothing to fetch, so the next chunk is not worked out ahead
        assert dataset.told == []
    assert sorted(served) == list(range(64))

"""Keyed randomness in one process: the per-sample stream is a function of (seed, epoch, index) only.

Real processes (world size 2 -> 3, num_workers 0 -> 2 -> 4) are in
``tests/distributed/test_augment_resume.py``.
"""

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._loading.keyed import KeyedDataset
from shufflepoint._loading.randomness import batch_rng, seeded_globals


class Augmented(torch.utils.data.Dataset):
    """Draws from all three global RNGs, as torchvision transforms, numpy code and `random` do."""

    def __init__(self, n=40):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        noise = torch.rand(4) + float(np.random.rand()) + random.random()
        return {"id": index, "x": torch.full((4,), float(index)) + noise}


def explicit(sample, rng):
    return dict(sample, y=float(rng.normal()), g=torch.rand(2, generator=shufflepoint.torch_generator(rng)))


def content(loaders):
    """{(epoch, id): sample content} over every batch of every loader (one pass each)."""
    found = {}
    for loader in loaders:
        epoch = loader.epoch
        for batch in loader:
            for k, index in enumerate(batch["id"].tolist()):
                row = (batch["x"][k].tolist(), float(batch["y"][k]), batch["g"][k].tolist())
                assert found.setdefault((epoch, index), row) == row, "a sample got two contents"
    return found


def ranks(world_size, batch_size, num_workers=0, seed=7, epoch=0, n=40):
    made = []
    for rank in range(world_size):
        loader = shufflepoint.DataLoader(Augmented(n), batch_size, seed=seed, rank=rank, world_size=world_size,
                                         num_workers=num_workers, transform=explicit, seed_per_sample=True)
        loader.set_epoch(epoch)
        made.append(loader)
    return made


def test_sample_rng_is_a_pure_function_of_seed_epoch_and_index():
    a, b = shufflepoint.sample_rng(1, 2, 3), shufflepoint.sample_rng(1, 2, 3)
    assert isinstance(a.bit_generator, np.random.Philox)
    assert a.integers(0, 2**62, 8).tolist() == b.integers(0, 2**62, 8).tolist()
    draws = {key: shufflepoint.sample_rng(*key).integers(0, 2**62) for key in
             [(1, 2, 3), (1, 2, 4), (1, 3, 3), (2, 2, 3), (2**32 + 1, 2, 3), (1, 2 + 2**32, 3), (1, 2, 3 + 2**32)]}
    assert len(set(draws.values())) == len(draws)  # no two keys share a stream (fixed-width encoding)


def test_sample_and_batch_streams_never_coincide():
    assert shufflepoint.sample_rng(5, 0, 9).integers(0, 2**62) != batch_rng(5, 0, 9).integers(0, 2**62)


def test_golden_values_pin_the_sample_stream():
    """A change of the key derivation would change every augmentation of every saved run."""
    assert shufflepoint.sample_rng(1234, 0, 0).integers(0, 2**31, 3).tolist() == GOLDEN_1234_0_0
    assert shufflepoint.sample_rng(2**64 - 1, 2**62, 2**63 - 1).integers(0, 2**31, 2).tolist() == GOLDEN_MAX


GOLDEN_1234_0_0 = [953342934, 184903993, 1026743960]
GOLDEN_MAX = [1569851388, 1430449574]


@pytest.mark.parametrize("field, value, error", [
    ("seed", -1, ValueError), ("epoch", 2**62 + 1, ValueError), ("index", 1.5, TypeError), ("index", True, TypeError),
])
def test_sample_rng_refuses_bad_keys_naming_the_field(field, value, error):
    key = {"seed": 1, "epoch": 0, "index": 0, field: value}
    with pytest.raises(error, match=field):
        shufflepoint.sample_rng(**key)


def test_seeded_globals_restores_every_global_stream_even_on_error():
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    expected = (torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random())
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    with pytest.raises(KeyError), seeded_globals(shufflepoint.sample_rng(0, 0, 1)):
        torch.rand(5), np.random.rand(5), random.random()
        raise KeyError("inside")
    assert (torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()) == expected


def test_seeded_globals_makes_global_draws_a_function_of_the_key():
    def draw(index):
        with seeded_globals(shufflepoint.sample_rng(0, 1, index)):
            return torch.rand(3).tolist(), np.random.rand(), random.random()

    assert draw(4) == draw(4) and draw(4) != draw(5)


@settings(max_examples=25, deadline=None)
@given(world_size=st.integers(1, 4), batch_size=st.integers(1, 9), epoch=st.integers(0, 3))
def test_a_sample_gets_the_same_content_whatever_the_ranks_and_batches(world_size, batch_size, epoch):
    reference = content(ranks(1, 5, epoch=epoch))
    assert len(reference) == 40
    assert content(ranks(world_size, batch_size, epoch=epoch)) == reference


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_worker_processes_draw_what_the_main_process_draws():
    reference = content(ranks(1, 4))
    assert content(ranks(2, 3, num_workers=2)) == reference
    assert content(ranks(1, 5, num_workers=4)) == reference


def test_epochs_and_seeds_draw_anew():
    first = content(ranks(1, 4, epoch=0))
    assert content(ranks(1, 4, epoch=1)).get((1, 0)) != first[(0, 0)]
    assert content(ranks(1, 4, seed=8))[(0, 0)] != first[(0, 0)]


def test_a_resumed_loader_serves_the_same_augmented_batches():
    def batches(loader, count=None):
        out = []
        for batch in loader:
            out.append((batch["id"].tolist(), batch["x"].tolist(), batch["y"].tolist()))
            if count is not None and len(out) == count:
                break
        return out

    uninterrupted = batches(ranks(1, 4, num_workers=2)[0])
    first = ranks(1, 4, num_workers=2)[0]
    before = batches(first, 3)
    state = first.state_dict()
    resumed = ranks(1, 4, num_workers=0)[0]
    torch.manual_seed(999), np.random.seed(999), random.seed(999)  # whatever the new process's RNGs hold
    resumed.load_state_dict(state)
    assert before + batches(resumed) == uninterrupted


def masking_collate(samples):
    """An MLM-style collator on torch's global RNG: mask 30% of the positions."""
    tokens = torch.stack([torch.arange(16) + 100 * s["id"] for s in samples])
    mask = torch.rand(tokens.shape) < 0.3
    return {"id": torch.tensor([s["id"] for s in samples]), "tokens": tokens.masked_fill(mask, -1)}


def test_collate_time_randomness_is_keyed_by_the_batch():
    def run(num_workers, rank=0, world_size=1):
        loader = shufflepoint.DataLoader(Augmented(), 4, seed=2, seed_per_sample=True, collate_fn=masking_collate,
                                         num_workers=num_workers, rank=rank, world_size=world_size)
        return [(b["id"].tolist(), b["tokens"].tolist()) for b in loader]

    reference = run(0)
    assert run(2) == reference
    masks = [[value == -1 for row in tokens for value in row] for _ids, tokens in reference]
    assert len({str(m) for m in masks}) == len(masks)  # every batch masks its own way
    assert run(0, rank=1, world_size=2) != reference[1::2]  # another cut is another batch, another mask


def test_without_the_opt_in_the_dataset_is_untouched():
    dataset = Augmented()
    loader = shufflepoint.DataLoader(dataset, 4)
    assert loader.dataset is dataset


def test_with_the_opt_in_the_wrapper_forwards_to_the_dataset():
    dataset = Augmented(12)
    dataset.label = "mine"
    loader = shufflepoint.DataLoader(dataset, 4, seed_per_sample=True)
    assert isinstance(loader.dataset, KeyedDataset) and loader.dataset.dataset is dataset
    assert len(loader.dataset) == 12 and loader.dataset.label == "mine"
    assert loader.state_dict()["n"] == 12


def test_batched_datasets_keep_their_batched_reads():
    class Batched(Augmented):
        calls = 0

        def __getitems__(self, indices):
            Batched.calls += 1
            return [self[i] for i in indices]

    loader = shufflepoint.DataLoader(Batched(12), 4, seed=1, transform=explicit)
    assert sorted(i for b in loader for i in b["id"].tolist()) == list(range(12))
    assert Batched.calls == 3


@pytest.mark.parametrize("kwargs, field", [
    (dict(transform=3), "transform"), (dict(seed_per_sample=1), "seed_per_sample"),
])
def test_bad_options_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(TypeError, match=field):
        shufflepoint.DataLoader(Augmented(), 4, **kwargs)

"""The default order is radix-feistel; a loader reading it (left to the default or passed) resumes a state saved
under 0.1's default (feistel) in feistel, so an upgrade never changes a running job's data order."""

import json

import pytest

import shufflepoint

# A state exactly as shufflepoint 0.1 wrote it (docs/state-format.md): the default order then was feistel.
STATE_01 = json.loads(
    '{"format": "shufflepoint", "version": 1, "kind": "loader", "seed": 1234, "epoch": 1, "cursor": 24, '
    '"n": 64, "shuffle": true, "order": "feistel", "order_version": 1, "world_size": 2, "batch_size": 4, '
    '"drop_last": false, "torch_version": null, "dataset_fingerprint": null}'
)


def batches(loader, count=None):
    out = []
    for batch in loader:
        out.append(batch.tolist())
        if count is not None and len(out) == count:
            break
    return out


def loader(order=None, **kwargs):
    return shufflepoint.DataLoader(list(range(64)), 4, seed=1234, rank=0, world_size=2, order=order, **kwargs)


def test_the_default_is_radix_feistel_and_matches_permutation():
    fresh = loader()
    assert fresh.state_dict()["order"] == "radix-feistel"
    assert sum(batches(fresh), []) == shufflepoint.permutation(64, 1234, 0)[0::2].tolist()


def test_a_01_state_resumes_in_feistel_under_the_default():
    reference = loader("feistel")
    reference.seek(1)
    reference_batches = batches(reference)  # epoch 1 of a feistel run, from its start
    resumed = loader()
    resumed.load_state_dict(STATE_01)
    assert resumed.state_dict()["order"] == "feistel"
    assert batches(resumed) == reference_batches[3:]  # cursor 24 = 3 global steps of 2 ranks x 4
    assert batches(resumed, 2) == batches(reference, 2)  # and the next epoch stays in feistel


def test_the_default_order_passed_or_not_resumes_a_01_state_alike():
    """order=None and the order it resolves to are the same loader: nothing remembers which was written."""
    default, passed = loader(), loader("radix-feistel")
    default.load_state_dict(STATE_01)
    passed.load_state_dict(STATE_01)
    assert default.state_dict() == passed.state_dict() and passed.state_dict()["order"] == "feistel"
    assert batches(default) == batches(passed)


def test_another_chosen_order_is_never_overridden():
    chosen_feistel = loader("feistel")
    state = loader().state_dict()  # radix-feistel
    with pytest.raises(shufflepoint.StateError, match="'order'"):
        chosen_feistel.load_state_dict(state)


def test_a_refused_state_does_not_switch_the_order():
    fresh = loader()
    with pytest.raises(shufflepoint.StateError, match="'seed'"):
        fresh.load_state_dict(dict(STATE_01, seed=1))
    assert fresh.state_dict()["order"] == "radix-feistel"
    assert sum(batches(fresh), []) == shufflepoint.permutation(64, 1234, 0)[0::2].tolist()


def test_the_sampler_follows_a_01_state_too():
    state = dict(STATE_01, kind="sampler", batch_size=1, cursor=10)
    reference = shufflepoint.ResumableSampler(range(64), 2, 1, seed=1234, order="feistel")
    reference.set_epoch(1)
    expected = list(reference)[5:]  # cursor 10 = 5 positions per rank
    sampler = shufflepoint.ResumableSampler(range(64), 2, 1, seed=1234)
    assert sampler.state_dict()["order"] == "radix-feistel"
    sampler.load_state_dict(state)
    assert list(sampler) == expected
    assert sampler.state_dict()["order"] == "feistel"


def test_torch_and_identity_are_not_defaults_to_follow():
    state = dict(loader("torch").state_dict())
    with pytest.raises(shufflepoint.StateError, match="'order'"):
        loader().load_state_dict(state)

"""``DataLoader(buckets=keys)`` in one process: the position model's questions and moves with buckets, and
what is refused by name. (Resumes in new processes and across world sizes: tests/distributed.)"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError

N = 97
KEYS = np.random.default_rng(3).integers(0, 4, N)


def loaders(world=2, batch=3, seed=5, keys=KEYS, **kwargs):
    return [shufflepoint.DataLoader(list(range(N)), batch, seed=seed, rank=r, world_size=world, buckets=keys,
                                    **kwargs) for r in range(world)]


def steps(group, count=None):
    """[[rank 0's batch, rank 1's batch, ...], ...] for ``count`` steps (the rest of the epoch: None)."""
    found, iters = [], [iter(loader) for loader in group]
    while count is None or len(found) < count:
        batches = [next(it, None) for it in iters]  # every rank's iterator asked, so every pass runs out
        if any(batch is None for batch in batches):
            assert all(batch is None for batch in batches), "the ranks read different numbers of batches"
            break
        found.append([batch.tolist() for batch in batches])
    return found


def test_len_which_and_the_epoch_agree_with_what_is_read():
    group = loaders()
    epoch0 = steps(group)
    assert len(epoch0) == len(group[0]) == group[0].step
    for step, batches in enumerate(epoch0):
        assert group[0].which(step) == dict(enumerate(batches))
        assert all(len(set(KEYS[b].tolist())) == 1 for b in batches)
    epoch1 = steps(group)
    assert group[0].which(len(epoch0)) == dict(enumerate(epoch1[0])) and epoch1 != epoch0


def test_seek_and_set_epoch_are_arithmetic():
    reference = loaders()
    steps(reference)
    epoch1 = steps(reference)
    group = loaders()
    for loader in group:
        loader.seek(1, 4)
    assert steps(group) == epoch1[4:]
    for loader in group:
        loader.set_epoch(1)
    assert steps(group) == epoch1


def served_as_drop_last_says(seen, drop_last, bound):
    """With drop_last=True each sample at most once, at most ``bound`` dropped; with False every sample, at most
    ``bound`` read twice (the padding)."""
    if drop_last:
        assert len(seen) == len(set(seen)) and N - len(seen) <= bound
    else:
        assert set(seen) == set(range(N)) and len(seen) - N <= bound


@pytest.mark.parametrize("drop_last", [False, True])
def test_set_batch_size_mid_epoch_reads_the_rest_once_in_one_bucket_batches(drop_last):
    group = loaders(batch=4, drop_last=drop_last)
    first = steps(group, 5)
    for loader in group:
        loader.set_batch_size(2)
    state = group[0].state_dict()
    rest = steps(group)
    seen = [i for step in first + rest for batch in step for i in batch]
    served_as_drop_last_says(seen, drop_last, 4 * 3 + 4 * 1 + 1 * 2)  # the first segment's fills too
    assert all(len(b) == 2 for step in rest for b in step)
    assert all(len(set(KEYS[b].tolist())) == 1 for step in rest for b in step)
    assert group[0].which(6) == dict(enumerate(rest[1]))
    assert state["deal"] == "buckets" and state["segments"][0] == [4, 10] and state["buckets"].startswith("buckets:")


def test_a_state_resumes_the_same_batches_and_stays_a_few_integers():
    group = loaders()
    before = steps(group, 7)
    state = json.loads(json.dumps(group[0].state_dict()))
    rest = steps(group)
    fresh = loaders()
    for loader in fresh:
        loader.load_state_dict(state)
    assert steps(fresh) == rest and fresh[0].which(3) == dict(enumerate(before[3]))
    assert len(json.dumps(state)) < 1200


def test_a_state_of_other_keys_or_without_buckets_is_refused_by_name():
    state = loaders()[0].state_dict()
    other = loaders(keys=(KEYS + 1) % 4)[0]
    with pytest.raises(StateError, match=r"'buckets': found 'buckets:v2:4:[0-9a-f]+'\n  expected: 'buckets:v2:4:"
                                         r".*\n  why: the keys changed"):
        other.load_state_dict(state)
    older = dict(state, buckets=state["buckets"].replace("buckets:v2:", "buckets:v0:"))
    with pytest.raises(StateError, match="why: the run was written by another version of the bucket interleave"):
        loaders()[0].load_state_dict(older)
    plain = shufflepoint.DataLoader(list(range(N)), 3, seed=5, rank=0, world_size=2)
    with pytest.raises(StateError, match=r"'buckets': .*\n  expected: None \(this loader was built without buckets="):
        plain.load_state_dict(state)
    with pytest.raises(StateError, match=r"'buckets': found None\n.*\n  why: the run was read without buckets"):
        loaders()[0].load_state_dict(plain.state_dict())


def test_a_damaged_bucket_state_is_refused_with_nothing_changed():
    group = loaders()
    steps(group, 3)
    state = json.loads(json.dumps(group[0].state_dict()))
    state["segments"] = [[3, 900]]
    state["cursor"] = 2700
    with pytest.raises(StateError, match="cursor"):
        loaders()[0].load_state_dict(state)
    slots = int((-(-np.bincount(KEYS) // 3)).sum()) + 1  # one more batch of 3 than the buckets hold, padded
    state["segments"], state["cursor"] = [[3, slots]], min(3 * slots, N)  # padded: the cursor stays <= n
    state["history"][-1][5] = [[3, slots]]
    fresh = loaders()[0]
    with pytest.raises(StateError, match=r"(segments|history).*\n  expected: .*at most \d+ slots"):
        fresh.load_state_dict(state)
    assert fresh.step == 0 and fresh.cursor == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(deal="strided"), r"deal: found 'strided'\n  expected: None or 'buckets' with buckets="),
    (dict(order="blocks"), r"order: found 'blocks'\n  expected: None with buckets="),
    (dict(buckets=[0, 1]), r"buckets: found shape \(2,\)\n  expected: one int in \[0, 2147483647\] per sample"),
    (dict(buckets=-KEYS - 1), r"buckets: found key -\d+ at sample 0"),
    (dict(buckets=KEYS.astype(np.float32)), r"buckets: found dtype float32"),
])
def test_arguments_that_do_not_go_with_buckets_are_refused(kwargs, match):
    arguments = {"buckets": KEYS, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        shufflepoint.DataLoader(list(range(N)), 3, **arguments)


def test_exclude_is_refused_by_name():
    loader = loaders(world=1)[0]
    with pytest.raises(ValueError, match=r"exclude: found samples of a loader with buckets=\n  expected: a loader "
                                         "without buckets"):
        loader.exclude([3])
    assert not loader.excluded


def test_without_shuffle_each_bucket_is_read_in_index_order():
    loader = loaders(world=1, shuffle=False)[0]
    batches = [b.tolist() for b in loader]
    for bucket in range(4):
        mine = [i for b in batches for i in b if KEYS[i] == bucket]
        size = int((KEYS == bucket).sum())  # then the last batch filled with the bucket's first samples
        assert mine[:size] == sorted(mine[:size]) and mine[size:] == mine[:len(mine) - size]


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_resize_and_a_new_batch_size_on_load_read_the_rest_once_and_which_places_both_legs(drop_last):
    group = loaders(world=2, batch=3, drop_last=drop_last)
    before = steps(group, 4)
    state = json.loads(json.dumps(group[0].state_dict()))
    resized = loaders(world=3, batch=2, drop_last=drop_last)
    for loader in resized:
        loader.load_state_dict(state)
    after = steps(resized)
    seen = [i for step in before + after for batch in step for i in batch]
    served_as_drop_last_says(seen, drop_last, 4 * (2 - 1) + (3 - 1) * 2 + (0 if drop_last else 4 * (3 - 1)))
    assert all(len(set(KEYS[b].tolist())) == 1 for step in after for b in step)
    assert resized[0].which(2) == dict(enumerate(before[2]))
    assert resized[0].which(4 + 1) == dict(enumerate(after[1]))


def test_the_65th_batch_size_of_an_epoch_is_refused_with_nothing_changed():
    loader = shufflepoint.DataLoader(list(range(400)), 1, seed=1, buckets=[0, 1] * 200)
    batches = iter(loader)
    for size in [1, 2] * 32:
        loader.set_batch_size(size)
        next(batches)
    assert len(loader.state_dict()["segments"]) == 64
    with pytest.raises(ValueError, match=r"batch_size: found 1\n  expected: at most 64 batch sizes in one epoch"):
        loader.set_batch_size(1)
    assert loader.batch_size == 2 and len(next(batches)) == 2


def test_a_dataset_with_its_own_order_is_refused_by_name():
    mixture = shufflepoint.Mixture([(list(range(10)), 0.5), (list(range(10, 20)), 0.5)])
    with pytest.raises(ValueError, match=r"buckets: found keys for a Mixture\n  expected: a map-style dataset"):
        shufflepoint.DataLoader(mixture, 2, buckets=[0] * len(mixture))


def test_the_buckets_deal_without_keys_is_refused_by_name():
    with pytest.raises(ValueError, match=r"deal: found 'buckets'\n  expected: .*comes with buckets=keys"):
        shufflepoint.DataLoader(list(range(10)), 2, deal="buckets")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["segments", "cursor", "steps", "history", "buckets", "epoch"]),
       st.integers(0, 2**40), st.integers(0, 5))
def test_an_edited_bucket_state_is_refused_whole_or_reads_one_bucket_batches(field, value, where):
    group = loaders()
    steps(group, 5)
    state = json.loads(json.dumps(group[0].state_dict()))
    if field == "segments":
        state["segments"] = [[where + 1, value % 60]] if value % 3 else [[3, value]]
    elif field == "history":
        state["history"][-1][4:] = [where, [[where + 1, value % 40]]]
    elif field == "buckets":
        state["buckets"] = f"buckets:v{value % 3}:4:{value:016x}"
    else:
        state[field] = value % 200
    fresh = loaders()[0]
    try:
        fresh.load_state_dict(state)
    except StateError:
        assert fresh.step == 0 and fresh.cursor == 0 and fresh.epoch == 0  # nothing half-applied
        return
    for batch in fresh:
        assert len(set(KEYS[batch.tolist()].tolist())) == 1


@pytest.mark.parametrize("as_keys", [list, lambda k: k.astype(np.int32), lambda k: k.astype(np.uint8),
                                     lambda k: __import__("torch").from_numpy(k)])
def test_keys_as_a_list_an_int_array_of_any_width_or_a_tensor_read_the_same(as_keys):
    reference = [b.tolist() for b in loaders(world=1)[0]]
    assert [b.tolist() for b in loaders(world=1, keys=as_keys(KEYS))[0]] == reference


def test_every_sample_of_every_epoch_is_served_with_drop_last_false_full_one_bucket_batches():
    """The issue's case in small: 2 ranks, batches of 8, 5 buckets; drop_last=False (the default) serves every
    sample every epoch (each bucket's last batch filled from the same bucket), drop_last=True drops the tail."""
    keys = np.random.default_rng(7).integers(0, 5, 203)
    for drop_last in (False, True):
        group = [shufflepoint.DataLoader(list(range(203)), 8, seed=11, rank=r, world_size=2, buckets=keys,
                                         drop_last=drop_last) for r in range(2)]
        for _ in range(3):
            epoch = steps(group)
            batches = [batch for step in epoch for batch in step]
            assert all(len(b) == 8 and len(set(keys[b].tolist())) == 1 for b in batches)
            seen = [i for b in batches for i in b]
            if drop_last:
                assert len(seen) == len(set(seen)) and 203 - len(seen) <= 5 * 7 + 8
            else:
                assert set(seen) == set(range(203)) and len(seen) - 203 <= 5 * 7 + 8
        assert len(group[0]) == len(epoch)


def test_a_state_written_before_padding_resumes_as_the_drop_last_run_it_was():
    """Keys fingerprinted v1 were read dropping the tail whatever drop_last said: such a state resumes exactly
    with drop_last=True, and is refused by name inside an epoch with drop_last=False."""
    group = loaders(drop_last=True)
    steps(group, 6)
    state = json.loads(json.dumps(group[0].state_dict()))
    rest = steps(group)
    old = dict(state, buckets=state["buckets"].replace("buckets:v2:", "buckets:v1:"), drop_last=False,
               history=[[*entry[:3], 0, *entry[4:]] for entry in state["history"]])
    fresh = loaders(drop_last=True)
    for loader in fresh:
        loader.load_state_dict(old)
    assert steps(fresh) == rest and fresh[0].state_dict()["buckets"] == state["buckets"]
    padded = loaders()[0]
    with pytest.raises(StateError, match=r"'drop_last': found True\n  expected: False \(what this loader was built "
                                         r"with\)\n(.|\n)*why: with buckets, drop_last decides"):
        padded.load_state_dict(old)
    assert padded.step == 0 and padded.cursor == 0


def test_drop_last_changes_at_an_epoch_s_start_and_is_refused_inside_one():
    group = loaders(drop_last=True)
    steps(group, 3)
    inside = group[0].state_dict()
    with pytest.raises(StateError, match=r"'drop_last': found True\n  expected: False"):
        loaders()[0].load_state_dict(inside)
    fresh = loaders(drop_last=True)
    epoch0 = steps(fresh)
    for loader in fresh:
        loader.set_epoch(1)
    boundary = fresh[0].state_dict()
    assert boundary["segments"] == [] and boundary["epoch"] == 1
    padded = loaders()
    for loader in padded:
        loader.load_state_dict(boundary)
    epoch1 = steps(padded)
    seen = [i for step in epoch1 for batch in step for i in batch]
    assert set(seen) == set(range(N))
    # which places both legs: epoch 0 read dropping its tail, epoch 1 padded
    assert [padded[0].which(step) for step in range(len(epoch0))] == [dict(enumerate(b)) for b in epoch0]
    assert padded[0].which(len(epoch0) + len(epoch1) - 1) == dict(enumerate(epoch1[-1]))

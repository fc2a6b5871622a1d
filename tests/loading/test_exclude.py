"""``loader.exclude``: excluded samples never served again, every other once, exact on a resume, once on a resize.

Ranks are simulated in one process here (the arithmetic); real processes, the resume in new ones on
another world size: tests/distributed/test_audit_exclude.py (``shufflepoint audit --exclude``), and the
cross-rank check of the indices: tests/distributed/test_exclude_agreement.py and test_mesh.py.
"""


import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError
from simulated import check_served, lockstep, stopped_and_resumed


def loaders(n, world, batch, **kwargs):
    return [shufflepoint.DataLoader(list(range(n)), batch, rank=r, world_size=world, **kwargs) for r in range(world)]


ORDERS = ("radix-feistel", "feistel", "torch", "identity")
runs = st.fixed_dictionaries({
    "n": st.integers(1, 50), "world": st.integers(1, 3), "batch": st.integers(1, 4),
    "order": st.sampled_from(ORDERS), "seed": st.integers(0, 2**32),
})


@settings(max_examples=60, deadline=None)
@given(run=runs, data=st.data())
def test_excluded_never_served_the_rest_once_and_a_resume_is_exact(run, data):
    n, world, batch = run["n"], run["world"], run["batch"]
    kwargs = dict(seed=run["seed"], order=run["order"], shuffle=run["order"] != "identity")
    if run["order"] == "identity":
        kwargs.pop("order")
    steps_per_epoch = -(-n // (world * batch))
    exclusions = data.draw(st.dictionaries(st.integers(0, 2 * steps_per_epoch),
                                           st.lists(st.integers(0, n - 1), max_size=max(n // 3, 1)), max_size=3))
    whole, _ = lockstep(loaders(n, world, batch, **kwargs), 2, exclusions)
    check_served(whole, n, world, exclusions, 2)
    stop = data.draw(st.integers(0, len(whole)))
    assert stopped_and_resumed(lambda: loaders(n, world, batch, **kwargs), 2, exclusions, stop) == whole


@settings(max_examples=60, deadline=None)
@given(run=runs, new_world=st.integers(1, 3), new_batch=st.integers(1, 4), data=st.data())
def test_a_resize_serves_every_remaining_sample_once(run, new_world, new_batch, data):
    n, world, batch = run["n"], run["world"], run["batch"]
    kwargs = dict(seed=run["seed"], order=run["order"]) if run["order"] != "identity" else dict(shuffle=False)
    steps_per_epoch = -(-n // (world * batch))
    stop = data.draw(st.integers(0, steps_per_epoch))
    exclusions = data.draw(st.dictionaries(st.integers(0, stop), st.lists(st.integers(0, n - 1), max_size=n),
                                           max_size=2))
    applied = []
    before, state = lockstep(loaders(n, world, batch, **kwargs), 1, exclusions, stop=stop, applied=applied)
    fresh = loaders(n, new_world, new_batch, **kwargs)
    for loader in fresh:
        loader.load_state_dict(state)
    excluded = {i for t in applied for i in exclusions[t]}
    assert fresh[0].excluded.count == len(excluded)
    after, _ = lockstep(fresh, 1, {}, step=stop)
    served_before = [i for _, _, b in before for batch_ in b for i in batch_]
    served_after = [i for _, _, b in after for batch_ in b for i in batch_]
    assert not excluded & set(served_after)
    remaining = set(range(n)) - set(served_before) - excluded
    assert remaining <= set(served_after)
    assert set(served_after) <= set(range(n)) - excluded  # padding too keeps out of the excluded
    assert len(served_after) - len(set(served_after)) < new_world  # repeats: the tail padding only


def test_exclusion_takes_effect_at_the_next_batch_with_workers_prefetching():
    n = 64
    loader = shufflepoint.DataLoader(list(range(n)), 4, seed=3, num_workers=2, prefetch_factor=4)
    plain = shufflepoint.DataLoader(list(range(n)), 4, seed=3)
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    upcoming = [b.tolist() for b in plain][2:]
    dropped = upcoming[0] + upcoming[1][:2]  # the next batch and a half, already prefetched by the workers
    loader.exclude(dropped)
    rest = [i for b in it for i in b.tolist()]
    assert not set(rest) & set(dropped)
    assert sorted(rest) == sorted(set(range(n)) - set(dropped) - {i for b in first for i in b})
    assert loader.epoch == 1 and len(loader) == -(-(n - len(dropped)) // 4)
    next_epoch = [i for b in loader for i in b.tolist()]
    assert sorted(next_epoch) == sorted(set(range(n)) - set(dropped))


def test_the_state_holds_sorted_ranges_and_an_older_state_loads_with_nothing_excluded():
    loader = shufflepoint.DataLoader(list(range(100)), 4, seed=1)
    loader.exclude(torch.tensor([9, 7, 8, 50]))
    loader.exclude(np.array([10, 99]))
    state = loader.state_dict()
    assert state["version"] == 4 and state["excluded"] == [7, 4, 39, 1, 48, 1]  # [7, 11), [50, 51), [99, 100)
    assert loader.excluded.ranges() == [(7, 11), (50, 51), (99, 100)]
    v2 = {k: v for k, v in shufflepoint.DataLoader(list(range(100)), 4, seed=1).state_dict().items()
          if k not in ("excluded", "handed", "excluded_at", "steps", "history", "shuffle_block", "grid", "phases",
                       "ramp", "buckets")}
    v2["version"] = 2
    loader.load_state_dict(v2)
    assert loader.excluded.count == 0 and loader.state_dict()["excluded"] == []


@pytest.mark.parametrize(("indices", "error", "match"), [
    ([3, -2], ValueError, r"indices: found -2\n  expected: dataset indices in \[0, 10\)"),
    ([10], ValueError, r"indices: found 10\n  expected: dataset indices in \[0, 10\) \(len\(dataset\) = 10\)"),
    (["3"], TypeError, r"indices: found '3' of type str\n  expected: int dataset indices"),
    ([2.0], TypeError, r"indices: found 2.0 of type float"),
    (3, TypeError, r"indices: found int\n  expected: an iterable of int dataset indices"),
])
def test_bad_indices_are_refused_by_name_and_change_nothing(indices, error, match):
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=1)
    loader.exclude([1])
    it = iter(loader)
    next(it)
    before = loader.state_dict()
    with pytest.raises(error, match=match):
        loader.exclude(indices)
    assert loader.state_dict() == before
    assert [b.tolist() for b in it] == [b.tolist() for b in _loaded(before)]


def _loaded(state):
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=1)
    loader.load_state_dict(state)
    return loader


def test_too_many_ranges_are_refused_naming_the_bound(monkeypatch):
    from shufflepoint._loading import excluded as excluding

    monkeypatch.setattr(excluding, "MAX_RANGES", 3)
    loader = shufflepoint.DataLoader(list(range(100)), 2)
    loader.exclude([0, 2, 4])
    with pytest.raises(ValueError, match=r"indices: found an excluded set of 4 ranges\n  expected: at most 3 ranges"):
        loader.exclude([6])
    assert loader.excluded.count == 3


@pytest.mark.parametrize(("edit", "match"), [
    ([1], r"'excluded': found \[1\] \(1 numbers\)\n  expected: an even count"),
    ([0, 0], r"'excluded': found element 1 = 0\n  expected: a range length >= 1"),
    ([2, 1, 0, 1], r"'excluded': found element 2 = 0\n  expected: a gap >= 1 between ranges"),
    ([5, 6], r"'excluded': found the ranges = index 10 reached\n  expected: every index < n = 10"),
    ([0, -1], r"'excluded': found element 1 = -1\n  expected: an int >= 0"),
    ([0, 1.5], r"'excluded': found element 1 = 1.5\n  expected: an int >= 0"),
    ("0,1", r"'excluded': found '0,1'\n  expected: a list"),
])
def test_malformed_exclusions_in_a_state_are_refused_by_name_and_change_nothing(edit, match):
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=1)
    next(iter(loader))
    before = loader.state_dict()
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(dict(before, excluded=edit))
    assert loader.state_dict() == before


def test_loaders_that_cannot_skip_refuse_by_name():
    corpus = _Corpus([6, 6, 6])
    spans = shufflepoint.DataLoader(corpus, 2, shuffle_block=4)
    spans.exclude([1, 17])  # the spans deal excludes too (tests/loading/test_exclude_spans.py)
    assert 1 not in {i for b in spans for i in b.tolist()}
    strided = shufflepoint.DataLoader(corpus, 2, shuffle_block=4, deal="strided")
    strided.exclude([1, 17])  # the blocks order has an inverse
    assert 1 not in {i for b in strided for i in b.tolist()}
    sampler = shufflepoint.ResumableSampler(list(range(18)), num_replicas=1, rank=0)
    with pytest.raises(StateError, match=r"'excluded': found \[0, 1\] \(1 excluded indices\)\n"
                                         r"  expected: \[\] for a sampler"):
        sampler.load_state_dict(dict(sampler.state_dict(), excluded=[0, 1]))
    own = shufflepoint.DataLoader(_OwnOrder(), 2, deal="strided")
    with pytest.raises(ValueError, match=r"exclude: found the 'own' order of a _OwnOrder\n.*\n"
                                         r"  why: this order has no inverse"):
        own.exclude([1])


class _OwnOrder(torch.utils.data.Dataset):
    """A dataset read in its own order (as Mixture and Packed are), without an inverse."""

    order_name, order_version = "own", 1

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i

    def epoch_order(self, seed, epoch, shuffle_block):
        return shufflepoint.permutation(8, seed, epoch)


class _Corpus(torch.utils.data.Dataset):
    """A sharded corpus as the loader sees one: rows per shard, a fingerprint."""

    def __init__(self, rows):
        self.shard_rows, self.fingerprint = list(rows), "corpus"

    def __len__(self):
        return sum(self.shard_rows)

    def __getitem__(self, i):
        return i


def test_which_places_steps_around_an_exclusion_and_a_batch_size_change_keeps_excluding():
    loader = shufflepoint.DataLoader(list(range(30)), 2, seed=1)
    it = iter(loader)
    first = next(it).tolist()
    assert loader.which(0) == {0: first}
    loader.exclude([5, 6, 7])
    assert loader.which(0) == {0: first}  # before the exclusion: what was served
    second = next(it).tolist()
    assert loader.which(1) == {0: second} and not {5, 6, 7} & set(second)
    loader.set_batch_size(3)
    rest = [b.tolist() for b in it]
    assert [loader.which(2 + k)[0] for k in range(len(rest))] == rest
    rest = [i for b in rest for i in b]
    assert loader.step == 2 + -(-(30 - 4 - len({5, 6, 7} - set(first))) // 3)
    assert sorted(second + rest) == sorted(set(range(30)) - {5, 6, 7} - set(first))
    state = loader.state_dict()
    assert state["excluded_at"] == [1]
    fresh = shufflepoint.DataLoader(list(range(30)), 3, seed=1)
    fresh.load_state_dict(state)  # the history's arrival is checked with the excluded samples skipped
    assert fresh.step == loader.step and fresh.excluded == loader.excluded
    assert [fresh.which(s) for s in range(loader.step)] == [loader.which(s) for s in range(loader.step)]
    with pytest.raises(StateError, match=r"state field 'steps'"):
        shufflepoint.DataLoader(list(range(30)), 3, seed=1).load_state_dict({**state, "steps": state["steps"] - 1})
    for damaged in ([2, 1], [0, 99], ["1"], list(range(33))):
        with pytest.raises(StateError, match=r"state field 'excluded_at'"):
            shufflepoint.DataLoader(list(range(30)), 3, seed=1).load_state_dict({**state, "excluded_at": damaged})
    assert [b.tolist() for b in fresh] == [b.tolist() for b in loader]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), world=st.integers(1, 4), batch=st.integers(1, 4), new_world=st.integers(1, 4),
       new_batch=st.integers(1, 4), deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_a_state_saved_after_an_epochs_last_batch_with_drop_last_loads_on_any_layout(
        n, world, batch, new_world, new_batch, deal, data):
    # The checkpoint inside ``for batch in loader:`` after the last batch: the saved run's epoch is over (it drops
    # the tail), a smaller global batch reads on into that tail. Refused as "damaged" when samples were excluded.
    excluded = set(data.draw(st.lists(st.integers(0, n - 1), max_size=n // 2)))
    kwargs = dict(seed=3, drop_last=True, deal=deal)
    ranks = loaders(n, world, batch, **kwargs)
    served = []
    for loader in ranks:
        loader.exclude(sorted(excluded)) if excluded else None
        batches = iter(loader)
        for _ in range(len(loader)):  # every batch of the epoch, the pass not ended yet
            served += next(batches).tolist()
    state = ranks[0].state_dict()
    assert state["epoch"] == 0
    resumed = loaders(n, new_world, new_batch, **kwargs)
    for loader in resumed:
        loader.load_state_dict(state)
    rest = [i for loader in resumed for got in loader for i in got.tolist()]
    assert not set(rest) & (excluded | set(served)) and len(rest) == len(set(rest))
    following = [i for loader in resumed for got in loader for i in got.tolist()]
    assert len(following) == len(set(following)) and not set(following) & excluded


def test_a_mixture_or_packed_refusal_names_the_users_dataset_and_a_uint64_index_its_own_value():
    mixture = shufflepoint.Mixture([(list(range(10)), 1.0), (list(range(10, 16)), 1.0)])
    with pytest.raises(ValueError, match=r"exclude: found the 'mixture' order of a Mixture\n"
                                         r"  expected: an order with an inverse.*\n.*no inverse.*\n"
                       r"  fix: filter the dataset"):
        shufflepoint.DataLoader(mixture, 2, collate_fn=list).exclude([1])
    packed = shufflepoint.Packed([{"input_ids": [1, 2, 3]}] * 8, 4)
    with pytest.raises(ValueError, match=r"found the 'packed' order of a Packed\n.*\n"
                                         r"  why: this order has no inverse.*\n"
                                          r"  fix: .*corpus the Packed reads"):
        shufflepoint.DataLoader(packed, 2).exclude([1])
    loader = shufflepoint.DataLoader(list(range(10)), 2)
    with pytest.raises(ValueError, match=r"found 18446744073709551615\n  expected: dataset indices that fit an int64"):
        loader.exclude(np.array([2**64 - 1], dtype=np.uint64))
    assert not loader.excluded

"""``loader.exclude`` under the ``spans`` deal (the default for sharded corpora): excluded samples never
served again, every other once per epoch, exact on a resume, every remaining sample once on a resize,
with resizes before and after an exclusion. Ranks are simulated in one process (the arithmetic)."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from corpus_files import jsonl_corpus
from shufflepoint import StateError
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.spanskips import FilteredSpanCut, Handed
from simulated import check_served, lockstep, stopped_and_resumed


def loaders(n, world, batch, **kwargs):
    return [shufflepoint.DataLoader(list(range(n)), batch, rank=r, world_size=world, deal="spans", **kwargs)
            for r in range(world)]


runs = st.fixed_dictionaries({
    "n": st.integers(1, 50), "world": st.integers(1, 3), "batch": st.integers(1, 4),
    "shuffle": st.booleans(), "seed": st.integers(0, 2**32),
})


def test_the_worked_example():
    """The module docstring of _core/spanskips.py: 2 ranks read 0 1 and 5 6; 3 and 8 excluded."""
    ranks = loaders(10, 2, 2, shuffle=False)
    its = [iter(loader) for loader in ranks]
    assert [next(it).tolist() for it in its] == [[0, 1], [5, 6]]
    for loader in ranks:
        loader.exclude([3, 8])
    assert [next(it).tolist() for it in its] == [[2, 4], [7, 9]]
    state = ranks[0].state_dict()
    assert state["handed"] == [2, 0, 2, 3, 2] and state["excluded"] == [3, 1, 4, 1]
    assert [list(it) for it in its] == [[], []]
    cut = FilteredSpanCut(10, Handed(2, Exclusion(10, np.array([0, 5]), np.array([2, 7]))), np.array([3, 8]),
                          [], 2, 2, False)
    assert cut.size == 4 and cut.to_epoch(np.arange(4)).tolist() == [2, 4, 7, 9]


@settings(max_examples=60, deadline=None)
@given(run=runs, data=st.data())
def test_excluded_never_served_the_rest_once_and_a_resume_is_exact(run, data):
    n, world, batch = run["n"], run["world"], run["batch"]
    kwargs = dict(seed=run["seed"], shuffle=run["shuffle"])
    steps_per_epoch = -(-n // (world * batch))
    exclusions = data.draw(st.dictionaries(st.integers(0, 2 * steps_per_epoch),
                                           st.lists(st.integers(0, n - 1), max_size=max(n // 3, 1)), max_size=3))
    whole, _ = lockstep(loaders(n, world, batch, **kwargs), 2, exclusions)
    check_served(whole, n, world, exclusions, 2)
    stop = data.draw(st.integers(0, len(whole)))
    assert stopped_and_resumed(lambda: loaders(n, world, batch, **kwargs), 2, exclusions, stop) == whole


@settings(max_examples=80, deadline=None)
@given(run=runs, worlds=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=3),
       data=st.data())
def test_resizes_before_and_after_exclusions_serve_every_remaining_sample_once(run, worlds, data):
    """One epoch read in legs: each leg on its own (world, batch), excluding at any step, the state handed
    to fresh loaders at each leg's end; every sample not excluded is served once (tail padding aside),
    and none once excluded."""
    n = run["n"]
    kwargs = dict(seed=run["seed"], shuffle=run["shuffle"])
    legs = [(run["world"], run["batch"]), *worlds]
    served, state, step, excluded_at = [], None, 0, {}
    for number, (world, batch) in enumerate(legs):
        ranks = loaders(n, world, batch, **kwargs)
        if state is not None:
            for loader in ranks:
                loader.load_state_dict(state)
        last = number == len(legs) - 1
        its = [iter(loader) for loader in ranks]
        for _ in range(data.draw(st.integers(0, 4)) if not last else 10**6):
            if data.draw(st.booleans()):
                dropped = data.draw(st.lists(st.integers(0, n - 1), max_size=max(n // 4, 1)))
                for loader in ranks:
                    loader.exclude(dropped)
                for i in dropped:
                    excluded_at.setdefault(i, step)
            batches = [next(it, None) for it in its]
            if batches[0] is None:
                assert all(b is None for b in batches) and ranks[0].epoch == 1
                break
            served.append((step, [i for b in batches for i in b.tolist()]))
            step += 1
        state = ranks[0].state_dict()
        if ranks[0].epoch == 1:
            break
    counts = Counter(i for _, indices in served for i in indices)
    for t, indices in served:
        for i in indices:
            assert excluded_at.get(i, t + 1) > t, f"index {i} served at step {t}, excluded at {excluded_at[i]}"
    kept = set(range(n)) - set(excluded_at)
    assert kept <= set(counts), f"never served {sorted(kept - set(counts))}"
    repeats = sum(counts.values()) - len(counts)
    assert repeats < max(world for world, _ in legs)  # the tail padding of the last step only


def test_a_sharded_corpus_excludes_under_its_default_deal_and_resizes(tmp_path):
    """A ``Shards`` corpus (spans by default, its ``blocks`` order laid along the epoch's first stretches):
    an exclusion mid-epoch on 2 ranks, then a resume on 3 ranks, then the next epoch."""
    ids = jsonl_corpus(str(tmp_path / "c"), 12, rows=(2, 5), seed=4)
    corpus = shufflepoint.Shards(str(tmp_path / "c" / "*.jsonl"), cache_dir=str(tmp_path / "cache"), progress=False)
    n = len(ids)

    def ranks(world, batch):
        return [shufflepoint.DataLoader(corpus, batch, rank=r, world_size=world, seed=7, shuffle_block=4,
                                        collate_fn=lambda rows: [row["id"] for row in rows])
                for r in range(world)]

    first = ranks(2, 2)
    assert first[0].deal == "spans"
    its = [iter(loader) for loader in first]
    served = [i for it in its for i in next(it)]
    dropped = list(range(0, n, 3))
    for loader in first:
        loader.exclude(dropped)
    served += [i for it in its for i in next(it)]
    state = first[0].state_dict()
    assert state["handed"] and state["handed"][0] == 2
    second = ranks(3, 3)
    for loader in second:
        loader.load_state_dict(state)
    rest = [i for loader in second for batch in loader for i in batch]
    assert not set(rest) & (set(dropped) - set(served[:4]))
    assert sorted(set(served) | set(rest)) == sorted(set(ids) - (set(dropped) - set(served[:4])))
    assert len(rest) - len(set(rest)) < 3 and not set(rest) & set(served)
    assert second[0].epoch == 1 and second[0].state_dict()["handed"] == []
    following = [i for loader in second for batch in loader for i in batch]
    assert set(following) == set(ids) - set(dropped) and len(following) - len(set(following)) < 3


def test_a_damaged_handed_or_cursor_is_refused_by_name():
    ranks = loaders(20, 2, 2, seed=1)
    its = [iter(loader) for loader in ranks]
    for it in its:
        next(it)
    for loader in ranks:
        loader.exclude([3, 4, 11])
    state = ranks[0].state_dict()
    assert state["handed"]
    for field, value, words in [
        ("handed", [0, *state["handed"][1:]], r"element 0 = 0\n  expected: the epoch's first world size"),
        ("handed", [2], r"\[2\] \(a world size and no ranges\)\n  expected: \[\] when nothing was handed out"),
        ("handed", [2, 0, 5, 0, 1], r"after element 0, element 2 = 0\n  expected: a gap >= 1"),
        ("cursor", state["cursor"] - 1, "cursor"),
    ]:
        fresh = loaders(20, 2, 2, seed=1)[0]
        before = fresh.state_dict()
        with pytest.raises(StateError, match=f"'{field}': found {words}" if field == "handed" else "'cursor'"):
            fresh.load_state_dict({**state, field: value})
        assert fresh.state_dict() == before
    strided = shufflepoint.DataLoader(list(range(20)), 2, rank=0, world_size=2, seed=1, deal="strided")
    with pytest.raises(StateError, match="'deal'"):
        strided.load_state_dict(state)
    nothing = {**loaders(20, 2, 2, seed=1)[0].state_dict(), "handed": state["handed"]}
    with pytest.raises(StateError, match=r"'handed': found \[2, 0, 2, 8, 2\]\n"
                                         r"  expected: \[\] \(only the spans deal with samples excluded"):
        loaders(20, 2, 2, seed=1)[0].load_state_dict(nothing)
    older = {k: v for k, v in loaders(20, 2, 2, seed=1)[0].state_dict().items()
             if k not in ("handed", "shuffle_block", "grid", "phases", "ramp", "buckets")}
    older["version"] = 3
    loaders(20, 2, 2, seed=1)[0].load_state_dict(older)  # a version 3 state written before the field loads


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_space_positions_map_to_the_kept_epoch_positions_in_order(n, data):
    """``to_epoch``: the q-th position of the space is the q-th epoch position neither handed nor excluded,
    for a whole ascending chunk (each gone range once) as for any positions (a binary search each)."""
    excluded = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=np.int64)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    pairs = [(a, b) for a, b in zip(cuts[0::2], cuts[1::2], strict=False) if b > a]
    handed = Handed(2, Exclusion.from_indices([i for a, b in pairs for i in range(a, b)], n)) if pairs else None
    cut = FilteredSpanCut(n, handed, excluded, [], 1, 1, False)
    gone = set(excluded.tolist()) | {i for a, b in pairs for i in range(a, b)}
    kept = [i for i in range(n) if i not in gone]
    assert cut.size == len(kept)
    if kept:
        low = data.draw(st.integers(0, len(kept) - 1))
        high = data.draw(st.integers(low + 1, len(kept)))
        assert cut.to_epoch(np.arange(low, high)).tolist() == kept[low:high]
        shuffled = data.draw(st.permutations(list(range(len(kept)))))
        assert cut.to_epoch(np.array(shuffled)).tolist() == [kept[q] for q in shuffled]


@settings(max_examples=40, deadline=None)
@given(run=runs, data=st.data())
def test_with_drop_last_a_resume_is_exact_and_nothing_excluded_is_served(run, data):
    n, world, batch = run["n"], run["world"], run["batch"]
    kwargs = dict(seed=run["seed"], shuffle=run["shuffle"], drop_last=True)
    exclusions = data.draw(st.dictionaries(st.integers(0, 6), st.lists(st.integers(0, n - 1), max_size=n // 2 + 1),
                                           max_size=3))
    whole, _ = lockstep(loaders(n, world, batch, **kwargs), 2, exclusions)
    excluded_at = {}
    for t in sorted(exclusions):
        for i in exclusions[t]:
            excluded_at.setdefault(i, t)
    for t, _, batches in whole:
        assert all(len(b) == batch for b in batches)
        assert all(excluded_at.get(i, t + 1) > t for b in batches for i in b)
    stop = data.draw(st.integers(0, len(whole)))
    assert stopped_and_resumed(lambda: loaders(n, world, batch, **kwargs), 2, exclusions, stop) == whole


@settings(max_examples=40, deadline=None)
@given(run=runs, new_batch=st.integers(1, 5), data=st.data())
def test_set_batch_size_after_an_exclusion_keeps_the_rest_of_the_space(run, new_batch, data):
    n, world, batch = run["n"], run["world"], run["batch"]
    ranks = loaders(n, world, batch, seed=run["seed"], shuffle=run["shuffle"])
    its = [iter(loader) for loader in ranks]
    served = []
    for _ in range(data.draw(st.integers(0, 3))):
        served += [i for it in its for i in getattr(next(it, None), "tolist", list)()]
    dropped = data.draw(st.lists(st.integers(0, n - 1), max_size=n // 2 + 1))
    for loader in ranks:
        loader.exclude(dropped)
    served += [i for it in its for i in getattr(next(it, None), "tolist", list)()]
    for loader in ranks:
        loader.set_batch_size(new_batch)
    rest = [i for it in its for b in it for i in b.tolist()]
    assert not set(rest) & set(dropped)
    assert set(served) | set(rest) >= set(range(n)) - set(dropped)
    both = served + rest
    assert len(both) - len(set(both)) < world  # the tail padding only


@pytest.mark.parametrize(("first", "second"), [((4, 3), (2, 6)), ((4, 3), (3, 4)), ((2, 6), (4, 3))])
def test_an_exclusion_after_a_resize_at_a_fixed_global_batch(first, second):
    """4 x 3 -> 2 x 6 reads the 4 x 3 run's global batches (``_core/global_batch.py``); an exclusion there
    re-deals what the parts have left: none excluded served after it, every other sample once."""
    n = 40
    ranks = loaders(n, first[0], first[1], seed=5)
    its = [iter(loader) for loader in ranks]
    served = [i for it in its for i in next(it).tolist()]
    state = ranks[0].state_dict()
    ranks = loaders(n, second[0], second[1], seed=5)
    for loader in ranks:
        loader.load_state_dict(state)
    assert type(ranks[0]._position.rest()[0]).__name__ == "GlobalBatchCut"  # excluded from the fixed global batch
    its = [iter(loader) for loader in ranks]
    served += [i for it in its for i in next(it).tolist()]
    dropped = [i for i in range(0, n, 3) if i not in served][:6] + served[:2]
    for loader in ranks:
        loader.exclude(dropped)
    rest = [i for it in its for b in it for i in b.tolist()]
    assert not set(rest) & set(dropped)
    assert sorted(set(served) | set(rest)) == sorted(set(range(n)) - (set(dropped) - set(served)))
    both = served + rest
    assert len(both) - len(set(both)) < second[0]


def test_exclusion_takes_effect_at_the_next_batch_with_workers_prefetching():
    n = 64
    loader = shufflepoint.DataLoader(list(range(n)), 4, seed=3, deal="spans", num_workers=2, prefetch_factor=4)
    plain = shufflepoint.DataLoader(list(range(n)), 4, seed=3, deal="spans")
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    upcoming = [b.tolist() for b in plain][2:]
    dropped = upcoming[0] + upcoming[1][:2]  # the next batch and a half, already prefetched by the workers
    loader.exclude(dropped)
    rest = [i for b in it for i in b.tolist()]
    assert not set(rest) & set(dropped)
    assert sorted(rest) == sorted(set(range(n)) - set(dropped) - {i for b in first for i in b})
    assert loader.epoch == 1 and loader.state_dict()["handed"] == []
    assert sorted(i for b in loader for i in b.tolist()) == sorted(set(range(n)) - set(dropped))

"""``loader.which(step)`` in runs that exclude samples: before the first ``exclude()`` the unfiltered answer, from
the latest one on the answer with the whole excluded set, each equal to what every rank received at that step,
across epochs, a save/load and a resize, under both deals; a step between two exclusions is refused by name.
Ranks are simulated in one process (``simulated.lockstep``)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError
from simulated import lockstep

EPOCHS = 3


def loaders(n, world, batch, deal, seed, state=None):
    found = [shufflepoint.DataLoader(list(range(n)), batch, rank=r, world_size=world, deal=deal, seed=seed)
             for r in range(world)]
    for loader in found:
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint holds it
    return found


def received(served):
    return {step: dict(enumerate(batches)) for step, _, batches in served}


def check_which(loader, got, exclusions, deal, epoch_of):
    """Every step either answered exactly, or (only where documented) refused by name."""
    first, last = min(exclusions), max(exclusions)
    answered = 0
    for step, batches in got.items():
        if first <= step < last:
            with pytest.raises(ValueError, match=r"read between exclusions"):
                loader.which(step)
            continue
        try:
            found = loader.which(step)
        except ValueError as error:  # spans: the exclusion's own epoch, left, with no leg before the exclusion
            assert deal == "spans" and step >= last and epoch_of[step] == epoch_of.get(last, -1), (step, error)
            assert "no longer known" in str(error)
            continue
        assert found == batches, f"step {step}"
        answered += 1
    return answered


run_shapes = st.fixed_dictionaries({
    "n": st.integers(1, 40), "world": st.integers(1, 3), "batch": st.integers(1, 4),
    "deal": st.sampled_from(["strided", "spans"]), "seed": st.integers(0, 2**32),
    "new_world": st.integers(1, 3), "new_batch": st.integers(1, 4),
})


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=run_shapes, data=st.data())
def test_which_equals_what_every_rank_received_around_an_exclusion(run, data):
    n, world, batch, deal, seed = run["n"], run["world"], run["batch"], run["deal"], run["seed"]
    per_epoch = -(-n // (world * batch))
    at = data.draw(st.integers(0, 2 * per_epoch), label="exclusion step")
    indices = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=max(n // 3, 1)), label="indices")
    stop = data.draw(st.integers(0, 2 * per_epoch + 1), label="save and resize at")
    before, state = lockstep(loaders(n, world, batch, deal, seed), EPOCHS, {at: indices}, stop=stop)
    resized = loaders(n, run["new_world"], run["new_batch"], deal, seed, state)
    after, final = lockstep(resized, EPOCHS, {at: indices} if at > stop else {}, step=stop)
    got = {**received(before), **received(after)}
    epoch_of = {step: epoch for step, epoch, _ in before + after}
    if at not in epoch_of and at > max(got, default=-1):  # the run ended before the exclusion took effect
        return
    if not final["excluded_at"]:  # every index excluded before any was: nothing took effect but the set
        return
    assert final["excluded_at"] == [at]
    for loader in (resized[0], loaders(n, 2, 3, deal, seed, final)[0]):  # the live run; a fresh world from its state
        answered = check_which(loader, got, {at}, deal, epoch_of)
        if deal == "strided":
            assert answered == len(got)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=run_shapes, data=st.data())
def test_steps_between_two_exclusions_are_refused_and_the_others_answered(run, data):
    n, world, batch, deal, seed = run["n"], run["world"], run["batch"], run["deal"], run["seed"]
    per_epoch = -(-n // (world * batch))
    first = data.draw(st.integers(0, per_epoch), label="first exclusion")
    second = data.draw(st.integers(first + 1, 2 * per_epoch + 1), label="second exclusion")
    exclusions = {first: [data.draw(st.integers(0, n - 1))], second: [data.draw(st.integers(0, n - 1))]}
    served, state = lockstep(loaders(n, world, batch, deal, seed), EPOCHS, exclusions)
    took = state["excluded_at"]
    if len(took) < 2:  # the same index twice, or the run ended first
        return
    assert took == [first, second]
    epoch_of = {step: epoch for step, epoch, _ in served}
    check_which(loaders(n, run["new_world"], run["new_batch"], deal, seed, state)[0], received(served),
                exclusions, deal, epoch_of)


def test_which_worked_example_strided():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=5)
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    loader.exclude([first[0][0], 9, 3])  # one already served: the set is what the state keeps
    rest = [b.tolist() for b in it] + [b.tolist() for b in loader]  # the epoch's end, then the whole next one
    assert [loader.which(s)[0] for s in range(2 + len(rest))] == first + rest
    assert loader.state_dict()["excluded_at"] == [2]
    assert not {9, 3} & {i for b in rest for i in b}


def test_a_state_without_excluded_at_loads_and_which_says_why_it_cannot_place_its_steps():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=5)
    loader.exclude([4])
    state = loader.state_dict()
    # as an exclude2 state was written
    for field in ("excluded_at", "shuffle_block", "grid", "phases", "ramp", "buckets"):
        del state[field]
    state["version"] = 3
    fresh = shufflepoint.DataLoader(list(range(10)), 2, seed=5)
    fresh.load_state_dict(state)
    with pytest.raises(ValueError, match=r"which: found a state with samples excluded and no 'excluded_at'\n"
                                         r"  expected: a state that says from which step"):
        fresh.which(0)
    with pytest.raises(StateError, match=r"state field 'excluded_at'"):
        fresh.load_state_dict({**loader.state_dict(), "excluded_at": [0], "excluded": []})


@pytest.mark.parametrize("seed", [43, 1020, 1055, 7])
@pytest.mark.parametrize("drop_last", [True, False])
def test_an_exclusion_and_a_batch_size_change_at_an_epochs_end_are_placed_after_the_epoch_is_left(seed, drop_last):
    # spans, drop_last: at step 8 the first layout (2 x 4) has read all it can of epoch 3 (7 samples left, dropped);
    # the new one (2 x 2) reads on into that tail. which() rebuilt the epoch's exclusion from the first layout's
    # position, normalized to epoch 4's start, and named samples no rank received (found by review).
    ranks = [shufflepoint.DataLoader(list(range(23)), 4, rank=r, world_size=2, seed=seed, drop_last=drop_last,
                                     deal="spans", collate_fn=list) for r in range(2)]
    log, iterators = {}, None
    for step in range(12):
        if step == 8:
            for loader in ranks:
                loader.exclude([0, 13, 16, 19])
                loader.set_batch_size(2)
        while True:
            iterators = iterators or [iter(loader) for loader in ranks]
            at, batches = ranks[0].step, [next(it, None) for it in iterators]
            if batches[0] is not None:
                log[at] = dict(enumerate(batches))
                break
            iterators = None  # the epoch ended: the next one
    fresh = shufflepoint.DataLoader(list(range(23)), 3, rank=0, world_size=3, seed=seed, drop_last=drop_last,
                                    deal="spans", collate_fn=list)
    fresh.load_state_dict(ranks[0].state_dict())
    for step, batches in log.items():
        assert ranks[0].which(step) == batches == fresh.which(step), step

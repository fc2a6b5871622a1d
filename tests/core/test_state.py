"""State validation: every refused state names the field, and a refused load changes nothing."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError

N = 40


def make(**kwargs):
    options = dict(seed=3, rank=0, world_size=2)
    options.update(kwargs)
    return shufflepoint.DataLoader(list(range(N)), 4, **options)


def progressed():
    loader = make()
    it = iter(loader)
    next(it)
    next(it)
    return loader


def good_state():
    return progressed().state_dict()


def test_state_fields_are_documented_in_order():
    assert tuple(good_state()) == shufflepoint.STATE_FIELDS


@pytest.mark.parametrize("edit, match", [
    (dict(format="torchdata"), "'format': found 'torchdata'"),
    (dict(version=6), "'version': found 6\n  expected: 1..5\n  fix: it was written by a newer shufflepoint"),
    (dict(version=True), "'version': found True"),
    (dict(kind="sampler"), "'kind': found 'sampler'"),
    (dict(n=41), "'n': found 41\n  expected: 40.*\n  why: the dataset changed length"),
    (dict(seed=4), "'seed': found 4\n  expected: 3.*\n.*\n  fix: build the loader with seed=4"),
    (dict(shuffle=False), "'shuffle': found False"),
    (dict(order="torch"), "'order': found 'torch'\n.*\n.*\n  fix: build the loader with order='torch'"),
    (dict(order_version=0), "'order_version': found 0"),
    (dict(cursor=41), "'cursor': found 41"),
    (dict(cursor=-1), "'cursor': found -1"),
    (dict(cursor=2.0), "'cursor': found 2.0\n  expected: an int"),
    (dict(cursor=True), "'cursor': found True\n  expected: an int"),
    (dict(epoch=float("nan")), "'epoch': found nan"),
    (dict(epoch=2**64), "'epoch': found"),
    (dict(world_size=0), "'world_size': found 0"),
    (dict(drop_last="no"), "'drop_last': found 'no'\n  expected: a bool"),
    (dict(torch_version=3), "'torch_version': found 3"),
    (dict(dataset_fingerprint="other"), None),  # accepted: this loader has no fingerprint to compare
])
def test_each_bad_field_is_named(edit, match):
    loader = progressed()
    before = loader.state_dict()
    state = dict(before, **edit)
    if match is None:
        loader.load_state_dict(state)
        return
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)
    assert loader.state_dict() == before  # nothing half-applied


def test_missing_and_extra_keys():
    state = good_state()
    del state["cursor"]
    with pytest.raises(StateError, match=r"missing \['cursor'\]"):
        make().load_state_dict(state)
    with pytest.raises(StateError, match=r"unknown \['surprise'\]"):
        make().load_state_dict(dict(good_state(), surprise=1))


@pytest.mark.parametrize("foreign, match", [
    ({"_num_yielded": 3, "_sampler_iter_yielded": 3, "_iterator_finished": False}, "torchdata"),
    ({"_iteration": 1, "_num_yielded": 3}, "torchdata StatefulDataLoader|Accelerate"),
    ({"yielded": 5}, "StatefulDistributedSampler"),
    ("{'cursor': 3}", "found str\n  expected: a dict.*\n  fix: .*json.load"),
    (None, "found NoneType"),
    ([1, 2], "found list"),
])
def test_foreign_states_say_where_they_come_from(foreign, match):
    with pytest.raises(StateError, match=match):
        make().load_state_dict(foreign)


def test_fingerprint_mismatch_is_refused():
    loader = make(dataset_fingerprint="v1")
    state = loader.state_dict()
    with pytest.raises(StateError, match="'dataset_fingerprint': found 'v1'\n  expected: 'v2'"):
        make(dataset_fingerprint="v2").load_state_dict(state)


def test_elastic_fields_may_differ():
    state = good_state()
    loader = shufflepoint.DataLoader(list(range(N)), 3, seed=3, rank=1, world_size=3, drop_last=True)
    loader.load_state_dict(state)
    assert (loader.epoch, loader.cursor) == (state["epoch"], state["cursor"])


def test_torch_order_version_change_warns():
    loader = make(order="torch")
    state = dict(loader.state_dict(), torch_version="1.0.0")
    with pytest.warns(shufflepoint.ResumeWarning, match="torch 1.0.0.*torch 2"):
        make(order="torch").load_state_dict(state)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=1500, deadline=None)
@given(data=st.data())
def test_fuzz_malformed_states_raise_state_error_and_change_nothing(data):
    loader = progressed()
    before = loader.state_dict()
    state = dict(before)
    action = data.draw(st.sampled_from(["replace", "delete", "add", "whole"]))
    if action == "whole":
        state = data.draw(json_values)
    elif action == "add":
        state[data.draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in before))] = data.draw(json_values)
    else:
        field = data.draw(st.sampled_from(list(before)))
        if action == "delete":
            del state[field]
        else:
            old = before[field]
            state[field] = data.draw(json_values.filter(lambda v: v != old or type(v) is not type(old)))
    try:
        loader.load_state_dict(state)
    except StateError as error:
        assert str(error).startswith("state")
        assert loader.state_dict() == before
    else:  # accepted only if it is a valid state for this loader
        json.dumps(state)
        assert loader.state_dict()["cursor"] <= N


@pytest.mark.parametrize("seed", [0, 2**63 - 1, 2**63, 2**64 - 1])
def test_every_accepted_seed_round_trips(seed):
    loader = make(seed=seed)
    state = json.loads(json.dumps(loader.state_dict()))
    make(seed=seed).load_state_dict(state)
    with pytest.raises(StateError, match="'seed': found 18446744073709551616"):
        make(seed=seed).load_state_dict(dict(state, seed=2**64))


def travelled(deal):
    """A loader whose history has a resize, a batch-size change and a jump."""
    first = shufflepoint.DataLoader(list(range(N)), 4, seed=3, rank=0, world_size=2, deal=deal)
    it = iter(first)
    next(it), next(it)
    loader = shufflepoint.DataLoader(list(range(N)), 3, seed=3, rank=0, world_size=3, deal=deal)
    loader.load_state_dict(first.state_dict())
    it = iter(loader)
    next(it)
    loader.set_batch_size(2)
    next(it)
    loader.seek(2, 1)
    next(iter(loader))
    return loader


def test_a_travelled_history_round_trips():
    for deal in ("strided", "spans"):
        loader = travelled(deal)
        state = json.loads(json.dumps(loader.state_dict()))
        assert len(state["history"]) == 4 and state["steps"] == 5
        fresh = shufflepoint.DataLoader(list(range(N)), 2, seed=3, rank=1, world_size=3, deal=deal)
        fresh.load_state_dict(state)
        assert fresh.state_dict() == state


@pytest.mark.parametrize("edit, match", [
    (lambda s: s.update(steps=s["steps"] + 1), "'steps': found 6\n  expected: a step at which the history arrives"),
    (lambda s: s.update(steps=0), "'steps': found 0\n  expected: at least"),
    (lambda s: s["history"].pop(), "'steps': found 5\n"
                                   "  expected: .*arrives at epoch 2, cursor 12 .it arrives at epoch 0, cursor 37"),
    (lambda s: s["history"][-1].__setitem__(2, 3), r"'history': found \[\[0, 2, 4, 0, 0, 0\], .*\n"
                                                   r"  expected: a last entry with the saved layout"),
    (lambda s: s["history"].pop(0), r"'history': found history\[0\] = \[2, 3, 3, 0\]\n"
                                    r"  expected: .*first entry must carry its start"),
    (lambda s: s["history"][1].__setitem__(0, 0), r"'history': found history\[1\] = step 0\n"
                                                  r"  expected: a step after 0"),
    (lambda s: s["history"][1].__setitem__(1, 2**40), r"'history': found history\[1\] = \[2, 1099511627776, 3, 0\]\n"
                                                      r"  expected: "),
    (lambda s: s["history"][-1].__setitem__(4, 1), "'steps': found 5\n  expected: .*arrives at epoch 2"),
    (lambda s: s.update(version=2),
     r"'\(keys\)': found unknown \['buckets', 'excluded', 'excluded_at', 'grid', 'handed', 'history'.*\n"
     r".*\n  why: a version 2 state has no \[.*'phases', 'ramp', 'shuffle_block', 'steps'\]"),
])
def test_each_bad_history_is_named(edit, match):
    loader = travelled("strided")
    before = loader.state_dict()
    state = json.loads(json.dumps(before))
    edit(state)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state)
    assert loader.state_dict() == before


history_edits = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(-2, 2**63)), max_size=3)


@settings(max_examples=600, deadline=None)
@given(deal=st.sampled_from(["strided", "spans"]), edits=history_edits, steps=st.integers(-1, 12), data=st.data())
def test_fuzz_edited_histories_raise_state_error_or_load_consistently(deal, edits, steps, data):
    loader = travelled(deal)
    before = loader.state_dict()
    state = json.loads(json.dumps(before))
    for entry, item, value in edits:  # overwrite an item of an entry, or cut or grow an entry
        history = state["history"]
        if not history:
            break
        target = history[entry % len(history)]
        if item < len(target):
            target[item] = value if value >= 0 else data.draw(json_values, label="value")
        elif value % 2:
            target.append(value)
        else:
            target.pop()
    if steps >= 0:
        state["steps"] = steps
    try:
        loader.load_state_dict(state)
    except StateError as error:
        assert str(error).startswith("state field"), str(error)
        assert loader.state_dict() == before
    else:  # accepted: then it places the run the way the loader says, and what it writes loads again
        written = json.loads(json.dumps(loader.state_dict()))
        shufflepoint.DataLoader(list(range(N)), 2, seed=3, rank=0, world_size=3, deal=deal).load_state_dict(written)


def test_a_step_count_without_room_to_count_on_is_refused_by_name():
    loader = shufflepoint.DataLoader(list(range(10)), 2, collate_fn=list)
    state = loader.state_dict()
    for steps in (2**62 + 1, 2**63 - 1):
        edited = {**state, "steps": steps, "history": [[steps, *state["history"][0][1:]]]}
        with pytest.raises(StateError, match=r"state field 'steps': found \d+\n  expected: an int in \[0, 46116860"):
            loader.load_state_dict(edited)
    assert loader.state_dict() == state

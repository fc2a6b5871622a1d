"""State version 4's order parameters (``shuffle_block``, ``grid``, ``phases``): each malformed or foreign
value refused by name with nothing changed, a round trip for every kind of order, and the one place that
reads version 1-3 fingerprints (``state.upgraded``) against the way those versions wrote them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError
from shufflepoint._core.older_states import upgraded


class Corpus(torch.utils.data.Dataset):
    """What the loader looks for in a sharded corpus: ``shard_rows`` and a ``fingerprint``."""

    def __init__(self, rows=(5, 0, 9, 3, 8)):
        self.shard_rows = np.asarray(rows, dtype=np.int64)
        self.fingerprint = "shards:abc"

    def __len__(self):
        return int(self.shard_rows.sum())

    def __getitem__(self, index):
        return index


def scheduled(schedule=((0, [1, 1]), (30, [1, 3]))):
    mixture = shufflepoint.Mixture([[f"a{i}" for i in range(40)], [f"b{i}" for i in range(40)]],
                                   samples_per_epoch=48, schedule=[tuple(p) for p in schedule])
    return shufflepoint.DataLoader(mixture, 3, seed=5, rank=0, world_size=2, collate_fn=list)


def unscheduled():
    mixture = shufflepoint.Mixture([([f"a{i}" for i in range(40)], 1), ([f"b{i}" for i in range(40)], 2)],
                                   samples_per_epoch=48)
    return shufflepoint.DataLoader(mixture, 3, seed=5, rank=0, world_size=2, collate_fn=list)


MAKERS = {
    "array": lambda: shufflepoint.DataLoader(list(range(40)), 3, seed=2, rank=0, world_size=2),
    "blocks": lambda: shufflepoint.DataLoader(Corpus(), 2, seed=1, rank=0, world_size=2, shuffle_block=4),
    "mixture": unscheduled,
    "schedule": scheduled,
    "sampler": lambda: shufflepoint.ResumableSampler(Corpus(), num_replicas=2, rank=1, seed=3, shuffle_block=6),
}


def progressed(name, batches=3):
    made = MAKERS[name]()
    iterator = iter(made)
    for _ in range(batches):
        next(iterator)
    return made


@pytest.mark.parametrize("name,fields", [
    ("array", (None, None, [])),
    ("blocks", (4, None, [])),
    ("mixture", (None, 6, None)),  # its own order has a block; a loader reads its counts as a schedule on its grid
    ("schedule", (None, 6, None)),
    ("sampler", (6, None, [])),
])
def test_every_order_writes_version_4_and_round_trips(name, fields):
    written = progressed(name).state_dict()
    assert written["version"] == 4
    block, grid, phases = fields
    assert written["grid"] == grid and (phases is None or written["phases"] == phases)
    assert written["shuffle_block"] == block or name in ("mixture", "schedule")
    assert all(marker not in (written["dataset_fingerprint"] or "") for marker in (":blocks=", ":grid=", "|"))
    again = MAKERS[name]()
    again.load_state_dict(json.loads(json.dumps(written)))
    assert again.state_dict() == written


def test_a_scheduled_mixture_records_its_phases_and_the_grid_apart_from_its_identity():
    written = progressed("schedule").state_dict()
    assert [start for start, _ in written["phases"]] == [0, 30] and written["grid"] == 6
    assert written["dataset_fingerprint"] == scheduled(((0, [2, 1]),)).state_dict()["dataset_fingerprint"]


BAD = [  # (loader, field, value, the refusal)
    ("blocks", "shuffle_block", "4", r"'shuffle_block': found '4'\n  expected: an int \(the order's block\) or None"),
    ("blocks", "shuffle_block", True, r"'shuffle_block': found True\n  expected: an int"),
    ("blocks", "shuffle_block", 0, r"'shuffle_block': found 0\n  expected: an int in \[1, 4611686018427387904\]"),
    ("blocks", "shuffle_block", -3, r"'shuffle_block': found -3\n  expected: an int in \[0, "),
    ("blocks", "shuffle_block", 2**62 + 1, r"'shuffle_block': found 4611686018427387905\n  expected: an int in \[1, "),
    ("blocks", "shuffle_block", 8, r"'shuffle_block': found 8\n  expected: 4 \(what this loader reads with\)\n.*\n"
                                   r"  fix: build the loader with shuffle_block=8 to resume this run"),
    ("blocks", "shuffle_block", None, r"'shuffle_block': found None\n  expected: 4"),
    ("array", "shuffle_block", 4, r"'shuffle_block': found 4\n  expected: None"),
    ("blocks", "grid", 6, r"'grid': found 6\n  expected: None without phases"),
    ("blocks", "grid", 2.5, r"'grid': found 2.5\n  expected: an int \(the global batch a schedule follows\) or None"),
    ("schedule", "grid", None, r"'grid': found None\n  expected: 6 \(the global batch this loader's schedule"),
    ("schedule", "grid", 0, r"'grid': found 0\n  expected: an int in \[1, "),
    ("blocks", "phases", {}, r"'phases': found \{\}\n  expected: a list of a schedule's \[start, hash\] phases"),
    ("schedule", "phases", [[0]], r"'phases\[0\]': found \[0\]\n  expected: a \[start, hash\] pair"),
    ("schedule", "phases", [[0, 5]], r"'phases\[0\]': found \[0, 5\]\n  expected: a \[start, hash\] pair"),
    ("schedule", "phases", [[True, "ab"]], r"'phases\[0\]': found \[True, 'ab'\]"),
    ("schedule", "phases", [[0, ""]], r"'phases\[0\]': found \[0, ''\]"),
    ("schedule", "phases", [[0, "ab"], [0, "cd"]], r"'phases\[1\]': found \[0, 'cd'\]\n  expected: a start after"),
    ("schedule", "phases", [[0, "ab"]], r"'phases': found \[\[0, 'ab'\]\]\n  expected: \[\[0, .*\n"
                                        r"  why: schedule\[0\] changed"),
    ("schedule", "phases", [], r"'grid': found 6\n  expected: None without phases"),
    ("schedule", "phases", [[0, "ab"], [9, "cd", "1/2"]], r"'phases\[1\]': found \[9, 'cd', '1/2'\]\n  expected: a "),
    ("schedule", "phases", [[0, "ab"], [9, "cd", [1, 2]]], r"'phases\[1\]': found \[9, 'cd', \[1, 2\]\]"),
    ("schedule", "phases", [[0, "ab"], [30, "a9129eebda1c"], [60, "cd", ["1/2", "1/2"]]],
     r"'phases\[2\]': found .*\n  expected: shares that hash to the phase's hash"),
    ("schedule", "phases", [[0, "ab"], [30, "a9129eebda1c"], [60, "cd", ["1/2", "2/2"]]],
     r"'phases\[2\]': found .*\n  expected: \[start, hash, shares\]: 2 exact fractions that sum to 1"),
    ("mixture", "phases", [[0, "ab"]], r"'phases': found \[\[0, 'ab'\]\]\n  expected: \[\[0, '\w+'\]\] .*\n"
                                       r"  why: schedule\[0\] changed"),  # the one phase of its counts (fixed.py)
    ("array", "phases", [[0, "ab"]], r"'shuffle_block': found None\n  expected: an int where the state has phases"),
]


@pytest.mark.parametrize("name,field,value,match", BAD)
def test_each_bad_parameter_is_refused_by_name_and_nothing_changes(name, field, value, match):
    loader = progressed(name)
    before = loader.state_dict()
    with pytest.raises(StateError, match=match):
        loader.load_state_dict({**before, field: value})
    assert loader.state_dict() == before


def test_strict_false_reads_on_in_a_changed_block_with_a_resume_warning():
    """As a corpus's changed block was before version 4 (a changed fingerprint then)."""
    state = progressed("blocks").state_dict()
    loader = shufflepoint.DataLoader(Corpus(), 2, seed=1, rank=0, world_size=2, shuffle_block=5)
    with pytest.warns(shufflepoint.ResumeWarning, match=r"the order changed since the checkpoint \(shuffle_block 4"):
        loader.load_state_dict(state, strict=False)
    assert loader.state_dict()["shuffle_block"] == 5 and loader.cursor == state["cursor"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["blocks", "schedule", "mixture"]), field=st.sampled_from(["shuffle_block", "grid",
                                                                                          "phases"]),
       value=json_values)
def test_fuzz_a_parameter_is_refused_by_name_or_is_the_state_s_own(name, field, value):
    loader = progressed(name, batches=2)
    before = loader.state_dict()
    try:
        loader.load_state_dict({**before, field: value})
    except StateError as error:
        named = str(error).split("'")[1]  # the field, or one it is checked with (a grid needs phases, ...)
        assert str(error).startswith("state field") and named.split("[")[0] in ("shuffle_block", "grid", "phases")
        assert loader.state_dict() == before
    else:  # the state's own, or a grid the scheduled loader adopts (the run's first global batch)
        adopted = name in ("schedule", "mixture") and field == "grid" and type(value) is int and 1 <= value <= 2**62
        assert (value == before[field] and type(value) is type(before[field])) or adopted


# -- version 1-3 states: their fingerprint suffixes read in one place ----------------------------------------

hashes = st.text("0123456789abcdef", min_size=4, max_size=12)


@settings(max_examples=300, deadline=None)
@given(block=st.integers(1, 2**62), grid=st.none() | st.integers(1, 2**62),
       phases=st.lists(st.tuples(st.integers(0, 2**40), hashes), max_size=4, unique_by=lambda p: p[0]),
       user=st.none() | st.text(max_size=12), base=hashes, version=st.sampled_from([1, 2, 3]))
def test_an_old_fingerprint_is_read_back_as_the_old_loader_wrote_it(block, grid, phases, user, base, version):
    if grid is not None and not phases:
        phases = [(0, "ab12")]  # a grid is written for a schedule only
    if grid is None and user is not None and user.startswith("grid=") and user[5:6].isdigit():
        user = "x" + user  # what ":grid=G" and a user's own "grid=G..." cannot tell apart (0.4 read it as a grid)
    phases = sorted(phases)
    corpus = "mixture:" + base + "".join(f"|{start}:{digest}" for start, digest in phases)
    written = corpus + f":blocks={block}" + (f":grid={grid}" if grid is not None else "")  # orders.py, 0.3/0.4
    written = written if user is None else f"{written}:{user}"
    found = upgraded({"version": version, "order": "mixture", "dataset_fingerprint": written})
    identity = "mixture:" + base + ("" if user is None else f":{user}")
    assert (found["dataset_fingerprint"], found["shuffle_block"], found["grid"], found["phases"]) == \
        (identity, block, grid, [[start, digest] for start, digest in phases])


@pytest.mark.parametrize("order,fingerprint", [
    ("radix-feistel", "mine:blocks=4"),  # a map-style order never had parameters appended: the user's string
    ("blocks", None), ("blocks", "shards:abc"), ("blocks", "shards:abc:blocks=x"), ("blocks", "shards:abc:blocks=4x"),
    ("mixture", "mixture:ab|zz:blocks=4"),
])
def test_a_fingerprint_without_parameters_as_a_loader_wrote_them_is_left_whole(order, fingerprint):
    found = upgraded({"version": 3, "order": order, "dataset_fingerprint": fingerprint})
    assert (found["dataset_fingerprint"], found["shuffle_block"], found["grid"], found["phases"]) == \
        (fingerprint, None, None, [])


def test_a_version_4_state_and_a_foreign_one_are_not_upgraded():
    state = progressed("blocks").state_dict()
    assert upgraded(state) == state
    assert upgraded({"version": "3", "dataset_fingerprint": "shards:abc:blocks=4"}) == \
        {"version": "3", "dataset_fingerprint": "shards:abc:blocks=4"}

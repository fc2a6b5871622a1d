"""States written by older shufflepoint versions (``tests/states/*.json``, see ``write_states.py``) load
into today's loaders and read on with exactly the batches the old run read next, on every rank; the
state they write then is version 4, its order's parameters in fields of their own."""

from __future__ import annotations

import copy
import json
import os

import pytest
from cases import CASES, build, take

import shufflepoint
from shufflepoint._shards.corpora.shards.shards import ShardsHooks

HERE = os.path.dirname(__file__)
FILES = sorted(name for name in os.listdir(HERE) if name.endswith(".json"))


def record_of(name: str) -> dict:
    with open(os.path.join(HERE, name)) as f:
        found: dict = json.load(f)
    return found


def test_the_golden_states_are_those_of_0_3_and_0_4():
    versions = {name: record_of(name)["state"]["version"] for name in FILES}
    assert versions == {"v2-array.json": 2, "v2-blocks.json": 2, "v3-array.json": 3, "v3-blocks.json": 3,
                        "v3-schedule.json": 3}


@pytest.mark.parametrize("name", FILES)
def test_an_old_state_reads_on_exactly_on_every_rank(name, tmp_path):
    record = record_of(name)
    case, state = CASES[record["case"]], record["state"]
    for rank in range(case["world_size"]):
        loader = build(case, rank, str(tmp_path / "corpus"))
        loader.load_state_dict(copy.deepcopy(state), verify_ranks=False)
        written = loader.state_dict()
        assert take(iter(loader), loader, case["next"]) == record["next"][rank]
        again = build(case, rank, str(tmp_path / "corpus"))  # what it writes loads and reads on the same
        again.load_state_dict(written, verify_ranks=False)
        assert take(iter(again), again, case["next"]) == record["next"][rank]


@pytest.mark.parametrize("name", FILES)
def test_an_old_state_is_written_again_as_version_4_with_its_parameters_as_fields(name, tmp_path):
    record = record_of(name)
    case, state = CASES[record["case"]], record["state"]
    loader = build(case, 0, str(tmp_path / "corpus"))
    loader.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    written = loader.state_dict()
    assert written["version"] == 4
    old = state["dataset_fingerprint"]
    expected = {
        "array": (None, None, None, []),
        "blocks": (old.split(":blocks=")[0] if old else None, 65536, None, []),
        "schedule": ("mixture:e08c60e54608d5af0c00b1f27e963d2d", 65536, 6,
                     [[0, "45f6188f01b5"], [30, "a9129eebda1c"]]),
    }[record["case"]]
    assert (written["dataset_fingerprint"], written["shuffle_block"], written["grid"], written["phases"]) == expected
    assert {k: v for k, v in written.items() if k in state and k not in ("version", "dataset_fingerprint", "history",
                                                                          "steps")} == \
        {k: v for k, v in state.items() if k not in ("version", "dataset_fingerprint", "history", "steps")}


@pytest.mark.parametrize("name", ["v2-blocks.json", "v3-blocks.json"])
def test_a_block_left_to_the_default_follows_an_old_state_and_a_chosen_one_is_checked(name, tmp_path, monkeypatch):
    """Another machine's decode budget fits another default block: the loader adopts the state's (recorded in
    its fingerprint then), and reads on exactly, whether its block was left to the default or passed as that
    default; a block of the caller's own that differs is refused by name."""
    record = record_of(name)
    case, state = CASES["blocks"], record["state"]
    monkeypatch.setattr(ShardsHooks, "fitting_shuffle_block", lambda self: 8)
    loader = build(case, 1, str(tmp_path / "corpus"))
    assert loader.state_dict()["shuffle_block"] == 8
    loader.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    assert loader.state_dict()["shuffle_block"] == 65536
    assert take(iter(loader), loader, case["next"]) == record["next"][1]
    passed = shufflepoint.DataLoader(shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl")), 2, seed=11, rank=1,
                                     world_size=2, shuffle_block=8)  # the default block, passed: the same loader
    passed.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    assert passed.state_dict()["shuffle_block"] == 65536
    assert take(iter(passed), passed, case["next"]) == record["next"][1]
    chosen = shufflepoint.DataLoader(shufflepoint.Shards(str(tmp_path / "corpus" / "*.jsonl")), 2, seed=11, rank=0,
                                     world_size=2, shuffle_block=16)
    with pytest.raises(shufflepoint.StateError, match=r"state field 'shuffle_block': found 65536\n  expected: 16"):
        chosen.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    assert chosen.state_dict()["shuffle_block"] == 16 and chosen.state_dict()["cursor"] == 0  # nothing changed


def test_an_old_schedule_s_changed_phase_is_refused_by_name_and_an_appended_one_resumes(tmp_path):
    record = record_of("v3-schedule.json")
    state = record["state"]  # saved at position 30, a global batch's edge: phase 0 is fixed, phase 1 not yet

    def loader(schedule):
        mixture = shufflepoint.Mixture([[f"a{i}" for i in range(40)], [f"b{i}" for i in range(40)]],
                                       samples_per_epoch=48, schedule=schedule)
        return shufflepoint.DataLoader(mixture, 3, seed=5, rank=0, world_size=2, collate_fn=list)

    changed = loader([(0, [2, 1]), (30, [1, 3])])
    with pytest.raises(shufflepoint.StateError, match=r"state field 'phases': found \[\[0, '\w+'\], \[30, '\w+'\]\]\n"
                                                     r".*\n  why: schedule\[0\] changed"):
        changed.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    assert changed.state_dict()["cursor"] == 0  # nothing changed
    appended = loader([(0, [1, 1]), (30, [1, 3]), (200, [1, 1])])
    appended.load_state_dict(copy.deepcopy(state), verify_ranks=False)
    assert take(iter(appended), appended, 3) == record["next"][0][:3]
    assert appended.state_dict()["phases"][:2] == state_phases(state) and len(appended.state_dict()["phases"]) == 3


def state_phases(state):
    return [[int(p.split(":")[0]), p.split(":")[1]] for p in state["dataset_fingerprint"].split(":blocks=")[0]
            .split("|")[1:]]

"""``loader.set_weights`` in real, fresh processes (2 ranks, gloo): weights changed twice while the run trains, the
run killed between the changes and resumed by fresh processes from its state alone (the Mixture is built with its
first phase only: the live phase comes back from the state). The resumed run's batches are exactly those of one
run that never stopped; their sources those of a Mixture built with the live phases in its schedule from the start
(under ``strided`` the very rows; under ``spans`` the rows of each pass laid anew at each change, ``lays.py``), each
source's passes whole at every global batch edge. Resumed on 3 ranks instead, every row is served once per pass."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

import shufflepoint
from shufflepoint._tools.launch import launch

pytestmark = [pytest.mark.timeout(600), pytest.mark.mixture]
WORKER = os.path.join(os.path.dirname(__file__), "workers", "live_weights_worker.py")
SOURCES = [list(range(0, 50)), list(range(100, 120)), list(range(200, 230))]
CHANGES = {"4": [5, 1, 0], "13": [1, 2, 3]}  # before steps 4 and 13 (global batch 4 and 13)


def leg(tmp_path, name, deal, steps, state_in=None, differ=False, world=2, fixed=False):
    spec = {"differ": differ, "fixed": fixed, "samples_per_epoch": 48, "batch_size": 3, "deal": deal, "steps": steps,
            "changes": CHANGES, "state_in": state_in, "state_out": str(tmp_path / f"{name}.state"),
            "record": str(tmp_path / name)}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    launch([WORKER, str(path)], world, timeout=300).check()
    records = [json.loads((tmp_path / f"{name}.rank{rank}").read_text()) for rank in range(world)]
    return records, json.loads((tmp_path / f"{name}.state").read_text())


def scheduled(phases, deal, rank):
    """The batches of ``rank`` when the live phases are in the schedule from the start (no set_weights)."""
    schedule = [(0, [1, 1, 1])] + [(start, [float(x.split("/")[0]) / float(x.split("/")[1]) if "/" in x else float(x)
                                            for x in shares]) for start, _, shares in phases[1:]]
    mixture = shufflepoint.Mixture(SOURCES, samples_per_epoch=48, schedule=schedule)
    loader = shufflepoint.DataLoader(mixture, 3, seed=5, deal=deal, shuffle_block=8, collate_fn=list, world_size=2,
                                     rank=rank, verify_ranks=False)
    found = []
    while len(found) < 30:
        found.extend(loader)
    return found[:30]


@pytest.mark.parametrize("fixed", [False, True], ids=["schedule", "weights"])
@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_live_change_resumes_exactly_in_fresh_processes(tmp_path, deal, fixed):
    """``fixed``: the Mixture is built with plain weights (1:1:1 of 48, no schedule=): a loader reads it as the
    schedule of its counts (``mixture/fixed.py``), so everything holds as for the schedule [(0, [1, 1, 1])]."""
    whole, whole_state = leg(tmp_path, "whole", deal, 30, fixed=fixed)
    first, state = leg(tmp_path, "first", deal, 9, fixed=fixed)  # killed between the two changes
    assert [len(p) for p in state["phases"]] == [2, 3]  # the live phase and its shares are in the state
    assert state["order_version"] == (7 if deal == "spans" else 2)
    second, end_state = leg(tmp_path, "second", deal, 21, str(tmp_path / "first.state"), fixed=fixed)
    for rank in range(2):
        assert first[rank] + second[rank] == whole[rank]
    assert end_state["phases"] == whole_state["phases"] and len(whole_state["phases"]) == 3
    assert [p[0] for p in whole_state["phases"]] == [0, 24, 78]  # from the next global batch on (4 and 13 of 6)
    for rank in range(2):
        built = scheduled(whole_state["phases"], deal, rank)
        if deal == "strided":
            assert built == whole[rank]
        else:  # the same source at every place, each source's rows laid anew at a change
            assert [[x // 100 for x in b] for b in built] == [[x // 100 for x in b] for b in whole[rank]]
    assert_passes_whole([whole], 6)


def assert_passes_whole(legs, grid):
    """Each source's passes whole at every edge of the run's grid: no row read k + 1 times before every row of its
    source was read k times (``legs``: each leg's batches per rank, read in turn)."""
    seen, served, edges = Counter(), 0, 0
    for ranks in legs:
        for step in range(len(ranks[0])):
            for batches in ranks:
                seen.update(batches[step])
                served += len(batches[step])
            if served % grid == 0:
                edges += 1
                for rows in SOURCES:
                    counts = [seen[x] for x in rows]
                    assert max(counts) - min(counts) <= 1, (served, rows[0], sorted(Counter(counts).items()))
    assert edges > 10


def test_under_spans_a_run_resumed_on_another_world_serves_every_row_once_per_pass(tmp_path):
    """2 ranks, a change at global batch 4, killed at 9; 3 fresh ranks, a change at global batch 13: each source's
    passes are whole at every edge of the run's grid (6 rows) and the epochs' ends, every row once per pass."""
    first, state = leg(tmp_path, "first", "spans", 9)
    second, _ = leg(tmp_path, "third", "spans", 16, str(tmp_path / "first.state"), world=3)
    assert_passes_whole([first, second], 6)
    assert [p[0] for p in json.loads((tmp_path / "third.state").read_text())["phases"]] == [0, 24, 54 + 4 * 9]


def test_different_weights_on_the_ranks_are_refused_on_every_rank_with_nothing_changed(tmp_path):
    differing, state = leg(tmp_path, "differ", "strided", 16, differ=True)
    for rank in range(2):
        errors = json.loads((tmp_path / f"differ.errors{rank}").read_text())
        assert len(errors) == 2 and all(e.startswith("set_weights: found different weights on the ranks\n")
                                        for e in errors)
        assert "rank 0: ['5', '1', '0']; rank 1: ['6', '2', '1']" in errors[0] and "nothing was changed" in errors[0]
    assert [len(p) for p in state["phases"]] == [2]  # no phase was added
    mixture = shufflepoint.Mixture(SOURCES, samples_per_epoch=48, schedule=[(0, [1, 1, 1])])
    for rank in range(2):  # the run read on as if nothing had been called
        loader = shufflepoint.DataLoader(mixture, 3, seed=5, deal="strided", shuffle_block=8, collate_fn=list,
                                         world_size=2, rank=rank, verify_ranks=False)
        assert differing[rank] == list(loader) + list(loader)  # two epochs of 8 steps

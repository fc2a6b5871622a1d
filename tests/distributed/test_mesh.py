"""Data-parallel meshes on Gloo: 4 processes as 2 dp x 2 tp, then a resume in fresh processes as 1 dp x 2 tp.

Tensor-parallel peers must receive identical batches and hold identical states; the data-parallel ranks
deal the epoch between them, and the resume on another data-parallel degree serves the rest once.
"""

import json
import os
from collections import Counter

import pytest

import shufflepoint
from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "mesh_worker.py")
N, BATCH, SEED = 61, 3, 17


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("mesh")
    launch([WORKER, "save", str(out), "2"], 4).check()
    launch([WORKER, "resume", str(out), "1"], 2).check()

    def read(mode, ranks):
        return [json.loads((out / f"{mode}.r{rank}.json").read_text()) for rank in range(ranks)]

    return read("save", 4), read("resume", 2)


def flat(batches):
    return [index for batch in batches for index in batch]


def test_rank_and_world_size_come_from_the_dp_dimension(runs):
    saved, resumed = runs
    for record in saved:
        assert record["loader"] == {"rank": record["dp_rank"], "world_size": 2}
        assert record["sampler"]["rank"] == record["dp_rank"] and record["sampler"]["num_replicas"] == 2
    assert [r["loader"] for r in resumed] == [{"rank": 0, "world_size": 1}] * 2


def test_tensor_parallel_peers_get_identical_batches_and_states(runs):
    saved, resumed = runs
    by_dp = {}
    for record in saved:
        by_dp.setdefault(record["dp_rank"], []).append(record)
    assert sorted(by_dp) == [0, 1]
    for peers in by_dp.values():
        assert len(peers) == 2 and {p["tp_rank"] for p in peers} == {0, 1}
        assert peers[0]["before"] == peers[1]["before"] and peers[0]["after"] == peers[1]["after"]
        assert peers[0]["sampler"]["first"] == peers[1]["sampler"]["first"]
    assert by_dp[0][0]["before"] != by_dp[1][0]["before"]  # dp ranks are dealt different data
    assert len({json.dumps(r["state"], sort_keys=True) for r in saved}) == 1  # every process, one state
    assert saved[0]["state"]["world_size"] == 2 and saved[0]["state"]["cursor"] == 4 * BATCH * 2
    assert resumed[0]["after"] == resumed[1]["after"] and resumed[0]["state_end"] == resumed[1]["state_end"]


def test_mesh_dims_and_the_process_group_deal_the_same_batches(runs):
    saved, _ = runs
    for record in saved:
        assert record["by_name"] == record["before"] and record["by_group"] == record["before"]


def test_the_epoch_is_served_once_across_the_save_and_the_resume_on_one_dp_rank(runs):
    saved, resumed = runs
    dp_ranks = {r["dp_rank"]: r for r in saved}
    served_before = Counter(flat(dp_ranks[0]["before"]) + flat(dp_ranks[1]["before"]))
    served_after = Counter(flat(resumed[0]["after"]))
    together = served_before + served_after
    assert set(together) == set(range(N)) and set(together.values()) == {1}  # every sample once (no padding:
    # the one dp rank left reads the 37 samples left in batches of 3, the last one short)
    assert sum(served_before.values()) == 2 * 4 * BATCH
    uninterrupted = Counter(flat(dp_ranks[0]["after"]) + flat(dp_ranks[1]["after"]))
    assert set(served_after) - set(served_before) == set(uninterrupted) - set(served_before)


def test_the_resume_in_fresh_processes_continues_the_saved_cursor_on_one_dp_rank(runs):
    """The resumed processes (1 dp x 2 tp) read on from the saved cursor: the rest of the epoch's global order,
    which is the uninterrupted 2-dp-rank run's rest, dealt to one rank."""
    saved, resumed = runs
    assert resumed[0]["state_loaded"]["cursor"] == saved[0]["state"]["cursor"]
    assert resumed[0]["state_loaded"]["world_size"] == 1
    assert resumed[0]["after"] == resumed[1]["after"]  # the tp peers, identical
    order = shufflepoint.permutation(N, SEED)[:].tolist()
    assert flat(resumed[0]["after"]) == order[saved[0]["state"]["cursor"]:]


@pytest.mark.parametrize("case, words", [
    ("no_such_dim", ["ValueError", "mesh_dims", "'cp'", "['dp', 'tp']"]),
    ("whole_mesh", ["ValueError", "mesh:", "'tp'", "mesh_dims='dp'"]),
    ("not_a_member", ["ValueError", "process_group", "not a member"]),
    ("mesh_and_world_size", ["ValueError", "mesh and world_size", "expected: one"]),
])
def test_bad_meshes_and_groups_are_refused_by_name(runs, case, words):
    saved, _ = runs
    for record in saved:
        assert all(word in record[case] for word in words), record[case]


def test_a_disagreeing_dp_rank_is_refused_along_its_dp_group(runs):
    saved, _ = runs
    for rank, record in enumerate(saved):
        if rank in (0, 2):  # the dp group of process 2, whose state differs
            assert "ranks loaded different states" in record["disagreement"]
            assert "'cursor'" in record["disagreement"] and "rank 1=" in record["disagreement"]
        else:
            assert record["disagreement"] == "accepted"


def test_several_data_parallel_dimensions_count_as_one_flattened_row_major(runs):
    saved, _ = runs
    for record in saved:
        row, column = record["flattened"]["coordinate"]
        assert record["flattened"] == {"rank": row * 2 + column, "world_size": 4, "coordinate": [row, column]}
        # the agreement reduces along both dimensions: every process refuses, naming the one that differs
        assert "ranks loaded different states" in record["flattened_disagreement"]
        assert "'epoch'" in record["flattened_disagreement"] and "rank 3=1" in record["flattened_disagreement"]


def test_given_the_whole_mesh_the_agreement_compares_tensor_parallel_peers_too(runs):
    saved, _ = runs
    for rank, record in enumerate(saved):
        if rank in (1, 3):  # process 1's dp group
            assert "ranks loaded different states" in record["tp_peer_dp_only"]
        else:  # its tp peer, process 0, is not compared with it along dp alone
            assert record["tp_peer_dp_only"] == "accepted"
        assert "ranks loaded different states" in record["tp_peer_whole_mesh"], record["tp_peer_whole_mesh"]
        assert "'cursor'" in record["tp_peer_whole_mesh"]


def test_exclude_checks_its_indices_along_the_dp_group(runs):
    """Process 2 (dp rank 1) passes other indices: its dp group (processes 0 and 2) refuses, naming the
    ranks; the other dp group agrees. The same indices everywhere: accepted on every process."""
    saved, _ = runs
    assert [r["exclude_same"] for r in saved] == ["accepted"] * 4
    refused = [r["exclude_disagreement"] for r in saved]
    assert refused[1] == refused[3] == "accepted"
    for words in (refused[0], refused[2]):
        assert "ValueError: exclude: found different indices on the ranks" in words and "rank 1: 2 indices" in words

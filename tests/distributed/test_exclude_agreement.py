"""loader.exclude() across 2 real processes on Gloo: checked like a state load (one all_reduce)."""

import json
import os

import pytest

from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "exclude_worker.py")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("exclude")
    launch([WORKER, str(out)], 2).check()
    return [json.load(open(out / f"exclude.r{rank}.json")) for rank in range(2)]


def test_the_same_indices_everywhere_cost_one_all_reduce_and_are_never_served(results):
    for rank in results:
        assert rank["same"]["ok"] and rank["same"]["excluded"] == 4
        assert rank["same"]["collectives"] == ["all_reduce"]
        assert not {5, 6, 7, 30} & set(rank["same"]["served"])
    assert len(set(results[0]["same"]["served"] + results[1]["same"]["served"])) == 40 - 8 - 4  # 8 before it


def test_different_indices_are_refused_on_every_rank_and_nothing_is_excluded(results):
    for rank in results:
        case = rank["differs"]
        assert not case["ok"] and case["unchanged"]
        assert case["error"].startswith("exclude: found different indices on the ranks\n")
        assert "\n  why: rank 0: 3 indices" in case["error"]
        assert "rank 1: 4 indices" in case["error"] and "nothing was excluded" in case["error"]


def test_verify_ranks_false_skips_the_check(results):
    for number, rank in enumerate(results):
        assert rank["opt_out"]["ok"] and rank["opt_out"]["collectives"] == []
        assert number not in rank["opt_out"]["served"]

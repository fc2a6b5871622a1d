"""docs/packing.md's example, run as a user would: a tiny GPT on packed rows, stopped and run again."""

import os
from collections import Counter

import pytest
from test_examples_shards import records

from shufflepoint._tools.launch import launch

pytestmark = pytest.mark.examples  # make test-examples; tests/distributed/test_packed_resume.py covers the contract

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pretrain_packed.py")




def test_the_packed_example_resumes_exactly_then_on_three_ranks_each_row_once(tmp_path):
    data = str(tmp_path / "data")

    def run(name, nproc, *extra, checkpoint=None):
        launch([EXAMPLE, "--data", data, "--checkpoint", str(tmp_path / f"{checkpoint or name}.pt"),
                "--record", str(tmp_path / name), *extra], nproc).check()

    run("whole", 2)
    run("same", 2, "--stop-after-step", "45")  # 39 steps per epoch: stops in epoch 1, right after a checkpoint
    run("same", 2)
    whole, same = records(tmp_path / "whole", 2), records(tmp_path / "same", 2)
    assert len(whole[0]) == 78
    assert same == whole  # rows and losses: model, optimizer and data order all resumed

    run("before", 2, "--stop-after-step", "45", checkpoint="elastic")
    run("after", 3, checkpoint="elastic")

    def epoch_1(runs):
        return Counter(row for rank in runs for record in rank if record["epoch"] == 1 for row in record["rows"])

    expected = epoch_1(whole)
    seen = epoch_1(records(tmp_path / "before", 2)) + epoch_1(records(tmp_path / "after", 3))
    assert sum(expected.values()) > 100
    assert sum((seen - expected).values()) < 3, "rows served twice (beyond the tail padding of 3 ranks)"
    assert sum((expected - seen).values()) < 2, "rows lost"

"""``shufflepoint headroom``: a pipeline run alone names the stage that bounds it. Each synthetic pipeline
(tests/tools/headroom_pipelines.py) has one stage that sleeps 20 ms a batch while the others take microseconds, so
the answer does not depend on the machine's speed."""

import json
import os

import pytest

from shufflepoint._tools import cli
from shufflepoint._tools.headroom import bound_stage, run_headroom

PIPELINES = os.path.join(os.path.dirname(__file__), "headroom_pipelines.py")


def _factory(name):
    from shufflepoint._tools.audit.config import load_target, parse_target

    return load_target(parse_target(f"{PIPELINES}:{name}"))


@pytest.mark.parametrize("stage", ["read", "transform", "collate", "transfer"])
def test_it_names_the_slow_stage_without_workers(stage):
    found = run_headroom(_factory(stage), [0], batches=4, warmup=1, device="cpu")
    (run,) = found["runs"]
    assert run["bound"] == stage, run
    assert run["stage_ms"][stage] >= 20 and run["batches_per_s"] < 50


def test_with_workers_the_workers_stages_are_shared_and_the_transfer_is_not():
    """Read-bound with 2 workers: still the read. Transfer-bound: the transfer, whatever the workers."""
    read = run_headroom(_factory("read"), [0, 2], batches=6, warmup=2, device="cpu")
    assert [run["bound"] for run in read["runs"]] == ["read", "read"]
    transfer = run_headroom(_factory("transfer"), [2], batches=4, warmup=1, device="cpu")
    assert transfer["best"]["bound"] == "transfer"


def test_the_bound_is_the_slowest_stage_with_the_workers_share():
    times = {"read": 0.02, "transform": 0.01, "collate": 0.001, "transfer": 0.005}
    assert [bound_stage(times, workers) for workers in (0, 1, 4, 8)] == ["read", "read", "read", "transfer"]


def test_the_command_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "headroom.json"
    code = cli.main(["headroom", f"{PIPELINES}:collate", "--workers", "0", "--batches", "3", "--warmup", "1",
                     "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "bound by collate" in printed and "batches/s" in printed
    assert json.loads(out.read_text())["best"]["bound"] == "collate"


def test_a_target_that_is_not_a_shufflepoint_loader_is_refused(capsys):
    assert cli.main(["headroom", f"{PIPELINES}:not_ours", "--workers", "0"]) == 2
    assert "found a DataLoader, expected a shufflepoint.DataLoader" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["headroom", f"{PIPELINES}:read", "--workers", "0,-1"])

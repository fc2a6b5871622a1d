"""``shufflepoint audit`` on a Hugging Face Trainer TARGET (tests/distributed/targets/trainers.py): the
audit runs the Trainer's own loop, checkpoint and resume_from_checkpoint in fresh processes.

Resumed on 1 process from a 2-process checkpoint (epoch 1, 3 batches in), the stock Trainer counts
global_step 11 as epoch 0 of 16 steps: it trains the rest of epoch 0 again, then all of epoch 1,
whose first 24 samples were trained before the save. The audit must find that unaided; the
shufflepoint Trainer must pass (every sample of epoch 1 once).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from integration_checks import run_audit  # noqa: E402

pytestmark = pytest.mark.examples  # make test-examples; test_audit.py and the Trainer tests cover its parts

TARGETS = os.path.join(os.path.dirname(__file__), "targets", "trainers.py")


def audit(tmp_path, capsys, target, *flags):
    code, out, _, report = run_audit(tmp_path, capsys, TARGETS, target, *flags)
    return code, out, report


def test_finds_the_stock_trainers_elastic_bug(tmp_path, capsys):
    code, out, report = audit(tmp_path, capsys, "stock_trainer", "--nproc", "2", "--resume-nproc", "1")
    assert code == 1 and report["verdict"] == "DUPLICATED", out
    (epoch,) = report["epoch_checks"]
    assert (epoch["before_save"], epoch["after_resume"], epoch["duplicates"]) == (24, 64, 24)
    assert any("counted its first epoch as epoch 0" in note and "20 samples" in note for note in report["notes"])
    assert report["loader"] == "transformers.trainer.Trainer"


def test_the_shufflepoint_trainer_trains_every_sample_once(tmp_path, capsys):
    code, out, report = audit(tmp_path, capsys, "shufflepoint_trainer", "--nproc", "2", "--resume-nproc", "1")
    assert code == 0 and report["verdict"] == "EXACTLY_ONCE", out
    (epoch,) = report["epoch_checks"]
    assert (epoch["before_save"], epoch["after_resume"], epoch["duplicates"], epoch["missing"]) == (24, 40, 0, 0)
    assert "shufflepoint_loader.json" in report["state_keys"]

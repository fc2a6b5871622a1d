"""TRL's SFTTrainer with ResumableTrainerMixin, max_steps across a resize (issue 25.5), on real processes:
SFTConfig(max_steps=12) on 2 processes x batch 4 (96 samples), stopped at step 5 (40 trained), resumed on
1 process. The issue's failure: the step counter placed past max_steps, 8 samples (or none) trained. Here
the 56 samples left are trained, in 14 steps numbered on from the saved global_step (6 to 19, as the plain
Trainer's test_max_steps_keeps_meaning_the_setting_runs_data_across_two_to_one), and together the same
samples as the uninterrupted run.

In make test-examples: the Trainer tests (tests/distributed/test_integration_transformers.py) cover the
same mixin on the plain Trainer; this one runs it under TRL."""

import json
import os

import pytest

pytest.importorskip("trl", reason="TRL is not installed (requirements-dev.txt)")

from shufflepoint._tools.launch import launch  # noqa: E402

pytestmark = pytest.mark.examples
WORKER = os.path.join(os.path.dirname(__file__), "workers", "sft_worker.py")


def _read(out, phase, world_size):
    runs = []
    for rank in range(world_size):
        with open(os.path.join(out, f"{phase}.rank{rank}.json")) as f:
            runs.append(json.load(f))
    return runs


def test_sft_trainer_max_steps_two_to_one_trains_the_samples_it_meant(tmp_path):
    out = str(tmp_path)
    launch([WORKER, out, "whole", "stop"], 2, timeout=400).check()
    launch([WORKER, out, "resume"], 1, timeout=300).check()
    whole, before, (after,) = _read(out, "whole", 2), _read(out, "stop", 2), _read(out, "resume", 1)

    def ids(runs):
        return sorted(i for run in runs for batch in run["batches"] for i in batch)

    assert [r["final_step"] for r in whole] == [12, 12] and len(ids(before)) == 40
    # the data is placed at step 10 of the 1-process cut (max_steps 24 there); global_step goes on from the saved 5
    assert (after["start_step"], after["final_step"]) == (5, 5 + 14)
    assert len(ids([after])) == 56
    assert ids(before + [after]) == ids(whole)

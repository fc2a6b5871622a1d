"""The README's quick-start example, run as a user would: stop, run again, compare."""

import json
import os

from shufflepoint._tools.launch import launch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "quickstart.py")


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_quickstart_stops_and_resumes_exactly(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    launch([EXAMPLE, "--checkpoint", str(tmp_path / "a.pt"), "--epochs", "2", "--record", str(whole)], 2).check()
    checkpoint = str(tmp_path / "b.pt")
    launch([EXAMPLE, "--checkpoint", checkpoint, "--epochs", "2", "--record", str(parts),
            "--stop-after-step", "40"], 2).check()  # 32 batches per epoch: stops mid-epoch 1
    launch([EXAMPLE, "--checkpoint", checkpoint, "--epochs", "2", "--record", str(parts)], 2).check()
    for rank in range(2):
        uninterrupted = records(f"{whole}.rank{rank}")
        stopped_and_resumed = records(f"{parts}.rank{rank}")
        # the stop came right after the checkpoint of step 40, so the second run starts at step 41
        assert stopped_and_resumed[:40] == uninterrupted[:40]
        assert stopped_and_resumed[40:] == uninterrupted[40:]
        assert len(uninterrupted) == 64

"""The README's quick-start example, run as a user would: stop, run again, compare."""

import json
import os

import pytest

from shufflepoint._tools.launch import launch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "quickstart.py")


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# make test-examples: make test-wheel (CI) runs the same stop-and-resume check on the installed wheel, and
# test_native_resume.py's same-world resumes cover the promise in make test.
@pytest.mark.examples
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


AUGMENT = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "augment.py")


def augmented(prefix, world):
    """{(epoch, id): digest} over every rank's records, refusing a sample seen with two contents."""
    found = {}
    for rank in range(world):
        for record in records(f"{prefix}.rank{rank}"):
            key = (record["epoch"], record["id"])
            assert found.setdefault(key, record["digest"]) == record["digest"], f"{key} augmented twice differently"
    return found


# make test-examples: test_augment_resume.py covers the promise in make test (every sample of every epoch
# bit-identical to an uninterrupted run's after resumes from 2 to 3 ranks with other worker counts).
@pytest.mark.examples
def test_the_augmentation_example_keeps_every_augmentation_on_three_ranks(tmp_path):
    whole, parts, checkpoint = tmp_path / "whole", tmp_path / "parts", str(tmp_path / "b.pt")
    launch([AUGMENT, "--checkpoint", str(tmp_path / "a.pt"), "--record", str(whole)], 2).check()
    launch([AUGMENT, "--checkpoint", checkpoint, "--record", str(parts), "--num-workers", "0",
            "--stop-after-step", "5"], 2).check()  # 7 batches per epoch on 2 ranks: stops in epoch 0
    launch([AUGMENT, "--checkpoint", checkpoint, "--record", str(parts)], 3).check()
    reference = augmented(whole, 2)
    assert len(reference) == 2 * 200 and len(set(reference.values())) == 2 * 200
    assert augmented(parts, 3) == reference  # every sample of both epochs, each with its own augmentation

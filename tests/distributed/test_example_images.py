"""examples/train_images.py run as a user would, under torchrun: photos decoded and augmented in workers,
killed and resumed exactly on the same world, and once on another world size (every sample once, each with
the crop it had in the uninterrupted run). make test-examples; tests/distributed/test_images_resume.py keeps a
fresh-process resume with workers in make test."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

pytest.importorskip("PIL", reason="the images extra is not installed")
pytest.importorskip("skimage", reason="scikit-image (the example's photos) is not installed")

from shufflepoint._tools.launch import launch  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_images.py")
STEPS_PER_EPOCH = 512 // (16 * 2)


def records(prefix, world):
    found = []
    for rank in range(world):
        with open(f"{prefix}.rank{rank}") as f:
            found.append([json.loads(line) for line in f])
    return found


def samples(lines):
    return Counter((line["epoch"], key, digest) for line in lines
                   for key, digest in zip(line["keys"], line["images"], strict=True))


@pytest.mark.examples
def test_the_images_example_resumes_exactly_and_on_another_world_size(tmp_path):
    environment = {"SHUFFLEPOINT_CACHE": str(tmp_path / "cache")}
    common = [EXAMPLE, "--data", str(tmp_path / "photos"), "--epochs", "2"]
    launch([*common, "--checkpoint", str(tmp_path / "whole.pt"), "--record", str(tmp_path / "whole")], 2,
           env=environment).check()
    whole = records(tmp_path / "whole", 2)
    assert [len(rank) for rank in whole] == [2 * STEPS_PER_EPOCH] * 2

    same, parts = str(tmp_path / "same.pt"), str(tmp_path / "same")
    launch([*common, "--checkpoint", same, "--record", parts, "--stop-after-step", "10"], 2, env=environment).check()
    launch([*common, "--checkpoint", same, "--record", parts, "--num-workers", "3"], 2, env=environment).check()
    assert records(parts, 2) == whole  # batch for batch, crop for crop

    other, parts = str(tmp_path / "other.pt"), str(tmp_path / "other")
    launch([*common, "--checkpoint", other, "--record", parts, "--stop-after-step", "20"], 2,
           env=environment).check()  # epoch 1, 4 steps in
    before = [line for rank in records(parts, 2) for line in rank]
    launch([*common, "--checkpoint", other, "--record", parts], 3, env=environment).check()
    after = [line for rank in records(parts, 3) for line in rank if line["step"] > 20]
    expected = samples(line for rank in whole for line in rank)
    served = samples(before) + samples(after)
    assert set(served) == set(expected), "a sample came back with another crop, or not at all"
    assert sum(served.values()) - len(set(served)) < 3  # only the tail padding of the 3-rank epoch repeats

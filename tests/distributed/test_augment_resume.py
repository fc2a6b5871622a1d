"""Augmented batches survive resumes in real, fresh processes: num_workers 0 -> 2 -> 4, world 2 -> 3.

One uninterrupted run (2 processes) is the reference. A chain of fresh launches interrupts it:
2 processes with no workers stop in epoch 0; 3 processes with 2 workers each continue into
epoch 1 and stop; 3 processes with 4 workers each finish. Every sample of every epoch must come
out bit-identical to the reference's (the augmentations draw from torch's and numpy's global
RNGs and from an explicit per-sample generator). A separate resume on 2 processes with 2 workers
must reproduce the reference batch for batch, collate-time MLM masks included.
"""

import json
import os
from collections import Counter

import pytest
from test_shards_resume import read  # {name}.r{rank}.json, one per rank

from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "augment_worker.py")
N, EPOCHS = 66, 2


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("augment"))

    def go(nproc, **spec):
        launch([WORKER, folder, json.dumps({"epochs": EPOCHS, **spec})], nproc).check()

    go(2, name="first", num_workers=0, reference=True, save_at=[0, 3])
    go(3, name="second", num_workers=2, load="first", save_at=[1, 2])
    go(3, name="third", num_workers=4, load="second")
    go(2, name="same_world", num_workers=2, load="first")
    return folder


def samples(runs):
    """Counter of (epoch, id, sample digest) over every rank's records."""
    return Counter((epoch, i, d) for run in runs for epoch, batches in run.items()
                   for record in batches for i, d in zip(record["ids"], record["samples"], strict=True))


def test_every_sample_keeps_its_augmentation_across_worker_and_world_size_changes(out):
    reference = samples(read(out, "first.ref", 2))
    digest_of = {(epoch, i): d for epoch, i, d in reference}
    assert len(digest_of) == N * EPOCHS, "the reference holds one content per sample and epoch"
    served = samples(read(out, "first.run", 2) + read(out, "second.run", 3) + read(out, "third.run", 3))
    wrong = [(epoch, i) for epoch, i, d in served if digest_of.get((epoch, i)) != d]
    assert not wrong, f"samples augmented differently after a resume: {wrong[:5]}"
    per_sample = Counter((epoch, i) for epoch, i, _d in served.elements())
    assert set(per_sample) == set(digest_of), "a sample of some epoch was never served"
    assert sum(per_sample.values()) - len(per_sample) < 2 * 3, "more repeats than the tail padding"


def test_the_augmentations_are_real_and_differ_by_epoch(out):
    reference = samples(read(out, "first.ref", 2))
    by_epoch = {epoch: {i: d for e, i, d in reference if e == epoch} for epoch in ("0", "1")}
    assert len(set(by_epoch["0"].values())) == N  # every sample its own content
    assert sum(by_epoch["0"][i] != by_epoch["1"][i] for i in range(N)) == N  # a new epoch, new draws


def test_same_world_resume_reproduces_whole_batches_masks_included(out):
    def flat(run):
        return [(epoch, record["batch"]) for epoch in sorted(run, key=int) for record in run[epoch]]

    references, befores, resumed = (read(out, name, 2) for name in ("first.ref", "first.run", "same_world.run"))
    for rank in range(2):
        assert len(flat(befores[rank])) == 3
        assert flat(befores[rank]) + flat(resumed[rank]) == flat(references[rank]), (
            f"rank {rank}: the resumed batches are not the reference's")

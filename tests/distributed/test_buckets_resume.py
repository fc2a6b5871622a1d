"""A loader with buckets across real processes (Gloo, 2 workers each): SIGKILLed after a save, resumed in
new processes batch for batch, and resumed on another world size with every sample at most once."""

import json
import os

import numpy as np
import pytest

from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "buckets_worker.py")
SPEC = dict(n=230, batch_size=4, seed=11, epochs=2, save_at=[0, 9], num_workers=2, saved_world=2)


def keys(n):
    found = np.random.default_rng(7).choice(4, size=n, p=[0.5, 0.25, 0.15, 0.1])
    found[:3] = 4
    return found


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("buckets"))

    def go(mode, nproc, **kwargs):
        return launch([WORKER, mode, folder, json.dumps(SPEC)], nproc, **kwargs)

    killed = go("save", 2, kill_when=os.path.join(folder, "saved"))
    assert killed.killed, "the save run was supposed to be SIGKILLed"
    go("resume", 2).check()
    go("three", 3).check()
    return folder


def read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def test_a_killed_run_resumes_batch_for_batch_in_new_processes(out):
    for rank in range(2):
        reference, before = read(out, f"ref.r{rank}.json"), read(out, f"before.r{rank}.json")
        resumed = read(out, f"resume.r{rank}.json")
        assert len(before) == 9 and before + resumed == reference, f"rank {rank} is not exact"
        assert [step for _, step, _ in reference] == list(range(len(reference)))


def test_every_batch_holds_one_bucket_and_which_names_it(out):
    bucket = keys(SPEC["n"])
    which = read(out, "which.r0.json")
    for rank in range(2):
        for _epoch, step, batch in read(out, f"ref.r{rank}.json"):
            assert len(batch) == SPEC["batch_size"] and len(set(bucket[batch].tolist())) == 1
            if str(step) in which:
                assert which[str(step)][str(rank)] == batch


def test_a_resume_on_three_ranks_reads_each_sample_at_most_once(out):
    before = [batch for rank in range(2) for epoch, _, batch in read(out, f"before.r{rank}.json") if epoch == 0]
    after = [batch for rank in range(3) for epoch, _, batch in read(out, f"three.r{rank}.json") if epoch == 0]
    seen = [index for batch in before + after for index in batch]
    assert len(seen) == len(set(seen))
    bound = 5 * (SPEC["batch_size"] - 1) + 2 * SPEC["batch_size"]  # K(B-1) + (W-1)B, W = 3 at the epoch's end
    assert SPEC["n"] - len(seen) <= bound
    bucket = keys(SPEC["n"])
    assert all(len(set(bucket[batch].tolist())) == 1 for batch in after)
    steps = {len([b for e, _, b in read(out, f"three.r{rank}.json")]) for rank in range(3)}
    assert len(steps) == 1  # every rank reads as many batches

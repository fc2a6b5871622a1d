"""A loader with buckets across real processes (Gloo, 2 workers each): SIGKILLed after a save, resumed in
new processes batch for batch, and resumed on another world size: with ``drop_last=False`` (the default) every
sample of every epoch read, only the documented padding twice; with ``drop_last=True`` each at most once."""

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
def ran(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("buckets"))

    def go(mode, nproc, **kwargs):
        return launch([WORKER, mode, folder, json.dumps(SPEC)], nproc, **kwargs)

    killed = go("save", 2, kill_when=os.path.join(folder, "saved"))
    assert killed.killed, "the save run was supposed to be SIGKILLed"
    go("resume", 2).check()
    go("three", 3).check()
    return folder


@pytest.fixture(params=[False, True], ids=["padded", "drop_last"])
def out(ran, request):
    """(the run's folder, drop_last): the same processes read both tail policies, files ``pad.``/``drop.``."""
    return ran, request.param


def read(out, name):
    folder, drop_last = out
    with open(os.path.join(folder, ("drop." if drop_last else "pad.") + name)) as f:
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


def test_a_resume_on_three_ranks_reads_every_sample_as_drop_last_says(out):
    drop_last = out[1]
    bound = 5 * (SPEC["batch_size"] - 1) + 2 * SPEC["batch_size"]  # K(B-1) + (W-1)B, W = 3 at the epoch's end
    bucket = keys(SPEC["n"])
    for epoch in range(SPEC["epochs"]):  # epoch 0: 2 ranks then 3 (elastic); epoch 1: 3 ranks from its start
        before = [batch for rank in range(2) for e, _, batch in read(out, f"before.r{rank}.json") if e == epoch]
        after = [batch for rank in range(3) for e, _, batch in read(out, f"three.r{rank}.json") if e == epoch]
        seen = [index for batch in before + after for index in batch]
        if drop_last:
            assert len(seen) == len(set(seen)) and SPEC["n"] - len(seen) <= bound
        else:
            assert set(seen) == set(range(SPEC["n"])), f"epoch {epoch}: a sample was not read"
            assert len(seen) - SPEC["n"] <= bound
        assert all(len(batch) == SPEC["batch_size"] and len(set(bucket[batch].tolist())) == 1 for batch in after)
        steps = {len([b for e, _, b in read(out, f"three.r{rank}.json") if e == epoch]) for rank in range(3)}
        assert len(steps) == 1  # every rank reads as many batches


def test_the_reference_run_serves_every_sample_of_every_epoch_on_two_ranks(out):
    drop_last = out[1]
    for epoch in range(SPEC["epochs"]):
        seen = [i for rank in range(2) for e, _, batch in read(out, f"ref.r{rank}.json") if e == epoch for i in batch]
        assert (len(seen) == len(set(seen))) if drop_last else (set(seen) == set(range(SPEC["n"])))

"""Kill-and-resume soak: real processes, SIGKILL at random steps (also mid-checkpoint-write),
restart with a random world size in {1, 2, 3}, and check every epoch saw every sample once.

CI runs a few cycles (SHUFFLEPOINT_SOAK_CYCLES, default 3); `make soak` runs many more.
"""

import json
import os
import random
from collections import Counter

import pytest
import torch

from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "soak_worker.py")
N, EPOCHS = 60, 3


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def checkpoint_step(job):
    path = os.path.join(job, "checkpoint.pt")
    return torch.load(path)["step"] if os.path.exists(path) else 0


def run_job(job, rng, cycles_left):
    """Segments until the job finishes; returns (kills, accepted log entries per rank-segment)."""
    accepted, kills, segment = [], 0, 0
    while True:
        world = rng.choice([1, 2, 3])
        start = checkpoint_step(job)
        mode = rng.choice(["step", "step", "write"]) if kills < cycles_left else "none"
        kill_step = start + rng.randint(1, 12)
        if mode == "write":
            kill_step += -kill_step % 3  # checkpoints happen every 3 steps
        if mode == "none":
            kill_step = 10**9
        marker = os.path.join(job, "kill")
        if os.path.exists(marker):
            os.remove(marker)
        result = launch([WORKER, job, str(segment), str(kill_step), mode], world, kill_when=marker)
        if not result.killed:
            result.check()
        end = checkpoint_step(job) if result.killed else 10**9
        for rank in range(world):
            entries = read_log(os.path.join(job, f"segment{segment}.rank{rank}.jsonl"))
            accepted.extend(e for e in entries if start < e["step"] <= end)  # work after the checkpoint is redone
        kills += result.killed
        segment += 1
        if os.path.exists(os.path.join(job, "done")):
            return kills, accepted


@pytest.mark.soak
def test_kill_and_resume_soak(tmp_path):
    cycles = int(os.environ.get("SHUFFLEPOINT_SOAK_CYCLES", "3"))
    rng = random.Random(int(os.environ.get("SHUFFLEPOINT_SOAK_SEED", "2026")))
    done = jobs = 0
    while done < cycles:
        job = str(tmp_path / f"job{jobs}")
        os.makedirs(job)
        kills, accepted = run_job(job, rng, cycles - done)
        for epoch in range(EPOCHS):
            seen = Counter(i for e in accepted if e["epoch"] == epoch for i in e["ids"])
            assert set(seen) == set(range(N)), f"job {jobs} epoch {epoch}: samples lost"
            repeats = sum(seen.values()) - N
            assert 0 <= repeats < 3, f"job {jobs} epoch {epoch}: {repeats} repeats beyond the tail padding"
        done += kills
        jobs += 1
    print(f"soak: {done} kill-and-resume cycles over {jobs} jobs")

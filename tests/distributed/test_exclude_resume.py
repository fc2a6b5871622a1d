"""exclude() on 2 real processes, a stop, and a resume in new processes on the same world: every rank
continues batch for batch as the uninterrupted run (simulated in this process, where ``lockstep`` excludes
the same indices at the same step), under both deals."""

import json
import os

import pytest

import shufflepoint
from shufflepoint._tools.launch import launch
from simulated import lockstep

WORKER = os.path.join(os.path.dirname(__file__), "workers", "exclude_resume_worker.py")
N, BATCH, SEED, EXCLUDE_AT, EPOCHS = 50, 3, 5, 3, 2
EXCLUDED = [4, 11, 12, 13, 40]


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_resume_after_exclude_continues_every_rank_exactly(tmp_path, deal):
    launch([WORKER, "save", str(tmp_path), deal], 2).check()
    launch([WORKER, "resume", str(tmp_path), deal], 2).check()
    ranks = [shufflepoint.DataLoader(list(range(N)), BATCH, seed=SEED, deal=deal, rank=r, world_size=2)
             for r in range(2)]
    whole, _ = lockstep(ranks, EPOCHS, {EXCLUDE_AT: EXCLUDED})
    for rank in range(2):
        received = {}
        for mode in ("save", "resume"):
            received.update(json.loads((tmp_path / f"{mode}.{deal}.r{rank}.json").read_text()))
        assert [received[str(step)] for step in range(len(received))] == [batches[rank] for _, _, batches in whole]
        assert not set(EXCLUDED) & {i for step, _, batches in whole if step >= EXCLUDE_AT for i in batches[rank]}

"""which() across real processes: a run on 2 ranks that changes its batch size, resumed on 3 ranks in new
processes; afterwards, a loader in this process (1 rank) loaded with the last state names every rank's
batch of every step of both launches, for both deals."""

import json
import os

import pytest
import torch

import shufflepoint
from shufflepoint._tools.launch import launch

WORKER = os.path.join(os.path.dirname(__file__), "workers", "which_worker.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("which"))
    launch([WORKER, "first", out], 2).check()
    launch([WORKER, "second", out], 3).check()
    return out


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_which_names_every_ranks_batch_of_a_resized_run(run, deal):
    received: dict[int, dict[int, list[int]]] = {}
    for mode, world in (("first", 2), ("second", 3)):
        for rank in range(world):
            with open(os.path.join(run, f"{deal}.{mode}.r{rank}.json")) as f:
                for step, batch in json.load(f).items():
                    received.setdefault(int(step), {})[rank] = batch
    assert sorted(received) == list(range(16))
    state = torch.load(os.path.join(run, f"{deal}.second.pt"))["loader"]
    assert [entry[:3] for entry in state["history"]] == [[0, 2, 3], [4, 2, 2], [7, 3, 3]]
    looking = shufflepoint.DataLoader(list(range(37)), 8, seed=5, deal=deal, rank=0, world_size=1)
    looking.load_state_dict(state)
    assert {step: looking.which(step) for step in received} == received

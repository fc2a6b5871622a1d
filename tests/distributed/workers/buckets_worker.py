"""Runs inside each launched process: a loader with buckets, saved, SIGKILLed, resumed in new processes.

    python -m torch.distributed.run ... buckets_worker.py MODE OUT SPEC_JSON

MODE "save": for each tail policy (``drop_last`` False, then True; files prefixed ``pad.``/``drop.``), an
uninterrupted reference run (recorded), then a fresh run to the save point whose state is written atomically;
then it keeps reading until the launcher SIGKILLs it. MODE "resume": a fresh loader (any world size) per
policy, the state loaded, the rest of the run recorded.
"""

import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, SPEC = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()


class Tagged(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return torch.tensor(index)


def keys(n):
    """Five buckets of uneven sizes, one of 3 samples (smaller than a batch)."""
    found = np.random.default_rng(7).choice(4, size=n, p=[0.5, 0.25, 0.15, 0.1])
    found[:3] = 4
    return found


TAILS = {"pad": False, "drop": True}  # file prefix: drop_last


def make(drop_last):
    return shufflepoint.DataLoader(Tagged(SPEC["n"]), SPEC["batch_size"], seed=SPEC["seed"],
                                   num_workers=SPEC["num_workers"], buckets=keys(SPEC["n"]), drop_last=drop_last)


def write_json(name, value):
    tmp = os.path.join(OUT, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, os.path.join(OUT, name))


def run_from(loader, epochs):
    """[[epoch, step, batch], ...] from the loader's position to the end of epoch ``epochs - 1``."""
    out = []
    while loader.epoch < epochs:
        epoch = loader.epoch
        for batch in loader:
            out.append([epoch, loader.step - 1, batch.tolist()])
    return out


if MODE == "save":
    for tail, drop_last in TAILS.items():
        write_json(f"{tail}.ref.r{RANK}.json", run_from(make(drop_last), SPEC["epochs"]))
        loader = make(drop_last)
        save_epoch, save_step = SPEC["save_at"]
        received = []
        for epoch in range(save_epoch + 1):
            for batch in loader:
                received.append([epoch, loader.step - 1, batch.tolist()])
                if epoch == save_epoch and loader.batches_this_epoch() == save_step:
                    break
        checkpoint = os.path.join(OUT, f"{tail}.state.r{RANK}.pt")
        torch.save({"loader": loader.state_dict()}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)
        write_json(f"{tail}.before.r{RANK}.json", received)
        write_json(f"{tail}.which.r{RANK}.json", {str(step): loader.which(step) for step in range(loader.step)})
    dist.barrier()
    if RANK == 0:
        open(os.path.join(OUT, "saved"), "w").close()
    for _batch in loader:  # keep reading: the launcher kills us mid-epoch
        time.sleep(0.05)
    time.sleep(60)
else:
    for tail, drop_last in TAILS.items():
        loader = make(drop_last)
        state = torch.load(os.path.join(OUT, f"{tail}.state.r{RANK % SPEC['saved_world']}.pt"))["loader"]
        loader.load_state_dict(state)
        write_json(f"{tail}.{MODE}.r{RANK}.json", run_from(loader, SPEC["epochs"]))
end_worker()

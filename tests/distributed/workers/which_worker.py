"""Runs inside each launched process: a run that changes batch size and world size, for which().

    python -m torch.distributed.run ... which_worker.py MODE OUT

MODE "first": read 7 steps on this world, with ``set_batch_size(2)`` after step 4 (between two
batches of the live iterator), record every step's batch, save the state. MODE "second": fresh
loaders load that state (another world size), read 9 steps across the epoch's end, record, save.
One scenario per deal.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
RANK = dist.get_rank()
N = 37


class Tagged(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, index):
        return torch.tensor(index)


def write_json(name, value):
    tmp = os.path.join(OUT, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, os.path.join(OUT, name))


def read(loader, steps, change_at=None):
    received, it = {}, iter(loader)
    while len(received) < steps:
        if change_at is not None and loader.step == change_at:
            loader.set_batch_size(2)
        step = loader.step
        batch = next(it, None)
        if batch is None:
            it = iter(loader)
            continue
        received[step] = batch.tolist()
    return received


for deal in ("strided", "spans"):
    loader = shufflepoint.DataLoader(Tagged(), 3, seed=5, deal=deal, num_workers=1)
    state_path = os.path.join(OUT, f"{deal}.first.pt")
    if MODE == "first":
        received = read(loader, 7, change_at=4)
    else:
        loader.load_state_dict(torch.load(state_path)["loader"])
        received = read(loader, 9)
        state_path = os.path.join(OUT, f"{deal}.second.pt")
    write_json(f"{deal}.{MODE}.r{RANK}.json", received)
    if RANK == 0:
        torch.save({"loader": loader.state_dict()}, state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
    dist.barrier()
end_worker()

"""Runs inside each launched process: shufflepoint.DataLoader scenarios for the resume tests.

    python -m torch.distributed.run ... native_worker.py MODE OUT SCENARIOS_JSON

MODE "save": for each scenario, an uninterrupted reference run (recorded), then a fresh run to the
save point whose state is written atomically (tmp file + rename). With "kill": true, it then keeps
training until the launcher SIGKILLs it. MODE "resume": fresh loader, load, record the rest.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, SCENARIOS = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()


class Tagged(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return torch.tensor(index)


def make(s):
    return shufflepoint.DataLoader(Tagged(s["n"]), s["batch_size"], seed=s["seed"],
                                   num_workers=s.get("num_workers", 0), drop_last=s.get("drop_last", False))


def write_json(name, value):
    tmp = os.path.join(OUT, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, os.path.join(OUT, name))


def run_from(loader, epochs):
    """{epoch: [batch, ...]} from the loader's current epoch to `epochs`."""
    out = {}
    while loader.epoch < epochs:
        epoch = loader.epoch
        out.setdefault(str(epoch), []).extend(batch.tolist() for batch in loader)
    return out


for s in SCENARIOS:
    name = s["name"]
    if MODE == "save":
        write_json(f"{name}.ref.r{RANK}.json", run_from(make(s), s["epochs"]))
        loader = make(s)
        save_epoch, save_step = s["save_at"]
        received = {}
        while True:
            epoch = loader.epoch
            batches = received.setdefault(str(epoch), [])
            stop = False
            for batch in loader:
                batches.append(batch.tolist())
                if epoch == save_epoch and len(batches) == save_step:
                    stop = True
                    break
            if stop or epoch == save_epoch and save_step == 0:
                break
        state = loader.state_dict()
        checkpoint = os.path.join(OUT, f"{name}.state.r{RANK}.pt")
        torch.save({"loader": state}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)  # the atomic write: never a half-written checkpoint
        write_json(f"{name}.before.r{RANK}.json", received)
        dist.barrier()
        if s.get("kill"):
            if RANK == 0:
                open(os.path.join(OUT, f"{name}.saved"), "w").close()
            for _batch in loader:  # keep training: the launcher kills us mid-epoch
                time.sleep(0.05)
            time.sleep(60)
    else:
        loader = make(s)
        source_rank = s.get("state_from_rank", RANK) % s["saved_world"]
        state = torch.load(os.path.join(OUT, f"{s['source']}.state.r{source_rank}.pt"))["loader"]
        loader.load_state_dict(state)
        write_json(f"{name}.resumed.r{RANK}.json", run_from(loader, s["epochs"]))
end_worker()

"""Runs inside each launched process: a scheduled Mixture of two Packed JSONL corpora, read by
``shufflepoint.DataLoader`` under the default ``spans`` deal, loading the state a previous launch saved (if any),
reading ``steps`` global batches (or to the end of ``epochs``), recording every batch's rows (their token ids)
and how many of them are not tail padding, and saving the state.

    python -m torch.distributed.run ... mixture_resize_worker.py SPEC
"""

import json
import os
import sys

import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

with open(sys.argv[1]) as f:
    SPEC = json.load(f)
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()

sources = [shufflepoint.Packed(shufflepoint.Shards(os.path.join(folder, "part-*.jsonl"), progress=False),
                               SPEC["seq_len"], progress=False) for folder in SPEC["folders"]]
mixture = shufflepoint.Mixture(sources, samples_per_epoch=SPEC["samples_per_epoch"],
                               schedule=[tuple(phase) for phase in SPEC["schedule"]])
loader = shufflepoint.DataLoader(mixture, SPEC["batch_size"], seed=SPEC["seed"], shuffle_block=SPEC["shuffle_block"],
                                 collate_fn=lambda rows: [row["input_ids"].tolist() for row in rows])
if SPEC.get("state_in"):
    with open(SPEC["state_in"]) as f:
        loader.load_state_dict(json.load(f))
records, taken = [], 0
while loader.epoch < SPEC["epochs"] and (SPEC["steps"] is None or taken < SPEC["steps"]):
    epoch, real = loader.epoch, loader.real_samples_left(RANK)
    for batch in loader:
        records.append({"epoch": epoch, "rows": batch, "real": max(min(real, len(batch)), 0)})
        real -= len(batch)
        taken += 1
        if SPEC["steps"] is not None and taken == SPEC["steps"]:
            break
with open(f"{SPEC['record']}.rank{RANK}", "w") as f:
    json.dump(records, f)
if RANK == 0:
    tmp = SPEC["state_out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(loader.state_dict(), f)
    os.replace(tmp, SPEC["state_out"])
end_worker()

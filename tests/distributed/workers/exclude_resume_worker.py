"""exclude() then a stop, on real ranks; resumed in new processes on the same world.

argv: mode ("save" or "resume"), output folder, deal. 50 samples, batch 3 per rank, seed 5: 3 steps, then
``exclude(EXCLUDED)`` on every rank, 2 more steps, the state saved (rank 0's copy, as a checkpoint holds
one); the resumed processes load it and read the rest of epoch 0 and all of epoch 1. Each rank writes the
batches it received, by global step.
"""

import json
import os
import sys

import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, DEAL = sys.argv[1], sys.argv[2], sys.argv[3]
N, BATCH, SEED, EXCLUDE_AT, SAVE_AT, EPOCHS = 50, 3, 5, 3, 5, 2
EXCLUDED = [4, 11, 12, 13, 40]
dist.init_process_group("gloo")
RANK = dist.get_rank()
loader = shufflepoint.DataLoader(list(range(N)), BATCH, seed=SEED, deal=DEAL)
received = {}
state_path = os.path.join(OUT, f"state.{DEAL}.json")
if MODE == "resume":
    with open(state_path) as f:
        loader.load_state_dict(json.load(f))
while loader.epoch < EPOCHS:
    for batch in loader:
        received[loader.step - 1] = batch.tolist()
        if MODE == "save" and loader.step == EXCLUDE_AT:
            loader.exclude(EXCLUDED)
        if MODE == "save" and loader.step == SAVE_AT:
            break
    if MODE == "save":
        break
if MODE == "save" and RANK == 0:
    with open(state_path, "w") as f:
        json.dump(loader.state_dict(), f)
with open(os.path.join(OUT, f"{MODE}.{DEAL}.r{RANK}.json"), "w") as f:
    json.dump(received, f)
end_worker()

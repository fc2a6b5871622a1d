"""One segment of a kill-and-resume soak job: resume from the checkpoint if any, train, die.

    soak_worker.py OUT SEGMENT KILL_STEP KILL_MODE

Checkpoints every 3 steps from rank 0 (the state is the same on every rank), atomically: write a
temporary file, then rename. At KILL_STEP it writes OUT/kill so the harness SIGKILLs the job; with
KILL_MODE "write" that happens in the middle of writing a checkpoint.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

OUT, SEGMENT, KILL_STEP, KILL_MODE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
N, BATCH, SEED, EPOCHS, EVERY = 60, 2, 17, 3, 3
CHECKPOINT = os.path.join(OUT, "checkpoint.pt")

dist.init_process_group("gloo")
rank = dist.get_rank()


class Tagged(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, index):
        return torch.tensor(index)


def save(step, state, slow):
    tmp = CHECKPOINT + ".tmp"
    with open(tmp, "wb") as f:
        payload = {"step": step, "loader": state}
        if slow:
            f.write(b"partial checkpoint bytes")
            f.flush()
            open(os.path.join(OUT, "kill"), "w").close()
            time.sleep(30)  # the harness kills us here, mid-write
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, CHECKPOINT)


loader = shufflepoint.DataLoader(Tagged(), BATCH, seed=SEED)
step = 0
if os.path.exists(CHECKPOINT):
    checkpoint = torch.load(CHECKPOINT)
    loader.load_state_dict(checkpoint["loader"])
    step = checkpoint["step"]
log = open(os.path.join(OUT, f"segment{SEGMENT}.rank{rank}.jsonl"), "a")
while loader.epoch < EPOCHS:
    epoch = loader.epoch
    for batch in loader:
        step += 1
        log.write(json.dumps({"step": step, "epoch": epoch, "ids": batch.tolist()}) + "\n")
        log.flush()
        if step % EVERY == 0 and rank == 0:
            save(step, loader.state_dict(), slow=KILL_MODE == "write" and step == KILL_STEP)
        if step == KILL_STEP and KILL_MODE == "step" and rank == 0:
            open(os.path.join(OUT, "kill"), "w").close()
        if step >= KILL_STEP:
            time.sleep(0.5)  # let the kill land before much more work is done
        dist.barrier()
if rank == 0:
    open(os.path.join(OUT, "done"), "w").close()
end_worker()

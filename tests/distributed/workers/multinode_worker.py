"""One process of a simulated multi-node job: shufflepoint.DataLoader over shards in S3.

    SP_NODE=a SP_CACHE=/tmp/cache-a python -m torch.distributed.run --nnodes=1:3 --rdzv-backend=c10d ... \
        multinode_worker.py SPEC_JSON

Each simulated node is one torchrun agent with its own cache folder (``SP_CACHE``), shared by the
node's local ranks. Every step trains a DDP model (a real collective), then the ranks' sample ids
are gathered and appended to the job's ``committed`` log. Every ``checkpoint_every`` steps rank 0
writes the loader's state, the step and that log atomically: what a later generation loads is
exactly what was trained before it, and the steps after it are trained again (not committed).

At step ``pause_at``, the first generation of the job writes ``paused.<rank>`` and waits: for
``release`` (then goes on, and fails at the next collective if a node was killed), or forever (the
test kills it, or its agent restarts it for a node that joins). Rank 0 of the generation that
finishes writes ``final.json``; each process writes ``procs/<node>.<pid>.json``, who it was.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

SPEC = json.loads(sys.argv[1])
OUT, CHECKPOINT = SPEC["out"], SPEC["checkpoint"]
FIRST_GENERATION = not os.path.exists(os.path.join(OUT, "paused.0"))  # read before any rank can pause
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


corpus = shufflepoint.Shards(SPEC["sources"], storage_options=SPEC["storage_options"],
                             cache_dir=os.environ["SP_CACHE"], progress=False, retries=8, **SPEC.get("shards", {}))
loader = shufflepoint.DataLoader(corpus, SPEC["batch_size"], seed=SPEC["seed"], shuffle_block=SPEC["shuffle_block"],
                                 num_workers=SPEC.get("num_workers", 0))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
step, committed = 0, []
if os.path.exists(CHECKPOINT):  # any rank's state restores every rank, in any world size
    checkpoint = torch.load(CHECKPOINT)
    loader.load_state_dict(checkpoint["loader"])
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    step, committed = checkpoint["step"], checkpoint["committed"]
write_json(os.path.join(OUT, "procs", f"{os.environ['SP_NODE']}.{os.getpid()}.json"), {
    "node": os.environ["SP_NODE"], "cache": os.environ["SP_CACHE"], "rank": RANK, "world": WORLD,
    "local_rank": int(os.environ["LOCAL_RANK"]), "group_rank": int(os.environ["GROUP_RANK"]),
    "restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"]), "loaded_step": step,
    "first_generation": FIRST_GENERATION})

while loader.epoch < SPEC["epochs"]:
    epoch = loader.epoch
    for batch in loader:
        ids = (batch[:, 0] if torch.is_tensor(batch) else batch["id"]).tolist()  # token windows: the first token
        loss = model(torch.tensor(ids, dtype=torch.float32)[:, None]).pow(2).mean()
        optimizer.zero_grad(), loss.backward(), optimizer.step()  # DDP: an all_reduce across the nodes
        gathered: list = [None] * WORLD
        dist.all_gather_object(gathered, ids)
        step += 1
        committed.append({"step": step, "epoch": epoch, "world": WORLD, "batches": gathered})
        if step % SPEC["checkpoint_every"] == 0:
            if RANK == 0:
                state = {"loader": loader.state_dict(), "model": model.state_dict(), "optim": optimizer.state_dict(),
                         "step": step, "committed": committed}
                torch.save(state, CHECKPOINT + ".tmp")
                os.replace(CHECKPOINT + ".tmp", CHECKPOINT)
            dist.barrier()  # the checkpoint of this step exists before any rank goes on
        if SPEC.get("slow_steps"):
            time.sleep(SPEC["slow_steps"])  # a step that takes time, so a SIGKILL lands mid-epoch
        if FIRST_GENERATION and step == SPEC.get("pause_at"):
            open(os.path.join(OUT, f"paused.{RANK}"), "w").close()
            while not os.path.exists(os.path.join(OUT, "release")):
                time.sleep(0.05)
if RANK == 0:
    write_json(os.path.join(OUT, "final.json"), {"committed": committed, "world": WORLD})
end_worker()

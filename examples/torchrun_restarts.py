"""torchrun --max-restarts: a worker dies, torchrun restarts the job, ranks move, the data does not.

    python -m torch.distributed.run --standalone --nproc_per_node=2 --max-restarts=1 \
        examples/torchrun_restarts.py --crash-at-step 15

torchrun's docs warn that RANK is not stable across restarts. Each process here saves its own
checkpoint file, as a per-process checkpointer does, and on the restart every process comes back
to read another rank's share of the data (``rank = (RANK + TORCHELASTIC_RESTART_COUNT) % WORLD_SIZE``,
the rotation a restart is allowed to make), so each one loads a file that a process of another
rank wrote. The resume is still exact: the loader's state is the same on every rank, so any
rank's file restores any rank. ``--crash-at-step N`` makes one worker exit with an error right
after the checkpoint of step N, on the first attempt only. --record FILE appends what each rank
trained on.

(The rotation is applied to the loader's ``rank=``, not to the process group: on one machine
torchrun hands out the same RANKs again. The loader only sees the rank it is given.)
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", default="checkpoints/torchrun_restarts")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=100)
parser.add_argument("--checkpoint-every", type=int, default=5)
parser.add_argument("--crash-at-step", type=int, default=None, help="fail one worker once, after this checkpoint")
parser.add_argument("--record", default=None, help="append the sample ids of every step here")
args = parser.parse_args()

# --- the README's torchrun snippet starts here ---
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))  # 0, then 1 after the first restart
slot = int(os.environ["LOCAL_RANK"])  # which process on this machine: the checkpoint file it owns
# torchrun keeps one store across restarts; without a prefix per attempt, the restarted workers'
# Gloo rendezvous can read the dead workers' addresses ("Connection refused"; seen here).
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", store),
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
rank = (dist.get_rank() + attempt) % dist.get_world_size()  # another rank on each restart

generator = torch.Generator().manual_seed(0)
features = torch.randn(args.samples, 8, generator=generator)
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, features.sum(1, keepdim=True))
torch.manual_seed(1234)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loader = shufflepoint.DataLoader(dataset, batch_size=4, seed=1234, rank=rank)  # this attempt's rank

os.makedirs(args.checkpoint_dir, exist_ok=True)
path = os.path.join(args.checkpoint_dir, f"process{slot}.pt")
step = 0
if os.path.exists(path):  # written by this slot's process on the last attempt, under another rank
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])  # same state on every rank: any file fits any rank
    step = checkpoint["step"]
while loader.epoch < args.epochs:
    for ids, x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if step % args.checkpoint_every == 0:
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "step": step, "rank": rank}
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
# --- the README's torchrun snippet ends here ---
        if args.record:
            with open(f"{args.record}.rank{rank}", "a") as f:
                f.write(json.dumps({"step": step, "epoch": loader.epoch, "ids": ids.tolist(), "loss": loss.item(),
                                    "attempt": attempt, "slot": slot}) + "\n")
        if attempt == 0 and step == args.crash_at_step:
            dist.barrier()  # every process has written its checkpoint of this step
            if slot == 0:
                raise SystemExit(f"simulated failure at step {step}; torchrun restarts the job")
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()

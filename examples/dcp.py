"""torch.distributed.checkpoint (DCP): the loader is one more entry of the state dict.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/dcp.py

Stop it anywhere (--stop-after-step N simulates a preemption right after a checkpoint) and run the
same command again, with the same or another --nproc_per_node: it continues from the last
checkpoint. Same world size: exactly the batches an uninterrupted run would have used. Another
world size: the rest of the interrupted epoch is re-dealt, each sample once, in the same global
order. --record FILE appends what each rank trained on.

Why this works with DCP: the loader's state_dict() has the same keys at every step (DCP asks the
*fresh* loader for its keys before reading), and the same values on every rank (DCP keeps one copy
of a key that every rank writes, so nothing collides).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", default="checkpoints/dcp")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=100)
parser.add_argument("--checkpoint-every", type=int, default=3)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None, help="append the sample ids of every step here")
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
features = torch.randn(args.samples, 8)
dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, features.sum(1, keepdim=True))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

# --- the README's DCP snippet starts here ---
loader = shufflepoint.DataLoader(dataset, batch_size=4, seed=1234)
progress = {"step": 0}  # a plain dict: DCP fills it in place
latest = os.path.join(args.checkpoint_dir, "latest")
if os.path.exists(latest):  # resume, with this run's world size, whatever the saved one was
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, "loader": loader, "progress": progress}
    dcp.load(state, checkpoint_id=open(latest).read())  # calls loader.load_state_dict(...) for you
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
while loader.epoch < args.epochs:
    for ids, x, y in loader:  # continues the epoch where the checkpoint left it
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        progress["step"] += 1
        if progress["step"] % args.checkpoint_every == 0:  # every rank calls dcp.save
            model_state, optim_state = get_state_dict(model, optimizer)
            path = os.path.join(args.checkpoint_dir, f"step-{progress['step']}")
            dcp.save({"model": model_state, "optim": optim_state, "loader": loader, "progress": progress},
                     checkpoint_id=path)
            if dist.get_rank() == 0:  # point at it only once it is complete
                with open(latest + ".tmp", "w") as f:
                    f.write(path)
                os.replace(latest + ".tmp", latest)
# --- the README's DCP snippet ends here ---
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"step": progress["step"], "epoch": loader.epoch, "ids": ids.tolist(),
                                    "loss": loss.item()}) + "\n")
        if args.stop_after_step is not None and progress["step"] == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()  # close Gloo cleanly on every rank before exiting
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()

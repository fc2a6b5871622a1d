"""The README's example: torchrun + shufflepoint.DataLoader + one torch.save of everything.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/quickstart.py

Stop it anywhere (Ctrl-C, SIGKILL, --stop-after-step N) and run the same command again, with the
same or another --nproc_per_node: it continues from the last checkpoint with exactly the samples
an uninterrupted run would have used. --record FILE appends what each rank trained on.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", default="checkpoints/quickstart.pt")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
features = torch.randn(1000, 8)
dataset = torch.utils.data.TensorDataset(torch.arange(1000), features, features.sum(1, keepdim=True))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

# --- the README's example starts here ---
loader = shufflepoint.DataLoader(dataset, batch_size=16, seed=1234, num_workers=2)
if os.path.exists(args.checkpoint):  # resume: model, optimizer and the data order
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
step = 0
while loader.epoch < args.epochs:
    for ids, x, y in loader:  # each rank gets its shard; the next epoch reshuffles by itself
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 10 == 0:  # every rank's loader state is the same
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict()}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # atomic: a kill never leaves half a file
# --- the README's example ends here ---
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"epoch": loader.epoch, "ids": ids.tolist()}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()  # close Gloo cleanly on every rank before exiting
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()

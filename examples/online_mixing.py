"""Online mixing: a Mixture's weights set from each source's loss every N steps, killed and resumed exactly.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/online_mixing.py

Three sources of regression data, each harder to fit than the last. Every --every steps the ranks
all-reduce each source's recent loss and call ``loader.set_weights`` with weights that favour the
sources the model fits worst (the same weights on every rank). Each change is a phase from the next
global batch on, kept in the loader's state with its weights; the mixer's running losses go in the same
checkpoint. Stop it anywhere (--stop-after-step N) and run the same command again: it continues with
exactly the samples, and the weight changes, of an uninterrupted run. --record FILE appends what each
rank trained on and the weights it read them under.
"""

import argparse
import json
import math
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", default="checkpoints/online_mixing.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--every", type=int, default=10, help="steps between weight changes")
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
SOURCES = 3


def source(s, rows):
    """Rows of source s: (id, source, x, y), y a linear function of x plus noise that grows with s."""
    x = torch.randn(rows, 8)
    y = x @ torch.linspace(-1, 1, 8).roll(s).unsqueeze(1) + (s + 1) * 0.3 * torch.randn(rows, 1)
    return torch.utils.data.TensorDataset(torch.arange(rows) + 1000 * s, torch.full((rows,), s), x, y)


mixture = shufflepoint.Mixture([source(s, 300) for s in range(SOURCES)], samples_per_epoch=640,
                               schedule=[(0, [1.0] * SOURCES)])
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
# the default deal ("spans"): a change applies from the next global batch, each source's passes kept whole
loader = shufflepoint.DataLoader(mixture, batch_size=8, seed=1234, num_workers=2)
running = torch.ones(SOURCES)  # each source's recent loss: the mixer's state, checkpointed with the rest
weights = [1.0] * SOURCES
if os.path.exists(args.checkpoint):
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])  # brings back every weight change made so far
    running, weights = checkpoint["running"], checkpoint["weights"]
while loader.epoch < args.epochs:
    for ids, sources, x, y in loader:
        losses = torch.nn.functional.mse_loss(model(x), y, reduction="none").squeeze(1)
        optimizer.zero_grad(), losses.mean().backward(), optimizer.step()
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"step": loader.step, "ids": ids.tolist(), "weights": weights}) + "\n")
        sums = torch.zeros(2, SOURCES).index_add_(1, sources, torch.stack([losses.detach(), torch.ones_like(losses)]))
        dist.all_reduce(sums)  # every rank sees every source's loss: the weights are the same everywhere
        seen = sums[1] > 0
        running[seen] = 0.8 * running[seen] + 0.2 * sums[0][seen] / sums[1][seen]
        if loader.step % args.every == 0:  # favour what the model fits worst, never starving a source
            weights = [round(math.exp(float(loss)), 6) + 0.1 for loss in running]
            loader.set_weights(weights)
        if dist.get_rank() == 0:  # every step: a kill resumes at the step it stopped after
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "running": running, "weights": weights}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        if args.stop_after_step is not None and loader.step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
dist.barrier()
dist.destroy_process_group()

"""Exact mid-epoch resume with stock Accelerate: one added line, shufflepoint.patch_accelerate().

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/accelerate_patched.py

Trains a tiny model for 3 epochs and checkpoints with Accelerator.save_state every 5 steps. Stop
it at any point (Ctrl-C, SIGKILL, --stop-after-step N) and run the same command again: it loads
the newest checkpoint and continues with exactly the samples, in exactly the order, that the
uninterrupted run would have used, on every rank. --record FILE appends the sample ids each rank
trained on (one JSON line per step), which is how tests/distributed/test_accelerate_resume.py checks it.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch.utils.data import DataLoader, TensorDataset

import shufflepoint

shufflepoint.patch_accelerate()  # the one added line: before accelerator.prepare(...)


class Progress:
    """The step counter, checkpointed with the rest via accelerator.register_for_checkpointing."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", default="checkpoints/accelerate_patched")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
    parser.add_argument("--record", default=None, help="append the sample ids of every step here")
    args = parser.parse_args()

    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(),  # on CPU, Accelerate runs multi-process only when told
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    torch.manual_seed(1234)
    features = torch.randn(64, 8)
    dataset = TensorDataset(torch.arange(64), features, features.sum(dim=1, keepdim=True))
    loader = DataLoader(dataset, batch_size=4, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    latest = os.path.join(args.checkpoint_dir, "latest")
    if os.path.isdir(latest):
        accelerator.load_state(latest)  # model, optimizer, RNG and the loader: epoch, order, position
        accelerator.print(f"resumed at step {progress.step}, epoch {loader.iteration}")

    while loader.iteration < args.epochs:  # the loader knows its epoch, also after a resume
        for ids, inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            step = progress.step
            if args.record:
                with open(f"{args.record}.rank{accelerator.process_index}", "a") as f:
                    f.write(json.dumps({"step": step, "ids": ids.tolist()}) + "\n")
            if step % args.checkpoint_every == 0:
                accelerator.save_state(latest)
            if args.stop_after_step is not None and step == args.stop_after_step:
                accelerator.print(f"stopping after step {step} (simulated preemption)")
                accelerator.wait_for_everyone()
                accelerator.end_training()  # close the process group on every rank before exiting
                return
    accelerator.print(f"done: {progress.step} steps, final loss {loss.item():.4f}")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()

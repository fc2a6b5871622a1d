"""shufflepoint.DataLoader inside Accelerate: exact mid-epoch resume with save_state / load_state.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/accelerate_native.py

Trains a tiny model for 3 epochs on 70 samples (not a multiple of 2 processes x batch 4, so the
last step of each epoch is a padded tail) and checkpoints with Accelerator.save_state every 5
steps; after each epoch it evaluates with gather_for_metrics, which counts every eval sample once.
Stop it at any point (Ctrl-C, SIGKILL, --stop-after-step N) and run the same command again: it
loads the newest checkpoint and continues with exactly the samples, in exactly the order, that the
uninterrupted run would have used, on every rank. --record FILE appends what each rank trained on
(one JSON line per step), which is how tests/distributed/test_accelerate_native_resume.py checks it.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from accelerate import Accelerator
from torch.utils.data import TensorDataset

import shufflepoint

shufflepoint.patch_accelerate()  # before accelerator.prepare(...): keeps shufflepoint's sharding


class Progress:
    """The step counter, checkpointed with the rest via accelerator.register_for_checkpointing."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def make_dataset(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(n, 8, generator=generator)
    return TensorDataset(torch.arange(n), features, features.sum(dim=1, keepdim=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", default="checkpoints/accelerate_native")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
    parser.add_argument("--record", default=None, help="append the sample ids of every step here")
    args = parser.parse_args()

    # Accelerator first: it starts the process group the loaders shard over.
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    torch.manual_seed(1234)
    # Each rank reads its own shard; seed= fixes the order of every epoch; no sampler, no set_epoch.
    loader = shufflepoint.DataLoader(make_dataset(70, seed=0), batch_size=4, seed=1234, num_workers=2)
    eval_loader = shufflepoint.DataLoader(make_dataset(30, seed=1), batch_size=8, shuffle=False)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader, eval_loader = accelerator.prepare(model, optimizer, loader, eval_loader)

    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    latest = os.path.join(args.checkpoint_dir, "latest")
    if os.path.isdir(latest):
        accelerator.load_state(latest)  # model, optimizer, RNG and the loaders: epoch and position
        accelerator.print(f"resumed at step {progress.step}, epoch {loader.epoch}")

    for epoch in range(loader.epoch, args.epochs):  # loader.epoch: 0, or the epoch resumed in
        model.train()
        for ids, inputs, targets in loader:  # continues the epoch where the checkpoint left it
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            step = progress.step
            if args.record:
                with open(f"{args.record}.rank{accelerator.process_index}", "a") as f:
                    f.write(json.dumps({"step": step, "epoch": epoch, "ids": ids.tolist(),
                                        "loss": loss.item()}) + "\n")
            if step % args.checkpoint_every == 0:
                accelerator.save_state(latest)
            if args.stop_after_step is not None and step == args.stop_after_step:
                accelerator.print(f"stopping after step {step} (simulated preemption)")
                accelerator.wait_for_everyone()
                accelerator.end_training()  # close the process group on every rank before exiting
                return

        model.eval()
        squared_errors = []
        with torch.no_grad():
            for _, inputs, targets in eval_loader:
                errors = (model(inputs) - targets).pow(2).squeeze(1)
                squared_errors.append(accelerator.gather_for_metrics(errors))  # padding trimmed
        errors = torch.cat(squared_errors)
        accelerator.print(f"epoch {epoch}: eval mse {errors.mean().item():.4f} over {errors.numel()} samples")
    accelerator.print(f"done: {progress.step} steps")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()

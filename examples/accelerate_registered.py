"""Accelerate without prepare() for the data: register the shufflepoint.DataLoader for checkpointing.

    accelerate launch --cpu --num_processes 2 examples/accelerate_registered.py
    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/accelerate_registered.py

Stop it anywhere (--stop-after-step N simulates a preemption right after a checkpoint) and run the
same command again: ``accelerator.load_state`` puts the loader back at the next batch, and every
rank continues with exactly the batches an uninterrupted run would have used. --record FILE
appends what each rank trained on.

The loader is not passed to ``accelerator.prepare``: it shards over the ranks itself, and nothing
is patched. ``register_for_checkpointing`` saves its ``state_dict()`` from rank 0 only and loads
that file on every rank; the state is the same on every rank, so that is exact. (To let Accelerate
prepare the loader too, see examples/accelerate_native.py.)
"""

import argparse
import json
import os

import torch
from accelerate import Accelerator

import shufflepoint


class Progress:
    """The step counter, checkpointed with the rest via accelerator.register_for_checkpointing."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", default="checkpoints/accelerate_registered")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
    parser.add_argument("--record", default=None, help="append the sample ids of every step here")
    args = parser.parse_args()

    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # starts the process group
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(args.samples, 8, generator=generator)
    dataset = torch.utils.data.TensorDataset(torch.arange(args.samples), features, features.sum(1, keepdim=True))
    torch.manual_seed(1234)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    progress = Progress()

    # --- the README's Accelerate snippet starts here ---
    loader = shufflepoint.DataLoader(dataset, batch_size=4, seed=1234)  # built after Accelerator(); not prepared
    accelerator.register_for_checkpointing(loader, progress)
    latest = os.path.join(args.checkpoint_dir, "latest")
    if os.path.isdir(latest):
        accelerator.load_state(latest)  # model, optimizer, RNG, and the loader's epoch and position
    while loader.epoch < args.epochs:
        for ids, x, y in loader:  # continues the epoch where the checkpoint left it
            x, y = x.to(accelerator.device), y.to(accelerator.device)
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step(), optimizer.zero_grad()
            progress.step += 1
            if progress.step % args.checkpoint_every == 0:
                accelerator.save_state(latest)
    # --- the README's Accelerate snippet ends here ---
            if args.record:
                with open(f"{args.record}.rank{accelerator.process_index}", "a") as f:
                    f.write(json.dumps({"step": progress.step, "epoch": loader.epoch, "ids": ids.tolist(),
                                        "loss": loss.item()}) + "\n")
            if args.stop_after_step is not None and progress.step == args.stop_after_step:
                accelerator.wait_for_everyone()
                accelerator.print(f"stopping after step {progress.step} (simulated preemption)")
                accelerator.end_training()  # close the process group on every rank before exiting
                return
    accelerator.print(f"done: {progress.step} steps")
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()

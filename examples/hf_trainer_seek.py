"""Hugging Face Trainer style resume: "epoch e, k batches done" becomes a seek, not a replay.

    python examples/hf_trainer_seek.py --world-size 2 --resume-at-step 17

The Trainer (and Accelerate's checkpointing example) stores only ``global_step`` and resumes with

    epochs_trained = global_step // batches_per_epoch
    steps_trained_in_current_epoch = global_step % batches_per_epoch
    sampler.set_epoch(epochs_trained)
    loader = skip_first_batches(loader, steps_trained_in_current_epoch)   # replays k batches

``skip_first_batches`` draws and drops k batches of indices: O(k), every rank, at every resume.
On a shufflepoint.DataLoader the same two numbers are a position, so ``loader.seek`` moves there
with ``loader.seek`` in O(1) (the same cost at step 10 as at step 10 million), and the next batch on every rank is the
one an uninterrupted run would have read. (With gradient accumulation, pass batches, not
optimizer steps: k = steps_trained_in_current_epoch * gradient_accumulation_steps.)

This script simulates the ranks in one process (``rank=`` / ``world_size=``): it runs an
uninterrupted pass, then fresh loaders seeked from ``global_step`` alone, and checks every rank
continues exactly; then it times a seek into a dataset of 2**40 samples.
"""

import argparse
import time

import torch

import shufflepoint


# --- the README's seek snippet starts here ---
def resume_from_global_step(loader: shufflepoint.DataLoader, global_step: int) -> shufflepoint.DataLoader:
    """The Trainer's arithmetic, then a seek instead of ``set_epoch`` + ``skip_first_batches``."""
    epochs_trained, batches_done = divmod(global_step, len(loader))  # len(loader): batches per epoch
    loader.seek(epochs_trained, batches_done)  # O(1): no sample is read, nothing is replayed
    return loader
# --- the README's seek snippet ends here ---


class Samples(torch.utils.data.Dataset):
    """The sample id as the sample: any length, no memory."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def make_loader(n: int, rank: int, world_size: int, batch_size: int = 4, drop_last: bool = False):
    return shufflepoint.DataLoader(Samples(n), batch_size=batch_size, seed=1234, drop_last=drop_last,
                                   rank=rank, world_size=world_size)


def uninterrupted(n: int, rank: int, world_size: int, epochs: int, **kwargs) -> list[list[int]]:
    loader, batches = make_loader(n, rank, world_size, **kwargs), []
    while loader.epoch < epochs:
        batches.extend(batch.tolist() for batch in loader)
    return batches


def resumed(n: int, rank: int, world_size: int, epochs: int, global_step: int, **kwargs) -> list[list[int]]:
    loader, batches = resume_from_global_step(make_loader(n, rank, world_size, **kwargs), global_step), []
    while loader.epoch < epochs:
        batches.extend(batch.tolist() for batch in loader)
    return batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--resume-at-step", type=int, default=17)
    args = parser.parse_args()
    for rank in range(args.world_size):
        whole = uninterrupted(args.samples, rank, args.world_size, args.epochs)
        after = resumed(args.samples, rank, args.world_size, args.epochs, args.resume_at_step)
        verdict = "EXACT" if after == whole[args.resume_at_step:] else "DIVERGED"
        print(f"rank {rank}: resumed at step {args.resume_at_step} of {len(whole)}: {verdict}")
    huge = make_loader(2**40, rank=1, world_size=2)
    for global_step in (10, 10_000_000):
        start = time.perf_counter()
        first = next(iter(resume_from_global_step(huge, global_step)))
        print(f"seek to step {global_step:>10} of a 2**40-sample dataset and read a batch: "
              f"{(time.perf_counter() - start) * 1e3:.1f} ms, batch {first.tolist()}")


if __name__ == "__main__":
    main()

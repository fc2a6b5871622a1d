"""Resume cost of the Hugging Face Trainer's data: stock (skip) against shufflepoint's Trainer (seek).

    python benchmarks/hf_trainer_resume.py [--samples 10000000] [--fraction 0.5] [--batch 8] [--repeats 3]

Both sides run the Trainer's own resume path on its own train loader, in one process, and time
from the resume to the first batch in hand:

- stock ``transformers.Trainer``: ``get_train_dataloader()`` (a RandomSampler loader through
  ``accelerator.prepare``), then what ``_run_epoch`` does for epoch 1 resumed ``k`` batches in:
  ``get_resumed_dataloader(loader, k)`` (accelerate's ``skip_first_batches``), ``set_epoch(1)``,
  ``next(iter(...))``. The skip reads no sample (index-only) but steps the batch sampler k times
  over a fresh ``randperm(n)``.
- ``shufflepoint.integrations.transformers.Trainer``: the loader state of a checkpoint written at
  the same point is read back (``_place_data``: ``load_state_dict``, the placement, global_step),
  then ``get_resumed_dataloader``, ``set_epoch(1)``, ``next(iter(...))``.

k = fraction x batches per epoch. The dataset returns a 4-token sample for any index; its reads
are counted, to show what each side loads to get one batch. Needs transformers >= 5.25 (the hook).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import transformers

from shufflepoint.integrations.transformers import LOADER_STATE_FILE, Trainer


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        self.reads += 1
        ids = torch.tensor([index, index + 1, index + 2, index + 3]) % 128
        return {"input_ids": ids, "labels": ids}


def _parts(n: int, batch: int, output_dir: str) -> dict[str, object]:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4)
    args = transformers.TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch, report_to=[],
                                          use_cpu=True, seed=1234, disable_tqdm=True)
    return {"model": transformers.LlamaForCausalLM(config), "args": args, "train_dataset": Tokens(n)}


def stock(n: int, batch: int, fraction: float, output_dir: str) -> tuple[float, int]:
    trainer = transformers.Trainer(**_parts(n, batch, output_dir))
    loader = trainer.get_train_dataloader()
    skip = int(fraction * len(loader))
    dataset = trainer.train_dataset
    dataset.reads = 0
    start = time.perf_counter()
    resumed = trainer.get_resumed_dataloader(loader, skip)
    resumed.set_epoch(1)
    next(iter(resumed))
    return time.perf_counter() - start, dataset.reads


def ours(n: int, batch: int, fraction: float, output_dir: str) -> tuple[float, int]:
    trainer = Trainer(**_parts(n, batch, output_dir))
    loader = trainer.get_train_dataloader()
    skip = int(fraction * len(loader))
    loader.seek(1, skip)  # the state a checkpoint at epoch 1, k batches in, holds
    folder = os.path.join(output_dir, "checkpoint-x")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOADER_STATE_FILE), "w") as f:
        json.dump(loader.state_dict(), f)
    fresh = trainer.get_train_dataloader()  # a new process would start from here
    trainer.state.global_step = len(fresh) + skip
    trainer._shufflepoint_checkpoint = folder
    dataset = trainer.train_dataset
    dataset.reads = 0
    start = time.perf_counter()
    trainer._place_data()
    resumed = trainer.get_resumed_dataloader(fresh, skip)
    resumed.set_epoch(1)
    next(iter(resumed))
    return time.perf_counter() - start, dataset.reads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; n = {args.samples:,}, batch "
          f"{args.batch}, resumed {args.fraction:.0%} into epoch 1 ({int(args.fraction * args.samples) // args.batch:,}"
          f" batches), 1 process, {args.repeats} repeats")
    print(f"  {'resume path':<44} {'median s':>10} {'min s':>10} {'samples read':>14}")
    for name, run in (("stock Trainer (skip_first_batches)", stock), ("shufflepoint Trainer (seek)", ours)):
        times, reads = [], 0
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as output_dir:
                seconds, reads = run(args.samples, args.batch, args.fraction, output_dir)
            times.append(seconds)
        print(f"  {name:<44} {statistics.median(times):>10.4f} {min(times):>10.4f} {reads:>14,}")


if __name__ == "__main__":
    main()

"""Hugging Face ``datasets`` streaming's adapter: ``load_dataset("parquet", streaming=True)``,
``.shuffle(buffer_size=block)``, ``split_dataset_by_node``; run in .venv-bench-hf.

Its resume is not exact, by design: ``state_dict()`` records where each shard iterator stands,
not the shuffle buffer, so a resumed run refills the buffer from later rows and yields other
samples than the uninterrupted run would. What is measured is what it does: the time from
``load_state_dict`` to the first batch, which includes refilling the buffer.

The state at a cursor is synthetic: a real state after a few samples with every shard position
moved to the shard at that fraction of this rank's shards (row 0 of it). Its nested layout (parallel
shard iterators, rebatching) does not let a row-exact cursor be written by hand.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from typing import Any

import numpy as np
from _harness import main


def prepare(args: Any) -> None:
    import datasets  # noqa: F401
    import torch  # noqa: F401


def dataset_for(args: Any) -> Any:
    import datasets
    from datasets.distributed import split_dataset_by_node

    folder = args.data.rstrip("/")
    options: dict[str, Any] = {}
    if args.endpoint:
        files: Any = folder + "/*.parquet"
        options = {"storage_options": {"key": "testing", "secret": "testing",
                                       "client_kwargs": {"endpoint_url": args.endpoint, "region_name": "us-east-1"}}}
    else:
        files = sorted(glob.glob(folder + "/*.parquet"))
    dataset = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True, **options)
    dataset = dataset.shuffle(seed=args.seed, buffer_size=args.block)
    if args.world > 1:
        dataset = split_dataset_by_node(dataset, rank=args.rank, world_size=args.world)
    return dataset


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    import torch

    dataset = dataset_for(args)
    start = time.perf_counter()
    if state is not None:
        dataset.load_state_dict(state)
    seconds = time.perf_counter() - start
    return torch.utils.data.DataLoader(dataset, batch_size=args.batch, num_workers=args.workers), seconds


def _moved(state: Any, shard: int) -> Any:
    if isinstance(state, dict):
        moved = {key: _moved(value, shard) for key, value in state.items()}
        if "shard_idx" in moved:
            moved["shard_idx"], moved["shard_example_idx"] = shard, 0
        return moved
    if isinstance(state, list):
        return [_moved(value, shard) for value in state]
    return state


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    dataset = dataset_for(args)
    samples = iter(dataset)
    for _ in range(8):
        next(samples)
    shards = dataset.n_shards
    return _moved(dataset.state_dict(), int(shards * cursor / max(1, args.samples // args.world)))


def choices(args: Any) -> dict[str, str]:
    """What this adapter sets (beside the figures in shards.md); everything else is HF's default."""
    return {
        "dataset": f"`datasets.load_dataset('parquet', data_files=..., streaming=True).shuffle(seed, "
                   f"buffer_size={args.block:,})`; `split_dataset_by_node` for rank 0 of 2",
        "item loader / layout": "Parquet: tokens as a binary column (65 uint16 per row), row groups of 1,000, "
                                "uncompressed; text: `id`, `text` columns, row groups of 100",
        "shuffle": f"shard order, then a {args.block:,}-sample buffer (filled before the first batch; one per worker)",
        "batch, workers": f"`torch.utils.data.DataLoader(batch_size={args.batch}, num_workers=W)` (HF splits the "
                          "shards between workers)",
        "cache": "none: local files read by Arrow; S3 streamed through s3fs",
        "decode path": "Arrow record batches to one Python dict per row, torch's default collate (a list of bytes); "
                       "the harness turns the bytes into ids per row, in the main process",
    }


def ids(batch: Any) -> np.ndarray:
    if "id" in batch:
        return batch["id"].numpy()
    windows = np.stack([np.frombuffer(row, dtype="<u2") for row in batch["tokens"]]).astype(np.int64)
    return (windows[:, 1] << 16) | windows[:, 2]


def convert(args: Any) -> None:
    raise SystemExit("the Parquet copy is written by corpus.py (pyarrow): nothing to convert here")


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_OFFLINE", "0")
    main(sys.modules[__name__])

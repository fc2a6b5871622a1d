"""shufflepoint's adapter: ``shufflepoint.DataLoader(shufflepoint.Shards(...))``, run in the dev venv (.venv).

The state at a cursor is a real one: ``loader.seek(0, batches)`` then ``state_dict()`` (O(1), no
sample read). A resumed first batch is checked against the uninterrupted run's batch at that
position, taken from the same loader over an index-only view of the corpus (same length, same
shard rows, so the same ``blocks`` order): sample ids are global row indices in this corpus.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch
from _harness import decode_ids, main

import shufflepoint


def storage_options(endpoint: str) -> dict[str, Any] | None:
    if not endpoint:
        return None
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


def corpus(args: Any) -> shufflepoint.Shards:
    pattern = args.data.rstrip("/") + ("/*.bin" if args.workload == "tokens" else "/*.parquet")
    options = {"seq_len": args.seq_len} if args.workload == "tokens" else {"columns": ["id", "text"]}
    return shufflepoint.Shards(pattern, **options, storage_options=storage_options(args.endpoint),
                               cache_dir=args.cache or None, cache_limit=args.cache_bytes if args.endpoint else None,
                               progress=False)


def loader_for(dataset: Any, args: Any) -> shufflepoint.DataLoader:
    return shufflepoint.DataLoader(dataset, batch_size=args.batch, seed=args.seed, num_workers=args.workers,
                                   rank=args.rank, world_size=args.world, shuffle_block=args.block,
                                   persistent_workers=False)


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    loader = loader_for(corpus(args), args)
    start = time.perf_counter()
    if state is not None:
        loader.load_state_dict(json.loads(json.dumps(state)), verify_ranks=False)  # as read from a checkpoint
    return loader, time.perf_counter() - start


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    loader = loader_for(corpus(args), args)
    loader.seek(0, cursor // args.batch)
    return loader.state_dict()


def choices(args: Any) -> dict[str, str]:
    """What this adapter sets (beside the figures in shards.md); everything else is shufflepoint's default."""
    return {
        "dataset": "`shufflepoint.Shards('*.bin', seq_len=64)`; text: `Shards('*.parquet', columns=['id', 'text'])`",
        "item loader / layout": "the raw `.bin` token shards and the Parquet files as they are (no conversion)",
        "shuffle": f"`blocks` order, `shuffle_block={args.block:,}`, `seed`",
        "batch, workers": f"`shufflepoint.DataLoader(batch_size={args.batch}, num_workers=W, "
                          "persistent_workers=False)`",
        "cache": f"local: memory-maps / reads the files in place; S3: `cache_dir`, `cache_limit` "
                 f"{args.cache_bytes / 2**20:,.0f} MiB",
        "decode path": "the DataLoader's default for `Shards` (no `collate_fn` given): `Shards.columnar()`, "
                       "a batch read at once (`__getitems__`), `shufflepoint.collate` builds tensors from columns",
    }


def ids(batch: Any) -> np.ndarray:
    if isinstance(batch, dict):
        return batch["id"].numpy()
    return decode_ids(batch)


class IndexView(torch.utils.data.Dataset):
    """The corpus' length and shard rows, item i = i: the order without reading a sample."""

    def __init__(self, shards: shufflepoint.Shards) -> None:
        self.shard_rows, self._n = shards.shard_rows, len(shards)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> int:
        return index


def check_resume(args: Any, cursor: int, first: np.ndarray) -> dict[str, Any]:
    """The uninterrupted run (index-only) at batch ``cursor // batch``: equal to the resumed first batch?"""
    plain = argparse_copy(args, workers=0)
    uninterrupted = iter(loader_for(IndexView(corpus(plain)), plain))
    for _ in range(cursor // args.batch):
        next(uninterrupted)
    expected = next(uninterrupted).numpy()
    return {"exact": bool(np.array_equal(expected, first)), "checked": "first batch vs uninterrupted run"}


def argparse_copy(args: Any, **changes: Any) -> Any:
    copy = type(args)(**vars(args))
    for key, value in changes.items():
        setattr(copy, key, value)
    return copy


def convert(args: Any) -> None:
    raise SystemExit("shufflepoint reads the .bin token shards as they are: nothing to convert")


if __name__ == "__main__":
    main(__import__(__name__))

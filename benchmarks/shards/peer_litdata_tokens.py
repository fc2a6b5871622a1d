"""LitData 0.2.x with its ``TokensLoader`` layout, the one its docs show for LLM pre-training; run in
.venv-bench-litdata.

As the docs show it: ``optimize(fn -> token ids, chunk_size=<tokens per chunk>, item_loader=TokensLoader())``
writes the tokens as one flat array per chunk (no per-item header), and
``StreamingDataset(dir, item_loader=TokensLoader(block_size=seq_len + 1), shuffle=True)`` reads
``block_size`` tokens per item from a memory map. The writer records only the loader's class, so
``block_size`` is given where the docs give it: at read time.

TokensLoader cuts a chunk into non-overlapping blocks, whereas the benchmark's windows share one
token (nanoGPT's cut). So each source shard's windows are written one after another (its 10,000
windows x 65 tokens, one chunk per shard): block i of the copy is window i of the corpus, and every
item still names its sample id (positions 1-2). Distribution, workers, S3 and the resume state are
peer_litdata.py's.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
from _harness import main
from peer_litdata import ids, loaded, moved_state, prepare, storage

__all__ = ["choices", "convert", "ids", "make", "prepare", "state_at"]


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    import litdata

    item_loader = litdata.TokensLoader(block_size=args.seq_len + 1)
    dataset = litdata.StreamingDataset(args.data, item_loader=item_loader, shuffle=True, seed=args.seed,
                                       drop_last=False, **storage(args))
    return loaded(dataset, args, state)


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    return moved_state(make, args, cursor)


def choices(args: Any) -> dict[str, str]:
    return {
        "dataset": f"`litdata.StreamingDataset(dir, item_loader=TokensLoader(block_size={args.seq_len + 1}), "
                   "shuffle=True, seed, drop_last=False)`",
        "item loader / layout": "`TokensLoader`: `optimize(fn -> a shard's windows as one uint16 array, "
                                "chunk_size=<its tokens>, item_loader=TokensLoader())`, one chunk per source shard",
        "shuffle": "chunk order, then blocks within a worker's chunks (LitData's defaults)",
        "batch, workers": f"`StreamingDataLoader(batch_size={args.batch}, num_workers=W)`",
        "cache": f"local: the chunk folder read in place; S3: `cache_dir`, `max_cache_size` "
                 f"{args.cache_bytes / 2**20:,.0f} MiB",
        "decode path": "one `np.frombuffer(...).copy()` of a block from the chunk's memory map per item; "
                       "torch's default collate of numpy windows",
    }


def _shard_windows(path: str) -> Any:
    spec = json.loads(open(os.path.join(os.path.dirname(path), "corpus.json")).read())
    tokens = np.fromfile(path, dtype="<u2")
    width = spec["seq_len"] + 1
    windows = np.lib.stride_tricks.sliding_window_view(tokens, width)[::spec["seq_len"]]
    yield np.ascontiguousarray(windows).reshape(-1)  # block i = window i


def convert(args: Any) -> None:
    """The .bin token shards as TokensLoader chunks, one source shard's windows (back to back) per chunk."""
    import litdata

    spec = json.loads(open(os.path.join(args.source, "corpus.json")).read())
    inputs = [os.path.abspath(os.path.join(args.source, f"part-{s:05d}.bin")) for s in range(spec["shards"])]
    tmp = os.path.abspath(args.data.rstrip("/") + f".tmp-{os.getpid()}")
    litdata.optimize(fn=_shard_windows, inputs=inputs, output_dir=tmp, chunk_size=spec["rows"] * (spec["seq_len"] + 1),
                     item_loader=litdata.TokensLoader(), num_workers=2, mode="overwrite", start_method="fork")
    os.rename(tmp, args.data)


if __name__ == "__main__":
    main(sys.modules[__name__])

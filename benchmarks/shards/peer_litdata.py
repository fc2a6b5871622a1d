"""LitData 0.2.x's adapter: ``StreamingDataset`` over its optimized chunks, ``StreamingDataLoader``;
run in .venv-bench-litdata.

Rank 0 of W is simulated by ``_DistributedEnv.detect`` answering (W, rank 0, W nodes): LitData
splits the chunks by these numbers alone (no collective is called without a process group).

On the S3 server: its obstore client gets ``allow_http`` (the test server speaks plain http; LitData
offers no option for it, and without it every GET fails with ``BadScheme``).

The state at a cursor is synthetic: the loader's own state after one real batch, with its counters
(``num_samples_yielded``, the dataset's ``sample_in_epoch``) moved to the cursor.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np
from _harness import decode_ids, main


def import_litdata(rank: int, world: int, nodes: int | None = None) -> Any:
    """litdata, seeing rank ``rank`` of ``world`` on ``nodes`` nodes (default: one rank a node)."""
    import litdata
    from litdata.utilities import env

    nodes = world if nodes is None else nodes
    env._DistributedEnv.detect = classmethod(lambda cls: cls(world, rank, nodes))  # type: ignore[method-assign]
    from litdata.streaming import downloader

    # Its obstore (Rust) S3 client refuses a plain-http endpoint ("BadScheme") and exposes no option.
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}
    return litdata


def prepare(args: Any) -> None:
    import_litdata(args.rank, args.world)


def storage(args: Any) -> dict[str, Any]:
    """Where the chunks are: read in place on local disk; on the S3 server, a cache folder with a budget."""
    if not args.endpoint:
        return {}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    return {"storage_options": {"endpoint_url": args.endpoint}, "cache_dir": args.cache,
            "max_cache_size": args.cache_bytes}


def loaded(dataset: Any, args: Any, state: dict[str, Any] | None) -> tuple[Any, float]:
    """``StreamingDataLoader`` over ``dataset``, with ``state`` loaded (timed)."""
    import litdata

    loader = litdata.StreamingDataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
    start = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    return loader, time.perf_counter() - start


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    import litdata

    dataset = litdata.StreamingDataset(args.data, shuffle=True, seed=args.seed, drop_last=False, **storage(args))
    return loaded(dataset, args, state)


def moved_state(make: Any, args: Any, cursor: int) -> dict[str, Any]:
    """The loader's own state after one batch, with its counters moved to ``cursor``."""
    loader, _ = make(args)
    batches = iter(loader)
    next(batches)
    state = json.loads(json.dumps(loader.state_dict(), default=str))
    state["num_samples_yielded"] = cursor
    state["dataset"]["num_samples_yielded"] = cursor
    state["dataset"]["sample_in_epoch"] = cursor * args.world
    return state


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    return moved_state(make, args, cursor)


def choices(args: Any) -> dict[str, str]:
    """What this adapter sets (beside the figures in shards.md); everything else is LitData's default."""
    return {
        "dataset": "`litdata.StreamingDataset(dir, shuffle=True, seed, drop_last=False)`",
        "item loader / layout": "`PyTreeLoader` (the default): `optimize(fn -> one numpy window per item)`, "
                                "one chunk per source shard (`chunk_size` = its windows)",
        "shuffle": "chunk order, then items within a worker's chunks (LitData's defaults: `item_shuffle_window` 256)",
        "batch, workers": f"`StreamingDataLoader(batch_size={args.batch}, num_workers=W)`",
        "cache": f"local: the chunk folder read in place; S3: `cache_dir`, `max_cache_size` "
                 f"{args.cache_bytes / 2**20:,.0f} MiB",
        "decode path": "per item from the chunk, `batch_decode='auto'` (aligned 256-item decode windows); "
                       "torch's default collate of numpy windows",
    }


def ids(batch: Any) -> np.ndarray:
    return decode_ids(batch)


def _windows(path: str) -> Any:
    spec = json.loads(open(os.path.join(os.path.dirname(path), "corpus.json")).read())
    tokens = np.fromfile(path, dtype="<u2")
    for row in np.lib.stride_tricks.sliding_window_view(tokens, spec["seq_len"] + 1)[::spec["seq_len"]]:
        yield np.ascontiguousarray(row)


def convert(args: Any) -> None:
    """The .bin token shards as LitData chunks, one source shard's windows per chunk."""
    import litdata

    spec = json.loads(open(os.path.join(args.source, "corpus.json")).read())
    inputs = [os.path.abspath(os.path.join(args.source, f"part-{s:05d}.bin")) for s in range(spec["shards"])]
    tmp = os.path.abspath(args.data.rstrip("/") + f".tmp-{os.getpid()}")
    litdata.optimize(fn=_windows, inputs=inputs, output_dir=tmp, chunk_size=spec["rows"], num_workers=2,
                     mode="overwrite", start_method="fork")
    os.rename(tmp, args.data)


if __name__ == "__main__":
    main(sys.modules[__name__])

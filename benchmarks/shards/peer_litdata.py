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


def import_litdata(rank: int, world: int) -> Any:
    import litdata
    from litdata.utilities import env

    env._DistributedEnv.detect = classmethod(lambda cls: cls(world, rank, world))  # type: ignore[method-assign]
    from litdata.streaming import downloader

    # Its obstore (Rust) S3 client refuses a plain-http endpoint ("BadScheme") and exposes no option.
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}
    return litdata


def prepare(args: Any) -> None:
    import_litdata(args.rank, args.world)


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    import litdata

    options: dict[str, Any] = {}
    if args.endpoint:
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        options = {"storage_options": {"endpoint_url": args.endpoint}, "cache_dir": args.cache,
                   "max_cache_size": args.cache_bytes}
    dataset = litdata.StreamingDataset(args.data, shuffle=True, seed=args.seed, drop_last=False, **options)
    loader = litdata.StreamingDataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
    start = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    return loader, time.perf_counter() - start


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    loader, _ = make(args)
    batches = iter(loader)
    next(batches)
    state = json.loads(json.dumps(loader.state_dict(), default=str))
    state["num_samples_yielded"] = cursor
    state["dataset"]["num_samples_yielded"] = cursor
    state["dataset"]["sample_in_epoch"] = cursor * args.world
    return state


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

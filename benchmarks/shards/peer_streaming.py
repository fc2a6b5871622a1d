"""MosaicML Streaming 0.13.0's adapter: ``StreamingDataset`` over MDS, ``StreamingDataLoader``;
run in .venv-bench-streaming.

Two stand-ins, both outside the code path measured:
- ``import streaming`` imports ``streaming.vision``, which imports torchvision; no torchvision wheel
  imports beside the local CPU torch (``operator torchvision::nms does not exist``), and pip would
  replace torch with a CUDA build to satisfy it. The two names it imports are stubbed; the vision
  datasets are never used here.
- rank 0 of W is simulated as one rank per node (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE=1), and
  ``maybe_init_dist`` (which would open a process group and wait for the other ranks) is skipped.
  Streaming partitions by these numbers alone, so rank 0 reads what it would read beside W - 1 others.

The state at a cursor is synthetic: Streaming's own state dict (epoch, sample_in_epoch,
num_canonical_nodes, shuffle_seed, initial_physical_nodes), with ``sample_in_epoch`` the global
count (cursor x W), as ``StreamingDataLoader.state_dict()`` would write it after that many samples.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import time
import types
from typing import Any

import numpy as np
from _harness import decode_ids, main, parser


def _stub(name: str, **attributes: Any) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attributes)
    sys.modules[name] = module


class _VisionDataset:
    pass


def _never(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("torchvision is a stub in this benchmark venv")


def stub_torchvision() -> None:
    """The two torchvision names ``import streaming`` needs (see the module docstring)."""
    _stub("torchvision")
    _stub("torchvision.datasets", VisionDataset=_VisionDataset)
    _stub("torchvision.transforms")
    _stub("torchvision.transforms.functional", to_tensor=_never)


def import_streaming(rank: int, world: int) -> Any:
    stub_torchvision()
    import streaming
    import streaming.base.dataset as dataset_module

    streaming.base.util.clean_stale_shared_memory()  # as one process: it too would open a process group
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    dataset_module.maybe_init_dist = lambda: False
    return streaming


def prepare(args: Any) -> None:
    import_streaming(args.rank, args.world)


def make(args: Any, state: dict[str, Any] | None = None) -> tuple[Any, float]:
    import streaming

    if args.endpoint:
        os.environ.update(S3_ENDPOINT_URL=args.endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION="us-east-1")
        where = {"remote": args.data, "local": args.cache, "cache_limit": args.cache_bytes}
    else:
        where = {"local": args.data}
    dataset = streaming.StreamingDataset(**where, shuffle=True, shuffle_algo="py1e", shuffle_seed=args.seed,
                                         shuffle_block_size=args.block, batch_size=args.batch)
    loader = streaming.StreamingDataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
    start = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    return loader, time.perf_counter() - start


def state_at(args: Any, cursor: int) -> dict[str, Any]:
    return {"epoch": 0, "sample_in_epoch": cursor * args.world, "num_canonical_nodes": args.world,
            "shuffle_seed": args.seed, "initial_physical_nodes": args.world}


def choices(args: Any) -> dict[str, str]:
    """What this adapter sets (beside the figures in shards.md); everything else is Streaming's default."""
    return {
        "dataset": f"`streaming.StreamingDataset(local=..., shuffle=True, shuffle_algo='py1e', shuffle_seed, "
                   f"shuffle_block_size={args.block:,}, batch_size={args.batch})` (the FAQ: pass the batch size)",
        "item loader / layout": "MDS written by `MDSWriter`, one column `ndarray:uint16:65`, one shard per source "
                                "shard, uncompressed",
        "shuffle": f"py1e, `shuffle_block_size` {args.block:,}, canonical nodes = physical nodes",
        "batch, workers": f"`StreamingDataLoader(batch_size={args.batch}, num_workers=W)`",
        "cache": f"local: `local=` the MDS folder, read in place; S3: `remote=`, `local=` a cache folder, "
                 f"`cache_limit` {args.cache_bytes / 2**20:,.0f} MiB; `predownload` default (8 x batch)",
        "decode path": "per sample: open/seek/read of the shard file, `NDArray` decode of the column; torch's "
                       "default collate",
    }


def ids(batch: Any) -> np.ndarray:
    return decode_ids(batch["tokens"])


def convert(args: Any) -> None:
    """The .bin token shards as MDS (one ndarray column), with shards of about the same size."""
    streaming = import_streaming(0, 1)
    sys.path.insert(0, os.path.dirname(__file__))
    import json

    spec = json.loads(open(os.path.join(args.source, "corpus.json")).read())
    width = spec["seq_len"] + 1
    tmp = args.data.rstrip("/") + f".tmp-{os.getpid()}"
    size_limit = spec["rows"] * (2 * width + 4) + 1024  # one source shard's windows plus the offsets
    with streaming.MDSWriter(out=tmp, columns={"tokens": f"ndarray:uint16:{width}"}, size_limit=size_limit) as out:
        for shard in range(spec["shards"]):
            tokens = np.fromfile(os.path.join(args.source, f"part-{shard:05d}.bin"), dtype="<u2")
            for row in np.lib.stride_tricks.sliding_window_view(tokens, width)[::spec["seq_len"]]:
                out.write({"tokens": row})
    os.rename(tmp, args.data)


if __name__ == "__main__":
    assert parser  # the shared options
    main(sys.modules[__name__])

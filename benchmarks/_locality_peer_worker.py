"""One rank of a simulated node reading a peer's mixture in ``make bench-locality MIXTURES=1`` (issue 33).

Runs in the peer's venv (``.venv-bench-streaming`` or ``.venv-bench-litdata``, ``make bench-shards``'), under
torchrun like ours (benchmarks/_locality_worker.py): one agent per node, its own cache folder and its own S3
access key (``AWS_ACCESS_KEY_ID`` = the node, so the proxy counts each node's GET bytes). Gloo is only for the
phases (benchmarks/_phase.py); the peers partition by the environment torchrun sets.

- Streaming 0.13: ``StreamingDataset(streams=[Stream(remote, local, proportion), ...])``. Two stand-ins, both
  outside the measured path: the torchvision stubs of peer_streaming.py, and Streaming's shared-memory names
  tagged with the node (two simulated nodes share one /dev/shm here; on two machines they would not collide).
- LitData 0.2.76: ``CombinedStreamingDataset([StreamingDataset(url), ...], weights, iterate_over_all=False)``.
  Stand-ins: the node count as a GPU cluster would detect it (world // ranks a node; on CPU LitData assumes one
  node), and obstore's ``allow_http`` (peer_litdata.py: the test server speaks plain http). A node's ranks build
  their datasets one after the other: LitData waits 1 s for the lock of the node's ``index.json`` download, and
  on this loaded machine the second rank gave up ("ValueError: The provided dataset ... doesn't contain any
  index.json file"); the bytes are the same (one index download per node either way).

``convert`` (no torchrun): write a list of .bin token shards as the peer's own format, one shard or chunk per
source shard. Each rank writes the sample ids it read per epoch to ``<marks>/ids-<rank>-<epoch>.npy``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "shards"))


def streaming_module() -> Any:
    from peer_streaming import stub_torchvision

    stub_torchvision()
    import streaming
    import streaming.base.dataset as dataset_module
    import streaming.base.shared.prefix as prefix_module

    node = os.environ.get("SP_NODE", "")

    def tagged(prefix_int: int, name: str) -> str:  # one /dev/shm namespace per simulated node
        return f"{node}{prefix_int:06}_{name}"

    prefix_module._get_path = dataset_module._get_path = tagged
    return streaming


def litdata_module(cpu_count: bool = False) -> Any:
    """litdata seeing the nodes a GPU cluster would (world // ranks a node), or with ``cpu_count`` the one node
    its own detection counts without CUDA."""
    from peer_litdata import import_litdata

    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    return import_litdata(rank, world, nodes=1 if cpu_count else world // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def streaming_loader(spec: dict[str, Any], cache: str) -> Any:
    streaming = streaming_module()
    os.environ.update(S3_ENDPOINT_URL=spec["endpoint"])
    streams = [streaming.Stream(remote=url, local=os.path.join(cache, name), proportion=weight)
               for name, url, weight in zip(("web", "books"), spec["urls"], spec["weights"], strict=True)]
    dataset = streaming.StreamingDataset(streams=streams, shuffle=True, shuffle_seed=spec["seed"],
                                         batch_size=spec["batch_size"])
    return streaming.StreamingDataLoader(dataset, batch_size=spec["batch_size"], num_workers=0)


def litdata_loader(spec: dict[str, Any], cache: str) -> Any:
    litdata = litdata_module(spec.get("cpu_count", False))
    sources = [litdata.StreamingDataset(url, shuffle=True, seed=spec["seed"], cache_dir=os.path.join(cache, name),
                                        storage_options={"endpoint_url": spec["endpoint"]})
               for name, url in zip(("web", "books"), spec["urls"], strict=True)]
    combined = litdata.CombinedStreamingDataset(sources, seed=spec["seed"], weights=spec["weights"],
                                                iterate_over_all=False)
    return litdata.StreamingDataLoader(combined, batch_size=spec["batch_size"], num_workers=0)


def ids(batch: Any) -> np.ndarray:
    """Sample ids of a batch of token windows (benchmarks/shards/_harness.py)."""
    from _harness import decode_ids

    return decode_ids(batch["tokens"] if isinstance(batch, dict) else batch)


def run(spec: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from _phase import phase

    os.environ.update(AWS_ACCESS_KEY_ID=os.environ["SP_NODE"], AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if spec["peer"] == "streaming":  # it calls barriers of its own while it builds
        loader = streaming_loader(spec, os.environ["SP_CACHE"])
    else:  # a node's ranks one after the other (see the module docstring)
        for turn in range(int(os.environ["LOCAL_WORLD_SIZE"])):
            if turn == int(os.environ["LOCAL_RANK"]):
                loader = litdata_loader(spec, os.environ["SP_CACHE"])
            dist.barrier()
    if spec.get("state_in"):
        loader.load_state_dict(torch.load(spec["state_in"], weights_only=False))
    phase(spec["marks"], "indexed")
    for epoch in spec["epochs"]:
        read, stop = [], spec.get("stop_after")
        for batch in loader:
            read.append(ids(batch))
            if stop is not None and sum(map(len, read)) >= stop:
                break
        np.save(os.path.join(spec["marks"], f"ids-{rank}-{epoch}.npy"), np.concatenate(read) if read else [])
        if stop is not None:
            if rank == 0:
                torch.save(loader.state_dict(), spec["state_out"])
            phase(spec["marks"], f"stopped-{epoch}")
            break
        phase(spec["marks"], f"epoch-{epoch}")
    dist.destroy_process_group()


def convert(peer: str, out: str, inputs: list[str], seq_len: int, rows: int) -> None:
    """``inputs`` (.bin token shards) as MDS or LitData chunks in ``out``: one per source shard, uncompressed."""
    width = seq_len + 1
    tmp = out.rstrip("/") + f".tmp-{os.getpid()}"
    if peer == "streaming":
        streaming = streaming_module()
        limit = rows * (2 * width + 4) + 1024  # one source shard's windows plus the offsets
        with streaming.MDSWriter(out=tmp, columns={"tokens": f"ndarray:uint16:{width}"}, size_limit=limit) as mds:
            for path in inputs:
                for row in windows(path, seq_len):
                    mds.write({"tokens": row})
    else:
        import functools

        litdata = litdata_module()
        litdata.optimize(fn=functools.partial(windows, seq_len=seq_len), inputs=inputs, output_dir=tmp,
                         chunk_size=rows, num_workers=1, mode="overwrite", start_method="fork")
    os.rename(tmp, out)


def windows(path: str, seq_len: int) -> Any:
    tokens = np.fromfile(path, dtype="<u2")
    for row in np.lib.stride_tricks.sliding_window_view(tokens, seq_len + 1)[::seq_len]:
        yield np.ascontiguousarray(row)


if __name__ == "__main__":
    if sys.argv[1] == "convert":
        options = json.loads(sys.argv[2])
        convert(options["peer"], options["out"], options["inputs"], options["seq_len"], options["rows"])
    else:
        run(json.loads(sys.argv[1]))

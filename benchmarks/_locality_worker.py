"""One rank of a simulated node in ``make bench-locality`` (benchmarks/locality.py starts it through
torchrun, one agent per node, each with its own cache folder and its own S3 credentials, so the
counting proxy can tell the nodes apart).

Between phases (index built, each epoch read, a stop) every rank waits while the orchestrator reads the
proxy's byte counters (benchmarks/_phase.py).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from _phase import phase as wait_phase  # benchmarks/_phase.py (the script's folder is on the path)

import shufflepoint

SPEC = json.loads(sys.argv[1])
dist.init_process_group("gloo")
RANK = dist.get_rank()


def phase(name: str) -> None:
    """Every rank done with ``name``; the orchestrator snapshots the counters; then everyone goes on."""
    wait_phase(SPEC["marks"], name)


options = dict(SPEC["storage_options"], key=os.environ["SP_NODE"])  # the proxy counts by access key


def shards(url: str) -> shufflepoint.Shards:
    if url.endswith(".parquet"):  # documents with input_ids, for Packed
        return shufflepoint.Shards(url, storage_options=options, cache_dir=os.environ["SP_CACHE"], progress=False,
                                   retries=8)
    return shufflepoint.Shards(url, seq_len=SPEC["seq_len"], dtype="uint16", storage_options=options,
                               cache_dir=os.environ["SP_CACHE"], progress=False, retries=8)


def pipeline():
    """The dataset a scenario reads (issue 33): token windows, Packed documents, or a Mixture of either, with
    weights = rows (each source once an epoch) or a schedule (3:1, then 1:3 from the first epoch's middle)."""
    kind = SPEC.get("pipeline", "shards")
    urls = SPEC.get("urls") or [SPEC["url"]]
    sources = [shards(url) for url in urls]
    if SPEC.get("packed"):
        sources = [shufflepoint.Packed(source, SPEC["packed"]) for source in sources]
    if kind == "shards":
        return sources[0]
    rows = [len(source) for source in sources]
    if kind == "scheduled":
        return shufflepoint.Mixture(sources, schedule=[(0, [3, 1]), (sum(rows) // 2 * SPEC.get("packed", 1), [1, 3])])
    return shufflepoint.Mixture(list(zip(sources, rows, strict=True)))


corpus = pipeline()
phase("indexed")
loader = shufflepoint.DataLoader(corpus, SPEC["batch_size"], seed=SPEC["seed"], deal=SPEC["deal"],
                                 shuffle_block=SPEC["shuffle_block"], collate_fn=lambda batch: len(batch))
if SPEC.get("state_in"):
    loader.load_state_dict(torch.load(SPEC["state_in"]))
started = time.perf_counter()
samples = 0
for epoch in SPEC["epochs"]:
    stop = SPEC.get("stop_after")
    batches = len(loader) * stop if stop is not None else None
    for step, batch in enumerate(loader):
        samples += int(batch)
        if batches is not None and step + 1 >= batches:
            break
    if batches is not None:
        if RANK == 0:
            torch.save(loader.state_dict(), SPEC["state_out"])
        phase(f"stopped-{epoch}")
        break
    phase(f"epoch-{epoch}")
if RANK == 0:
    with open(os.path.join(SPEC["marks"], "done.json"), "w") as f:
        json.dump({"samples_rank0": samples, "seconds": time.perf_counter() - started}, f)
dist.destroy_process_group()

"""One rank of a simulated node in ``tests/distributed/test_mixture_bytes.py``: a ``Mixture`` of two ``Shards``
sources in the local S3 server, read under the default deal (``spans``) for two epochs. Each node has its own
cache folder and its own S3 access key (the test's proxy counts GET bytes per key); between phases rank 0
writes ``<marks>/<phase>`` and waits for ``<marks>/<phase>.go`` so the test reads the counters in between.
Rank 0 writes the samples every rank read to ``<marks>/read.json``."""

from __future__ import annotations

import json
import os
import sys
import time

import torch.distributed as dist

import shufflepoint

SPEC = json.loads(sys.argv[1])
dist.init_process_group("gloo")
RANK = dist.get_rank()


def phase(name: str) -> None:
    dist.barrier()
    if RANK == 0:
        open(os.path.join(SPEC["marks"], name), "w").close()
        while not os.path.exists(os.path.join(SPEC["marks"], name + ".go")):
            time.sleep(0.02)
    dist.barrier()


options = dict(SPEC["storage_options"], key=os.environ["SP_NODE"])  # the proxy counts by access key
sources = [shufflepoint.Shards(url, seq_len=SPEC["seq_len"], dtype="uint16", storage_options=options,
                               cache_dir=os.environ["SP_CACHE"], progress=False, retries=8) for url in SPEC["urls"]]
rows = [len(source) for source in sources]
if SPEC["scheduled"]:  # 3:1, then 1:3 from the epoch's middle: each source about its rows per epoch
    half = sum(rows) // 2
    mixture = shufflepoint.Mixture(sources, schedule=[(0, [3, 1]), (half, [1, 3])])
else:
    mixture = shufflepoint.Mixture(list(zip(sources, rows, strict=True)))
loader = shufflepoint.DataLoader(mixture, SPEC["batch_size"], seed=3, shuffle_block=SPEC["shuffle_block"],
                                 collate_fn=lambda batch: [int(row[0]) for row in batch])
phase("indexed")
read = []
for epoch in (0, 1):
    loader.set_epoch(epoch)
    real = loader.real_samples_left(RANK)  # the epoch's last step pads a shorter stretch: not counted
    read.append([i for batch in loader for i in batch][:real])
    phase(f"epoch-{epoch}")
found = [None] * dist.get_world_size()
dist.all_gather_object(found, read)
if RANK == 0:
    with open(os.path.join(SPEC["marks"], "read.json"), "w") as f:
        json.dump({"deal": loader.deal, "read": found}, f)
dist.destroy_process_group()

"""Small sharded corpora for the tests: every row is ``{"id": int}``, unique, so exactly-once is
checked by ids, never by counts."""

from __future__ import annotations

import gzip
import json
import os
import random


def jsonl_corpus(folder: str, shards: int, *, first_id: int = 0, rows: tuple[int, int] = (1, 4),
                 seed: int = 0, gz_every: int = 0) -> list[int]:
    """``shards`` JSONL files ``part-00000.jsonl`` ... with 1-4 rows each (every ``gz_every``-th
    one gzipped); returns the ids, in file order."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    ids: list[int] = []
    for shard in range(shards):
        count = rng.randint(*rows)
        lines = "".join(json.dumps({"id": first_id + len(ids) + r}) + "\n" for r in range(count))
        ids.extend(range(first_id + len(ids), first_id + len(ids) + count))
        if gz_every and shard % gz_every == gz_every - 1:
            with gzip.open(os.path.join(folder, f"part-{shard:05d}.jsonl.gz"), "wt") as f:
                f.write(lines)
        else:
            with open(os.path.join(folder, f"part-{shard:05d}.jsonl"), "w") as f:
                f.write(lines)
    return ids


def parquet_corpus(folder: str, shards: int, *, first_id: int = 0, rows: tuple[int, int] = (1, 6),
                   seed: int = 1) -> list[int]:
    """``shards`` Parquet files of an ``id`` and a ``text`` column, two row groups each when they can."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    ids: list[int] = []
    for shard in range(shards):
        count = rng.randint(*rows)
        block = list(range(first_id + len(ids), first_id + len(ids) + count))
        ids.extend(block)
        table = pa.table({"id": block, "text": [f"row {i}" for i in block]})
        pq.write_table(table, os.path.join(folder, f"part-{shard:05d}.parquet"), row_group_size=max(1, count // 2))
    return ids

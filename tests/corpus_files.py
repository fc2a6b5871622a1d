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


def jsonl_documents(folder: str, shards: int, *, rows: tuple[int, int] = (1, 4), seed: int = 0) -> list[int]:
    """``shards`` JSONL files of tokenized documents ``{"id": d, "input_ids": [d*1000, ...]}`` of 0-40
    tokens (one in ten of 100-150), so every token of the corpus is unique; returns all the tokens."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    tokens: list[int] = []
    document = 0
    for shard in range(shards):
        lines = []
        for _ in range(rng.randint(*rows)):
            size = rng.randint(100, 150) if rng.random() < 0.1 else rng.randint(0, 40)
            ids = list(range(document * 1000, document * 1000 + size))
            lines.append(json.dumps({"id": document, "input_ids": ids}) + "\n")
            tokens.extend(ids)
            document += 1
        with open(os.path.join(folder, f"part-{shard:05d}.jsonl"), "w") as f:
            f.write("".join(lines))
    return tokens


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


def token_corpus(folder: str, shards: int, *, seq_len: int, rows: tuple[int, int] = (2, 6), seed: int = 0) -> list[int]:
    """``shards`` uint16 token files ``part-00000.bin`` ... of 2-6 windows each; a window's first
    token is its id (each shard is a run of consecutive tokens). Returns the ids, in file order."""
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    rng = random.Random(seed)
    ids: list[int] = []
    token = 0
    for shard in range(shards):
        count = rng.randint(*rows)
        tokens = np.arange(token, token + count * seq_len + 1, dtype=np.uint16)
        tokens.tofile(os.path.join(folder, f"part-{shard:05d}.bin"))
        ids.extend(range(token, token + count * seq_len, seq_len))
        token += count * seq_len + 1
    assert token < 2**16, "ids must fit uint16"
    return ids

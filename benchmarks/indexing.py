"""GET bytes per node before the first batch, fresh caches, 8 simulated nodes (issue 18 point 7).

The tests' S3 server (moto behind the tests' byte-counting proxy, tests/s3_server.py) holds four
corpora of the same shard count; for each, 8 "nodes" in sequence, each with a fresh cache folder,
build ``Shards`` (the index) and take the first batch of ``shufflepoint.DataLoader(rank=r,
world_size=8)``. The proxy counts the body bytes of every GET, so each node's figure is what it
downloaded: the index, then the first batch (``prefetch=0``: read-ahead beyond the first batch is
not counted). Corpora:

- ``parquet``: row counts from the footers (ranged reads);
- ``tokens``: raw ``.bin`` ids, rows from the object sizes;
- ``jsonl+published``: JSONL, after one ``shufflepoint index`` run published its index (that run's
  own download is reported once, apart);
- ``jsonl``: JSONL with no published index: every node scans every shard (the old behaviour, and a
  warning now).

Shards of ~100 bytes a row: 128 x 4,000 rows (~0.4 MB each; ``--quick``: 64 x 1,000). A Parquet
footer is ~2 KB here, whatever the shard's size, so its share of the corpus shrinks with bigger
shards. Targets: indexing <= 1% of the corpus for Parquet and tokens; <= 1.05x a node's share (corpus / 8)
before the first batch for the scanned format once its index is published.

    python benchmarks/indexing.py [--quick] [--out benchmarks/results/indexing]    (make bench-indexing)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "shards"))
import _s3  # noqa: E402  (the counting proxy in front of the tests' S3 server)

import shufflepoint  # noqa: E402
from shufflepoint._tools.cli import main as cli  # noqa: E402

NODES = 8


def make_corpora(root: Path, shards: int, rows: int) -> dict[str, Path]:
    """The same row count per shard in each format, ~100 bytes a row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    folders = {name: root / name for name in ("parquet", "tokens", "jsonl")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    for shard in range(shards):
        ids = list(range(shard * rows, (shard + 1) * rows))
        text = ["".join(rng.choice("abcdefghijklmnop ") for _ in range(90)) for _ in ids]
        pq.write_table(pa.table({"id": ids, "text": text}), folders["parquet"] / f"part-{shard:05d}.parquet",
                       row_group_size=max(1, rows // 4))
        np.random.default_rng(shard).integers(0, 50_000, rows * 48 + 1, dtype=np.uint16).tofile(
            folders["tokens"] / f"part-{shard:05d}.bin")
        with open(folders["jsonl"] / f"part-{shard:05d}.jsonl", "w") as f:
            f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, text, strict=True))
    return folders


def listing_bytes(url: str, options: dict[str, Any], counts: Any) -> int:
    """What listing the bucket prefix costs alone (part of any index build)."""
    from shufflepoint._shards.storage.storage import Storage

    counts.reset()
    Storage(options).expand(url)
    return counts.total()


def node(url: str, kwargs: dict[str, Any], rank: int, options: dict[str, Any], cache: str,
         counts: Any) -> dict[str, Any]:
    """One fresh node: the bytes its index cost, then its first batch."""
    counts.reset()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus = shufflepoint.Shards(url, storage_options=options, cache_dir=cache, progress=False, prefetch=0,
                                     **kwargs)
    index_bytes, index_gets, index_s = counts.total(), sum(counts.gets().values()), time.perf_counter() - started
    loader = shufflepoint.DataLoader(corpus, batch_size=32, seed=7, rank=rank, world_size=NODES,
                                     shuffle_block=max(1, len(corpus) // (4 * NODES)),
                                     collate_fn=lambda batch: batch)
    next(iter(loader))
    return {"index_bytes": index_bytes, "index_gets": index_gets, "index_s": round(index_s, 3),
            "first_batch_bytes": counts.total() - index_bytes, "before_first_batch": counts.total(),
            "warned": [str(w.message)[:80] for w in caught if "indexing downloads" in str(w.message)]}


def run(shards: int, rows: int) -> dict[str, Any]:
    server = _s3.start()
    results: dict[str, Any] = {"nodes": NODES, "shards": shards, "rows_per_shard": rows, "corpora": {}}
    try:
        with tempfile.TemporaryDirectory() as work:
            folders = make_corpora(Path(work) / "data", shards, rows)
            options = server.storage_options
            cases = {"parquet": ("parquet", "*.parquet", {}), "tokens": ("tokens", "*.bin", {"seq_len": 47}),
                     "jsonl+published": ("jsonl", "*.jsonl", {}), "jsonl": ("jsonl", "*.jsonl", {})}
            for case, (folder, pattern, kwargs) in cases.items():
                prefix, total = _s3.upload(server, folders[folder], case.replace("+", "-"))
                url = f"{prefix}/{pattern}"
                entry: dict[str, Any] = {"corpus_bytes": total, "share_bytes": total / NODES,
                                         "listing_bytes": listing_bytes(url, options, server.counts)}
                if case == "jsonl+published":
                    server.counts.reset()
                    assert cli(["index", url, "--storage-options", json.dumps(options), "--cache-dir",
                                f"{work}/publisher", "--json", os.devnull]) == 0
                    entry["publish_once_bytes"] = server.counts.total()
                entry["per_node"] = [node(url, kwargs, rank, options, f"{work}/{case}-node{rank}", server.counts)
                                     for rank in range(NODES)]
                results["corpora"][case] = entry
                print(summary_line(case, entry), flush=True)
    finally:
        server.stop()
    return results


def summary_line(case: str, entry: dict[str, Any]) -> str:
    index = max(n["index_bytes"] for n in entry["per_node"])
    before = max(n["before_first_batch"] for n in entry["per_node"])
    return (f"{case:17s} corpus {entry['corpus_bytes'] / 1e6:7.2f} MB | index per node (max) {index / 1e3:9.1f} KB = "
            f"{index / entry['corpus_bytes']:7.2%} of the corpus | before the first batch (max) "
            f"{before / entry['share_bytes']:5.2f}x a node's share")


def write_report(results: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [f"# Indexing: GET bytes per node before the first batch ({results['nodes']} fresh nodes, "
             f"{results['shards']} shards x {results['rows_per_shard']} rows)", "",
             "Written by `benchmarks/indexing.py`. Bytes are GET bodies counted by the S3 proxy; max over the nodes.",
             "The index column includes the bucket listing (a listing alone is given beside it).",
             "", "| corpus | corpus MB | listing | index per node | of the corpus | first batch | before the first "
             "batch, x a node's share | warned |", "|---|---|---|---|---|---|---|---|"]
    for case, entry in results["corpora"].items():
        nodes = entry["per_node"]
        index = max(n["index_bytes"] for n in nodes)
        first = max(n["first_batch_bytes"] for n in nodes)
        before = max(n["before_first_batch"] for n in nodes)
        lines.append(f"| {case} | {entry['corpus_bytes'] / 1e6:.2f} | {entry['listing_bytes'] / 1e3:,.1f} KB | "
                     f"{index / 1e3:,.1f} KB | "
                     f"{index / entry['corpus_bytes']:.3%} | {first / 1e3:,.1f} KB | "
                     f"{before / entry['share_bytes']:.3f} | {'yes' if any(n['warned'] for n in nodes) else 'no'} |")
        if "publish_once_bytes" in entry:
            lines.append(f"|  (the one `shufflepoint index` run) | | | {entry['publish_once_bytes'] / 1e3:,.1f} KB | "
                         f"{entry['publish_once_bytes'] / entry['corpus_bytes']:.1%} | | | |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 shards of 1,000 rows instead of 128 of 4,000")
    parser.add_argument("--out", default="benchmarks/results/indexing")
    args = parser.parse_args()
    results = run(shards=64, rows=1000) if args.quick else run(shards=128, rows=4000)
    write_report(results, Path(args.out))


if __name__ == "__main__":
    main()

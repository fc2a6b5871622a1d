"""Packed rows (issue 21, point 7): rows/s against fixed windows of the same tokens, the index, a
resume's time to its first batch, and both against Megatron-Core and Grain at 1e9 tokens.
``make bench-packing`` (~40 s here; ``--quick``: a tenth, and 1e8 tokens for the scale part).
Writes ``benchmarks/results/packing.md`` and ``.json`` (``packing_quick`` with ``--quick``).

- The corpus: documents of 1-2,000 tokens (lognormal, median ~300), random ids < 50,257, in 20
  Parquet shards (an ``input_ids`` list<int32> column); the same tokens, end to end, in 10 uint16
  ``.bin`` shards for the fixed windows.
- Rows/s: ``shufflepoint.DataLoader(Packed(Shards(parquet), SEQ_LEN), batch_size=8)`` against
  ``shufflepoint.DataLoader(Shards(bin, seq_len=SEQ_LEN), batch_size=8)``, ``num_workers=0``, one
  epoch each, each Packed run right after a windows run (ratio per pair). The first pair is the
  Packed corpus's first read on this node: it decodes the Parquet row groups and keeps the decoded
  ids in the cache folder (``_shards/storage/kept_ids``); the next ``--repeats`` pairs are later epochs,
  which map the kept ids instead (the median is the headline). Both are reported.
  Target: >= 0.8x (issues 28.4, 35.1).
- Index: the bytes ``Packed`` holds per corpus (two int64 per document), the time to count the
  tokens (one read of the corpus).
- Resume: a fresh loader over a copy of the ``Packed`` without its per-epoch tables (what a new
  process has, once the tokens are counted) loads a state taken mid-epoch and takes its first
  batch: the seek, the epoch's O(blocks) table and one block of documents.
- At 1e9 tokens (``packing_scale.py``): measured for shufflepoint on documents whose token ids are
  views of one buffer (so 1e9 tokens cost no 8 GB); Megatron-Core's indices computed from their
  array widths; Grain's restore measured in its own venv (``packing_grain.py``) at 1e7 tokens and
  extrapolated; torchtitan's computed from its code.
torch runs on one thread, as in a DataLoader worker: on a shared 2-core machine its intra-op threads
made one (8, 1025) index take 4.6 ms and the windows 4x slower, a ratio that flattered Packed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from packing_scale import scale_report

import shufflepoint

SEQ_LEN, BATCH = 1024, 8
BLOCK = 4096  # shuffle_block: documents for Packed, windows for the .bin shards


def make_corpus(root: Path, tokens: int) -> tuple[str, str, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(5.7, 1.0, size=tokens // 200), 1, 2000).astype(np.int64)
    lengths = lengths[np.cumsum(lengths) <= tokens]
    stream = rng.integers(0, 50_257, size=int(lengths.sum()), dtype=np.uint16)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    documents = [stream[starts[d]:starts[d + 1]].astype(np.int32) for d in range(lengths.size)]
    (root / "docs").mkdir()
    (root / "bin").mkdir()
    for shard, part in enumerate(np.array_split(np.arange(lengths.size), 20)):
        column = pa.array([documents[d] for d in part.tolist()], type=pa.list_(pa.int32()))
        pq.write_table(pa.table({"input_ids": column}), root / "docs" / f"part-{shard:03d}.parquet")
    for shard, part in enumerate(np.array_split(stream, 10)):
        part.tofile(root / "bin" / f"tok-{shard:03d}.bin")
    return str(root / "docs" / "*.parquet"), str(root / "bin" / "*.bin"), int(lengths.size)


def epoch_rate(loader: shufflepoint.DataLoader) -> float:
    start, rows = time.perf_counter(), 0
    for batch in loader:
        rows += int(batch["input_ids"].shape[0]) if isinstance(batch, dict) else int(batch.shape[0])
    return rows / (time.perf_counter() - start)


def paired_rates(packed: shufflepoint.Packed, windows: shufflepoint.Shards,
                 repeats: int) -> tuple[tuple[float, float], tuple[list[float], list[float], list[float]]]:
    """(first epoch's Packed and windows rows/s), then ``repeats`` later pairs (Packed, windows, ratio)."""
    def rate(dataset: object) -> float:
        return epoch_rate(shufflepoint.DataLoader(dataset, BATCH, seed=1, shuffle_block=BLOCK))

    first_window = rate(windows)
    first = (rate(packed), first_window)
    packed_rates, window_rates = [], []
    for _ in range(repeats):
        window_rates.append(rate(windows))
        packed_rates.append(rate(packed))
    return first, (packed_rates, window_rates, [p / w for p, w in zip(packed_rates, window_rates, strict=True)])


def resume_first_batch(packed: shufflepoint.Packed, state: dict) -> float:
    """load_state_dict to first batch on a copy of ``packed`` without cached tables (as a new process)."""
    packed = copy.copy(packed)  # pickling state: the per-epoch tables are dropped
    start = time.perf_counter()
    fresh = shufflepoint.DataLoader(packed, BATCH, seed=1, shuffle_block=BLOCK)
    fresh.load_state_dict(state)
    next(iter(fresh))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the corpus")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shuffle-block", type=int, default=BLOCK)
    parser.add_argument("--grain-python", default=".venv-grain/bin/python",
                        help="a python with grain installed (make bench-packing builds .venv-grain)")
    parser.add_argument("--out", default=None, help="results path without suffix (default benchmarks/results/packing)")
    parser.add_argument("--skip-scale", action="store_true",
                        help="rows/s, index and resume only (no 1e9-token part, no Grain)")
    args = parser.parse_args()
    globals()["BLOCK"] = args.shuffle_block
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    tokens = 2_000_000 if args.quick else 20_000_000
    with tempfile.TemporaryDirectory() as folder:
        docs, bins, documents = make_corpus(Path(folder), tokens)
        start = time.perf_counter()
        cache = str(Path(folder) / "cache")  # the kept ids of this corpus only, removed with it
        packed = shufflepoint.Packed(shufflepoint.Shards(docs, progress=False, cache_dir=cache), SEQ_LEN,
                                     progress=False)
        counted = time.perf_counter() - start
        windows = shufflepoint.Shards(bins, seq_len=SEQ_LEN, progress=False)
        (first_packed, first_window), (packed_rates, window_rates, ratios) = paired_rates(packed, windows,
                                                                                          args.repeats)
        loader = shufflepoint.DataLoader(packed, BATCH, seed=1, shuffle_block=BLOCK)
        loader.seek(0, len(loader) // 2)
        resume = statistics.median(resume_first_batch(packed, loader.state_dict()) for _ in range(args.repeats))
        counts = packed._counts  # per-shard totals, and the per-document counts of the shards read, kept
        index_bytes = counts.totals.nbytes + sum(c.nbytes for c in getattr(counts, "_kept", {}).values())
    rows = [
        ("corpus", f"{documents:,} documents, {packed.tokens_per_epoch:,} tokens, {len(packed):,} rows of {SEQ_LEN}"),
        ("first epoch: rows/s, Packed (decodes the Parquet, keeps the ids) / windows",
         f"{first_packed:,.0f} / {first_window:,.0f} = {first_packed / first_window:.2f}x"),
        ("later epochs: rows/s, Packed (Parquet documents, kept ids)", f"{statistics.median(packed_rates):,.0f}"),
        ("later epochs: rows/s, fixed windows (.bin)", f"{statistics.median(window_rates):,.0f}"),
        ("later epochs: Packed / windows (target >= 0.8x)", f"{statistics.median(ratios):.2f}x"),
        ("index held by Packed", f"{index_bytes:,} B ({index_bytes / documents:.0f} B/document)"),
        ("counting the tokens (one read)", f"{counted:.2f} s"),
        ("resume: load_state_dict to first batch, mid-epoch", f"{resume * 1000:.1f} ms"),
        ("later epochs: ratio per pair", ", ".join(f"{r:.2f}" for r in ratios)),
        ("load average (1 min) before / after", f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"),
    ]
    lines = [f"| packed, {sys.platform}, shuffle_block {BLOCK}, repeats {args.repeats}{', quick' if args.quick else ''}"
             " | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
    measured = {"documents": documents, "tokens": packed.tokens_per_epoch, "seq_len": SEQ_LEN,
                "shuffle_block": BLOCK,
                "first_epoch": {"packed_rows_per_s": first_packed, "window_rows_per_s": first_window},
                "packed_rows_per_s": packed_rates, "window_rows_per_s": window_rates,
                "ratios": ratios, "index_bytes": index_bytes, "count_s": counted, "resume_s": resume}
    scale_lines, scale = ([], {}) if args.skip_scale else scale_report(
        args.quick, BLOCK, args.grain_python, parquet_tokens_per_s=packed.tokens_per_epoch / counted)
    text = "\n".join([*lines, "", *scale_lines])
    print(text)
    out = Path(args.out or f"benchmarks/results/packing{'_quick' if args.quick else ''}")
    out.with_suffix(".md").write_text("# Packed rows (issue 21.7)\n\nWritten by `benchmarks/packing.py`"
                                      f"{' --quick' if args.quick else ''} (`make bench-packing`).\n\n{text}\n")
    out.with_suffix(".json").write_text(json.dumps({"measured": measured, "at_scale": scale}, indent=1) + "\n")


if __name__ == "__main__":
    main()

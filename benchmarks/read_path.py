"""The read path of issue 19, measured against its targets in one run (``make bench-read``, ~1 min).

- Parquet rows (``{"id", "text"}``, ~1 KiB of text a row, 20 shards x 5,000 rows, row groups of
  1,000): ``shufflepoint.DataLoader(Shards(...), batch_size=256, num_workers=0)`` against pyarrow
  decoding the same files front to back into batches of 256 turned into the same Python values
  (an int64 tensor of ids, a list of str). Target: >= 0.5x (issue 19); >= 0.9x (issue 28.3).
- Token windows (uint16 ``.bin``, seq_len 64, 10 shards x 100,000 windows), batch 256,
  ``num_workers=0``. Target: >= 1M samples/s.
- Workers: token windows and Parquet rows at num_workers 0 and 2: time to the first batch (start-up,
  handing the dataset to each worker) and the rate after it (at most ``--samples``), timed apart.

- A decode budget smaller than a block (issue 28.2): the Parquet rows with the process's budget at
  8 MiB (``SHUFFLEPOINT_DECODED_BYTES=8388608``), with the default block (sized to the budget) and
  with 0.3's 65,536 rows; and wide rows (``{"id", "image"}``, 100 KiB of bytes a row, 20 shards x
  150 rows, row groups of 50) at the default settings. Target: >= 0.4x pyarrow's sequential decode.

Each figure is the median of ``--repeats`` runs; pyarrow runs right before each Parquet run and the
ratio is taken per pair (the machine's load changes between runs). Peak RSS is the process's own.
The loader uses its default ``shuffle_block`` (65,536): a block spans 13 of the 20 Parquet shards.
Prints a Markdown table. ``--quick`` uses a tenth of the corpus.
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

import shufflepoint

BATCH = 256
SEQ_LEN = 64
WIDE_BYTES = 100 << 10


def make_corpus(root: Path, scale: float) -> tuple[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    text_dir, token_dir = root / "text", root / "tokens"
    text_dir.mkdir(exist_ok=True)
    token_dir.mkdir(exist_ok=True)
    rows = max(1000, int(5000 * scale))
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", np.uint8)
    for shard in range(20):
        ids = np.arange(shard * rows, (shard + 1) * rows, dtype=np.int64)
        letters = alphabet[rng.integers(0, alphabet.size, size=(rows, 1000))]
        text = [bytes(line).decode() for line in letters]
        pq.write_table(pa.table({"id": ids, "text": text}), text_dir / f"part-{shard:03d}.parquet",
                       row_group_size=1000)
    windows = max(10_000, int(100_000 * scale))
    for shard in range(10):
        tokens = rng.integers(0, 50_257, size=windows * SEQ_LEN + 1, dtype=np.uint16)
        tokens.tofile(token_dir / f"tok-{shard:03d}.bin")
    return str(text_dir / "*.parquet"), str(token_dir / "*.bin")


def make_wide_corpus(root: Path, scale: float) -> str:
    """Wide rows, as Hugging Face image datasets store them: ``{"id", "image"}``, 100 KiB of bytes a
    row (random: incompressible, like JPEG), 20 shards x 150 rows, row groups of 50 (5 MiB)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wide_dir = root / "wide"
    wide_dir.mkdir(exist_ok=True)
    rows, rng = max(30, int(150 * scale)), np.random.default_rng(1)
    for shard in range(20):
        ids = np.arange(shard * rows, (shard + 1) * rows, dtype=np.int64)
        images = [rng.bytes(WIDE_BYTES) for _ in ids]
        pq.write_table(pa.table({"id": ids, "image": images}), wide_dir / f"wide-{shard:03d}.parquet",
                       row_group_size=50)
    return str(wide_dir / "*.parquet")


def pyarrow_sequential(pattern: str, column: str = "text") -> float:
    """Rows/s: each file front to back, batches of BATCH, as an id tensor and a list of str (bytes)."""
    import glob

    import pyarrow.parquet as pq

    rows = 0
    start = time.perf_counter()
    for path in sorted(glob.glob(pattern)):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH, columns=["id", column]):
            ids = torch.from_numpy(batch.column(0).to_numpy(zero_copy_only=False, writable=True))
            out = {"id": ids, column: batch.column(1).to_pylist()}
            rows += len(out[column])
    return rows / (time.perf_counter() - start)


def budget_rows(args: argparse.Namespace, text: str, wide: str, cache: str) -> None:
    """Issue 28.2: Parquet rows under a decode budget smaller than 0.3's block (8 MiB, as
    ``SHUFFLEPOINT_DECODED_BYTES=8388608`` sets it: ``GROUPS.set_limit`` is the same budget, set
    in-process), with the default block (sized to the budget) and with 0.3's 65,536 rows; and wide
    rows (100 KiB) at the default settings. Cold: a new corpus (nothing decoded) per run."""
    from shufflepoint._shards.readers._decoded import GROUPS

    cases = [("parquet rows, 8 MiB budget", text, "text", 8 << 20, {}, args.samples),
             ("parquet rows, 8 MiB budget, shuffle_block=65,536 (0.3's)", text, "text", 8 << 20,
              {"shuffle_block": 1 << 16}, 10_000),
             ("wide rows (100 KiB), default budget", wide, "image", GROUPS.limit, {}, args.samples)]
    saved = GROUPS.limit
    for label, pattern, column, limit, kwargs, samples in cases:
        runs = []
        for _ in range(args.repeats):
            arrow = pyarrow_sequential(pattern, column)
            GROUPS.set_limit(limit)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # 0.3's block warns that it re-decodes: measured here
                    dataset = shufflepoint.Shards(pattern, columns=["id", column], cache_dir=cache, progress=False)
                    first, rate = loader_rate(dataset, 0, min(len(dataset), samples), **kwargs)
            finally:
                GROUPS.set_limit(saved)
            runs.append((first, rate, arrow, rate / arrow))
        first, rate, arrow, ratio = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"| {label} | Shards, loader default | 0 | {first:.2f} | {rate:,.0f} | {arrow:,.0f} | {ratio:.2f}x |")
        sys.stdout.flush()


def loader_rate(dataset: Any, workers: int, limit: int, **kwargs: Any) -> tuple[float, float]:
    """(seconds to the first batch, samples/s after it) over at most ``limit`` samples."""
    loader = shufflepoint.DataLoader(dataset, batch_size=BATCH, seed=1, num_workers=workers, **kwargs)
    start = time.perf_counter()
    batches = iter(loader)
    next(batches)
    first = time.perf_counter() - start
    start, samples = time.perf_counter(), 0
    for batch in batches:
        samples += len(batch["id"]) if isinstance(batch, dict) else len(batch)
        if samples >= limit:
            break
    return first, samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--samples", type=int, default=300_000, help="timed after the first batch, at most")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    collate = getattr(shufflepoint, "collate", None)
    with tempfile.TemporaryDirectory() as tmp:
        with ProcessPoolExecutor(1) as pool:  # made elsewhere: this process's peak RSS is the reading's
            text, tokens = pool.submit(make_corpus, Path(tmp), scale).result()
            wide = pool.submit(make_wide_corpus, Path(tmp), scale).result()
        cache = os.path.join(tmp, "cache")
        def fresh_rows() -> Any:  # a new corpus per run: nothing decoded by an earlier run is reused
            return shufflepoint.Shards(text, columns=["id", "text"], cache_dir=cache, progress=False)

        def fresh_windows() -> Any:
            return shufflepoint.Shards(tokens, seq_len=SEQ_LEN, cache_dir=cache, progress=False)

        rows, windows = fresh_rows(), fresh_windows()
        print(f"# read path, {'quick' if args.quick else 'full'}: {len(rows)} Parquet rows, {len(windows)} "
              f"token windows, batch {BATCH}, median of {args.repeats}")
        print(f"# pickled dataset: Parquet {len(pickle.dumps(rows))} B, tokens {len(pickle.dumps(windows))} B")
        print("| workload | loader | workers | first batch (s) | samples/s | pyarrow sequential, same repeat | ratio |")
        print("|---|---|---:|---:|---:|---:|---:|")
        columnar = collate is not None and hasattr(rows, "columnar")
        for workers in [int(w) for w in args.workers.split(",")]:
            for label, make in (("parquet rows", fresh_rows), ("token windows", fresh_windows)):
                variants: list[tuple[str, bool, dict[str, Any]]] = [
                    ("Shards, loader default (columns since 0.3)", False, {})]
                if columnar:
                    variants.append(("Shards.columnar(), shufflepoint.collate", True, {"collate_fn": collate}))
                for name, as_columns, kwargs in variants:
                    runs = []
                    for _ in range(args.repeats):  # pyarrow right before each run: the same load
                        arrow = pyarrow_sequential(text) if label == "parquet rows" else float("nan")
                        dataset = make().columnar() if as_columns else make()
                        first, rate = loader_rate(dataset, workers, min(len(dataset), args.samples), **kwargs)
                        runs.append((first, rate, arrow, rate / arrow))
                    first, rate, arrow, ratio = (statistics.median(r[i] for r in runs) for i in range(4))
                    paired = f"{arrow:,.0f} | {ratio:.2f}x" if label == "parquet rows" else "| "
                    print(f"| {label} | {name} | {workers} | {first:.2f} | {rate:,.0f} | {paired} |")
                    sys.stdout.flush()
        budget_rows(args, text, wide, cache)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"# peak RSS of this process (the corpus was written by another): {peak:.0f} MiB")


if __name__ == "__main__":
    main()

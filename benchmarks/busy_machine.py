"""The loader beside busy processes (issue 28.5; ``make bench-busy``, ~3 min): does its rate fall by more than
its share of the CPU?

For each workload (token windows of seq_len 64 and 1,024 from raw ``.bin`` shards; Parquet rows of
~1 KiB text) and each number of busy processes (``--busy``, default 0, 2, 4: each a Python loop
that never sleeps), a fresh process reads ``--seconds`` of batches of 256 with ``num_workers=0``
and reports samples/s and the CPU time it got (``time.process_time``: every thread of the process,
torch's and pyarrow's pools included). A loader that wastes nothing on a busy machine keeps its
**samples per CPU-second**: its rate falls exactly with its share of the CPU. The ratio
``per CPU-second busy / quiet`` says how far it falls short (1.00: no more than its share). It also
runs each busy case with ``torch.set_num_threads(1)``: equal rates say torch's intra-op threads are
not in the hot path. Prints a Markdown table and the load average (the machine's other jobs count
as busy processes too: compare within one run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()


def make_corpora(root: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    (root / "tokens").mkdir(parents=True, exist_ok=True)
    for shard in range(4):
        rng.integers(0, 50_257, size=64 * 50_000 + 1, dtype=np.uint16).tofile(root / "tokens" / f"t-{shard}.bin")
    (root / "text").mkdir(exist_ok=True)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", np.uint8)
    for shard in range(6):
        ids = np.arange(shard * 5000, (shard + 1) * 5000)
        text = [bytes(line).decode() for line in alphabet[rng.integers(0, alphabet.size, size=(5000, 1000))]]
        pq.write_table(pa.table({"id": ids, "text": text}), root / "text" / f"p-{shard}.parquet", row_group_size=1000)
    tokens, text = str(root / "tokens" / "*.bin"), str(root / "text" / "*.parquet")
    return {"token windows, seq_len 64": (tokens, {"seq_len": 64}),
            "token windows, seq_len 1,024": (tokens, {"seq_len": 1024}),
            "Parquet rows, ~1 KiB text": (text, {"columns": ["id", "text"]})}


def child(args: argparse.Namespace) -> dict[str, float]:
    import torch

    import shufflepoint

    if args.one_thread:
        torch.set_num_threads(1)
    corpus = shufflepoint.Shards(args.data, cache_dir=args.cache, progress=False, **json.loads(args.options))
    loader = shufflepoint.DataLoader(corpus, batch_size=256, seed=1)
    batches = iter(loader)
    for _ in range(3):
        next(batches)  # shards opened, first groups decoded: the steady state is timed
    samples, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < args.seconds:
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        samples += len(batch["id"]) if isinstance(batch, dict) else len(batch)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"rate": samples / wall, "per_cpu": samples / cpu, "share": cpu / wall}


def measure(args: argparse.Namespace, data: str, options: dict[str, Any], busy: int, one_thread: bool) -> dict:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(0.5)
        command = [sys.executable, str(HERE), "--child", "--data", data, "--cache", args.cache,
                   "--options", json.dumps(options), "--seconds", str(args.seconds)]
        done = subprocess.run(command + (["--one-thread"] if one_thread else []), capture_output=True, text=True,
                              timeout=600, check=True)
        found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return found
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--data", default="")
    parser.add_argument("--cache", default="")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--one-thread", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--busy", default="0,2,4")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        args.cache = os.path.join(tmp, "cache")
        corpora = make_corpora(Path(tmp))
        print(f"<!-- make bench-busy, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, load average at start: "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} CPUs -->")
        print("| workload | busy processes | torch threads | samples/s | CPU share | samples per CPU-second "
              "| per CPU-second vs 0 busy |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, (data, options) in corpora.items():
            quiet = None
            for busy in [int(b) for b in args.busy.split(",")]:
                for one_thread in (False, True) if busy else (False,):
                    found = measure(args, data, options, busy, one_thread)
                    quiet = quiet or found["per_cpu"]
                    print(f"| {name} | {busy} | {'1' if one_thread else 'default'} | {found['rate']:,.0f} | "
                          f"{found['share']:.2f} | {found['per_cpu']:,.0f} | {found['per_cpu'] / quiet:.2f} |",
                          flush=True)
        print(f"<!-- load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())} -->")


if __name__ == "__main__":
    main()

"""``make bench-exclusion``: what excluding 10,000 scattered samples costs (issue 26, "Measured").

Side by side in one run, the loaders taking turns repeat after repeat so that a busy machine's noise
hits both alike:

- state size: ``state_dict()`` as JSON and as ``torch.save`` bytes, with and without the exclusion;
- per-batch cost: seconds per batch of a whole pass (index stream + dataset + collate, the batch a
  training loop receives) and of the index stream alone (the sampler side, where exclusion works),
  10,000 excluded against none, as a ratio (target: within 5%);
- one-off costs: ``exclude()`` itself (inverse order, sort) and ``load_state_dict`` with the exclusion.

The dataset returns its index (no I/O), so the loader's own work is as large a share as it can be.
Usage: ``python benchmarks/exclusion.py [--quick]``; prints a table, writes benchmarks/results/exclusion.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import shufflepoint
from shufflepoint._loading.deal import rank_chunks

RESULTS = Path(__file__).resolve().parent / "results"
EXCLUDED = 10_000


class Indices(torch.utils.data.Dataset):
    """n samples, each its own index: no I/O, so the loader's own cost is all there is."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


DEAL = "strided"  # --deal spans: the same measures under the spans deal (an exclusion re-deals what is left)


def build(n: int, batch: int, excluded: np.ndarray | None) -> shufflepoint.DataLoader:
    loader = shufflepoint.DataLoader(Indices(n), batch, seed=1234, world_size=8, rank=3, deal=DEAL)
    if excluded is not None:
        loader.exclude(excluded)
    return loader


def per_batch_loader(loader: shufflepoint.DataLoader, batches: int) -> float:
    """Seconds per batch over ``batches`` batches of a fresh pass (the first batch's setup included)."""
    loader.seek(0, 0)
    start = time.perf_counter()
    for count, _ in enumerate(loader, 1):
        if count == batches:
            break
    return (time.perf_counter() - start) / batches


def per_batch_indices(loader: shufflepoint.DataLoader, batch: int, batches: int) -> float:
    """Seconds per batch of the index stream alone: positions, skips, order (what the sampler hands torch)."""
    loader.seek(0, 0)
    cut = loader._left()[0]
    order = loader._orders.get(0, cut)
    wanted, start = batch * batches, time.perf_counter()
    got = 0
    for _, indices in rank_chunks(order, cut, loader.rank):
        got += len(indices.tolist())
        if got >= wanted:
            break
    return (time.perf_counter() - start) / batches


def state_bytes(state: dict) -> tuple[int, int]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return len(json.dumps(state).encode()), len(buffer.getvalue())


def measure(n: int, batch: int, batches: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    scattered = np.sort(rng.choice(n, EXCLUDED, replace=False))
    plain = build(n, batch, None)
    with_exclusion = build(n, batch, None)
    start = time.perf_counter()
    with_exclusion.exclude(scattered)
    exclude_s = time.perf_counter() - start
    state = with_exclusion.state_dict()
    fresh = build(n, batch, None)
    start = time.perf_counter()
    fresh.load_state_dict(state)
    next(iter(fresh))
    load_s = time.perf_counter() - start
    served = {i for b in with_exclusion for i in b.tolist()} if n <= 10**6 else set()
    assert not served & set(scattered.tolist()), "an excluded sample was served"
    timings: dict[str, list[float]] = {k: [] for k in ("loader_plain", "loader_excl", "index_plain", "index_excl")}
    per_batch_loader(plain, batches), per_batch_loader(with_exclusion, batches)  # warm-up, not counted
    for _ in range(repeats):  # turns: plain, excluded, plain, excluded, ...
        timings["loader_plain"].append(per_batch_loader(plain, batches))
        timings["loader_excl"].append(per_batch_loader(with_exclusion, batches))
        timings["index_plain"].append(per_batch_indices(plain, batch, batches * 8))
        timings["index_excl"].append(per_batch_indices(with_exclusion, batch, batches * 8))
    median = {k: statistics.median(v) for k, v in timings.items()}
    json_plain, pickle_plain = state_bytes(plain.state_dict())
    json_excl, pickle_excl = state_bytes(state)
    return {
        "n": n, "batch": batch, "excluded": EXCLUDED, "ranges": len(with_exclusion.excluded),
        "state_json_bytes": [json_plain, json_excl], "state_torch_save_bytes": [pickle_plain, pickle_excl],
        "bytes_per_range_json": (json_excl - json_plain) / len(with_exclusion.excluded),
        "bytes_per_range_torch_save": (pickle_excl - pickle_plain) / len(with_exclusion.excluded),
        "exclude_s": exclude_s, "load_and_first_batch_s": load_s,
        "per_batch_s": median, "loader_ratio": median["loader_excl"] / median["loader_plain"],
        "index_ratio": median["index_excl"] / median["index_plain"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--deal", choices=("strided", "spans"), default="strided", help="the deal measured")
    args = parser.parse_args()
    global DEAL
    DEAL = args.deal
    repeats = 3 if args.quick else 15
    load_before = os.getloadavg()
    rows = [measure(n, 256, 400, repeats) for n in (10**6, 10**9)]
    load_after = os.getloadavg()
    print(f"deal {DEAL}; load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} cores)")
    print("| n | ranges | state JSON B (none -> 10k) | torch.save B | B/range (JSON, torch.save) | exclude() s | "
          "load + 1st batch s | loader s/batch (none, 10k) | ratio | index stream ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        per = r["per_batch_s"]
        print(f"| {r['n']:.0e} | {r['ranges']} | {r['state_json_bytes'][0]} -> {r['state_json_bytes'][1]} | "
              f"{r['state_torch_save_bytes'][0]} -> {r['state_torch_save_bytes'][1]} | "
              f"{r['bytes_per_range_json']:.1f}, {r['bytes_per_range_torch_save']:.1f} | {r['exclude_s']:.3f} | "
              f"{r['load_and_first_batch_s']:.3f} | {per['loader_plain'] * 1e3:.3f} ms, "
              f"{per['loader_excl'] * 1e3:.3f} ms | {r['loader_ratio']:.3f} | {r['index_ratio']:.3f} |")
    RESULTS.mkdir(exist_ok=True)
    payload = {"deal": DEAL, "load_average": [load_before, load_after], "cores": os.cpu_count(), "rows": rows}
    (RESULTS / ("exclusion.json" if DEAL == "strided" else f"exclusion-{DEAL}.json")).write_text(json.dumps(payload,
                                                                                                 indent=1))


if __name__ == "__main__":
    main()

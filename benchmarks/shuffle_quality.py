"""``make bench-shuffle``: how well the ``blocks`` order shuffles, against a fully random order and
MosaicML Streaming's ``py1e`` at the same block size. Measures orders only: no I/O, no loader.

One epoch of a corpus of S shards of R rows each (row r of shard s is dataset index s*R + r).
For each order, over the epoch's sequence of dataset indices:

- **distinct shards per global batch** (G samples): the shards a step must have at hand. Fewer
  means cheaper reads; a fully random order touches ~min(G, S) of them.
- **same-shard neighbours**: the fraction of consecutive samples from one shard. The fully random
  order gives ~1/S; a shard read in sequence gives ~1.
- **displacement**: |epoch position - unshuffled position| / N per sample; a uniform shuffle
  gives mean 1/3.
- **live shards** (the cache budget): the most shards whose first and last use in the epoch
  straddle one position. A cache that holds that many shards reads each shard once per epoch.
- **batch self-similarity**: mean pairwise |index difference| / N inside a global batch (a
  uniform shuffle gives 1/3; a batch drawn from one stretch of the corpus gives ~0).
- **live shards of one rank**: the same cache budget for rank 0's own sequence: what one node
  (of one rank) needs to read each shard once per epoch.

The ``blocks`` order is measured under both deals on 8 ranks (global batch = 8 x batch/8): the
``strided`` deal's global batches are stretches of the epoch stream; the ``spans`` deal's (0.3's
default for corpora) hold one piece of each rank's stretch, with its order laid along the stretches.

Streaming's ``py1e`` is loaded from the mosaicml-streaming 0.13.0 wheel unpacked by the make target
into ``.venv-peers/streaming`` (``pip install --no-deps --target``): its two numpy-only modules,
by path, without importing the package (whose imports pull torch-version pins this project does
not take). Without it, the table says py1e was not run.

Usage: ``python benchmarks/shuffle_quality.py [--shards S] [--rows R] [--block B] [--batch G]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from shufflepoint._core.deals import cut
from shufflepoint._core.plan import Layout
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder
from shufflepoint._order.feistel import FeistelOrder

RANKS = 8  # the simulated world of the deal rows

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PEERS = HERE.parent / ".venv-peers" / "streaming"


def load_py1e(root: Path = PEERS) -> Callable[..., np.ndarray] | None:
    """Streaming's get_shuffle_py1e from its wheel's files, or None when they are not there."""
    folder = root / "streaming" / "base" / "shuffle"
    if not (folder / "py1e.py").exists():
        return None
    for name in ("streaming", "streaming.base", "streaming.base.shuffle"):
        sys.modules.setdefault(name, types.ModuleType(name))
    for name in ("py1s", "py1e"):
        spec = importlib.util.spec_from_file_location(f"streaming.base.shuffle.{name}", folder / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    found: Callable[..., np.ndarray] = sys.modules["streaming.base.shuffle.py1e"].get_shuffle_py1e
    return found


def dealt(epoch: np.ndarray, deal: str, batch: int) -> np.ndarray:
    """The epoch's indices in the order the ranks' global batches take them (step by step, rank by rank)."""
    per_rank = max(batch // RANKS, 1)
    share = cut(Layout(epoch.size, RANKS, per_rank, False), deal, 0, [])
    count = share.samples_per_rank()
    steps = [epoch[share.rank_positions(r, 0, count)].reshape(-1) for r in range(RANKS)]
    usable = count - count % per_rank
    stacked = np.stack([s[:usable].reshape(-1, per_rank) for s in steps], axis=1)  # step, rank, sample
    return np.concatenate([stacked.reshape(-1), *[s[usable:] for s in steps]])


def rank_zero(sequence: np.ndarray, deal: str, batch: int) -> np.ndarray:
    """Rank 0's own samples of a global-batch sequence built by ``dealt`` (or a strided stream)."""
    per_rank = max(batch // RANKS, 1)
    usable = sequence.size - sequence.size % (per_rank * RANKS)
    return sequence[:usable].reshape(-1, RANKS, per_rank)[:, 0, :].reshape(-1)


def orders(shards: int, rows: int, block: int, seed: int, py1e: Callable[..., np.ndarray] | None,
           batch: int = 256) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """One epoch of each order, as dataset indices; with the seconds it took to build."""
    n = shards * rows
    sizes = np.full(shards, rows, dtype=np.int64)
    built: dict[str, np.ndarray] = {}
    timings: dict[str, float] = {}
    makers: dict[str, Callable[[], np.ndarray]] = {
        "shufflepoint blocks, strided deal": lambda: BlockOrder(sizes, seed, 0, block).take(
            np.arange(n, dtype=np.int64)),
        f"shufflepoint blocks, spans deal ({RANKS} ranks)": lambda: dealt(
            StretchBlockOrder(sizes, seed, 0, block, RANKS).take(np.arange(n, dtype=np.int64)), "spans", batch),
        "fully random (feistel)": lambda: FeistelOrder(n, seed, 0).take(np.arange(n, dtype=np.int64)),
        "sequential (no shuffle)": lambda: np.arange(n, dtype=np.int64),
    }
    if py1e is not None:
        makers["Streaming py1e (1 canonical node)"] = lambda: np.asarray(py1e(sizes, 1, seed, 0, block))
        makers["Streaming py1e (8 canonical nodes)"] = lambda: np.asarray(py1e(sizes, 8, seed, 0, block))
    for name, make in makers.items():
        start = time.perf_counter()
        built[name] = make()
        timings[name] = time.perf_counter() - start
        assert np.array_equal(np.sort(built[name]), np.arange(n)), f"{name} is not a permutation"
    return built, timings


def live_shards(shard: np.ndarray, shards: int) -> int:
    """The most shards whose [first use, last use] interval covers one position."""
    positions = np.arange(shard.size)
    first = np.full(shards, shard.size, dtype=np.int64)
    last = np.full(shards, -1, dtype=np.int64)
    np.minimum.at(first, shard, positions)
    np.maximum.at(last, shard, positions)
    used = last >= 0  # a sequence of one rank meets only some of the shards
    first, last = first[used], last[used]
    events = np.zeros(shard.size + 1, dtype=np.int64)
    np.add.at(events, first, 1)
    np.add.at(events, last + 1, -1)
    return int(np.cumsum(events).max())


def measure(order: np.ndarray, shards: int, rows: int, batch: int) -> dict[str, float]:
    n = order.size
    shard = order // rows
    usable = n - n % batch
    batches = shard[:usable].reshape(-1, batch)
    distinct = np.array([np.unique(b).size for b in batches])
    displacement = np.abs(np.arange(n) - order) / n
    sample = order[:usable].reshape(-1, batch)[:: max(1, usable // batch // 200)]  # ~200 batches
    spread = [np.abs(b[:, None] - b[None, :]).mean() / n for b in sample]
    return {
        "distinct_median": float(np.median(distinct)), "distinct_p10": float(np.percentile(distinct, 10)),
        "distinct_p90": float(np.percentile(distinct, 90)),
        "same_shard_neighbours": float(np.mean(shard[1:] == shard[:-1])),
        "displacement_mean": float(displacement.mean()),
        "displacement_p50": float(np.median(displacement)), "displacement_p90": float(np.percentile(displacement, 90)),
        "live_shards": live_shards(shard, shards), "batch_spread": float(np.mean(spread)),
        "rank0_live_shards": live_shards(rank_zero(order, "", batch) // rows, shards),
    }


def table(results: dict[str, dict[str, float]], args: argparse.Namespace, timings: dict[str, float]) -> str:
    lines = [f"Corpus: {args.shards:,} shards × {args.rows:,} rows = {args.shards * args.rows:,} samples; "
             f"block {args.block:,} samples; global batch {args.batch}; seed {args.seed}.", "",
             "| order | distinct shards / global batch, median (p10–p90) | same-shard neighbours | "
             "displacement mean (p50, p90) | batch spread | live shards (cache budget) | live shards of rank 0 of "
             f"{RANKS} | epoch built in |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['distinct_median']:.0f} ({r['distinct_p10']:.0f}–{r['distinct_p90']:.0f}) | "
                     f"{r['same_shard_neighbours']:.4f} | {r['displacement_mean']:.3f} "
                     f"({r['displacement_p50']:.3f}, {r['displacement_p90']:.3f}) | {r['batch_spread']:.4f} | "
                     f"{r['live_shards']:,} | {r['rank0_live_shards']:,} | {timings[name]:.2f} s |")
    return "\n".join(lines) + "\n"


def plot(built: dict[str, np.ndarray], args: argparse.Namespace, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    n = args.shards * args.rows
    for name, order in built.items():
        if name.startswith("sequential"):
            continue
        shard = order // args.rows
        usable = n - n % args.batch
        distinct = [np.unique(b).size for b in shard[:usable].reshape(-1, args.batch)]
        left.hist(distinct, bins=40, histtype="step", label=name, density=True)
        displacement = np.sort(np.abs(np.arange(n) - order) / n)
        right.plot(displacement, np.linspace(0, 1, n), label=name)
    left.set_xlabel(f"distinct shards in a global batch of {args.batch}")
    left.set_ylabel("density")
    right.set_xlabel("displacement |position − original position| / N")
    right.set_ylabel("fraction of samples (CDF)")
    left.legend(fontsize=7)
    fig.suptitle(f"Shuffle quality at block = {args.block:,} ({args.shards:,} shards × {args.rows:,} rows)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--block", type=int, default=1 << 16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    py1e = load_py1e()
    built, timings = orders(args.shards, args.rows, args.block, args.seed, py1e, args.batch)
    results = {name: measure(order, args.shards, args.rows, args.batch) for name, order in built.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(results, args, timings)
    if py1e is None:
        text += "\nStreaming py1e: not run (no .venv-peers/streaming; `make bench-shuffle` unpacks it).\n"
    (args.out / "shuffle_quality.md").write_text(text)
    (args.out / "shuffle_quality.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                               "results": results}, indent=1))
    plot(built, args, args.out / "shuffle_quality.png")
    print(text)


if __name__ == "__main__":
    main()

"""A cold first batch, the way a restarted job meets it (issue 28.1; ``make bench-cold``, ~5 min).

Each measurement is a fresh process that imports the loader, builds the dataset and the loader (the
index kept from an earlier run, as on a restart), loads a state at 50% of the epoch (read from a
JSON file) and takes the first batch; imports, construction, ``load_state_dict`` and the first
batch are timed apart, and the time Python's cyclic garbage collector ran inside the timed window
is reported beside it, and the CPU time the process spent on load + first batch (``process_time``:
the main process only, so with workers it leaves out theirs; on a busy machine the wall time is this
over the process's share of a core). A full collection of torch's ~170k objects costs 70-90 ms on this machine,
and lands wherever the allocation count says: it is the process's cost, not the loader's, but a
loader that allocates more meets it sooner.

Corpora (made here, sparse files: no disk and no page-cache effect): 200 token shards (raw uint16
``.bin``, seq_len 64) of 500, 5,000 and 50,000 windows, i.e. 1e5, 1e6 and 1e7 windows, read with
``Shards(glob, seq_len=64)`` and ``DataLoader(batch_size=256, seed=1)``, the defaults otherwise
(shuffle_block 65,536). Workers 0 and 2. Construction with a kept index is also timed at 1,000
shards. LitData (``--litdata PYTHON``, a venv with litdata 0.2.76: ``make bench-shards`` builds
``.venv-bench-litdata``) is measured on the same windows converted to its ``TokensLoader`` layout
(one chunk per shard), its state moved to the same cursor (as ``benchmarks/shards`` does);
``--litdata-max`` caps the corpora converted (1e7 windows take ~1.3 GB and minutes to convert).

Prints a Markdown table of medians over ``--repeats`` fresh processes, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SEQ_LEN, BATCH, SHARDS = 64, 256, 200
HERE = Path(__file__).resolve()


def make_corpus(root: Path, shards: int, windows: int) -> str:
    """Sparse ``.bin`` shards of ``windows`` windows each (all tokens 0: the reads are what is timed)."""
    root.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        with open(root / f"part-{shard:05d}.bin", "wb") as f:
            f.truncate((windows * SEQ_LEN + 1) * 2)
    return str(root / "*.bin")


def gc_timer() -> list[float]:
    """[seconds the collector ran, start of the current collection]: a gc callback's running total."""
    import gc

    spent = [0.0, 0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[1] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - spent[1]

    gc.callbacks.append(callback)
    return spent


def timed_resume(loader: Any, state: Any, spent: list[float], imports: float, construct: float) -> dict[str, float]:
    """The resume as a restarted job meets it: load the state, then the first batch (wall and CPU time)."""
    start, cpu = time.perf_counter(), time.process_time()
    loader.load_state_dict(state)
    loaded = time.perf_counter()
    batch = next(iter(loader))
    first, cpu = time.perf_counter(), time.process_time() - cpu
    assert tuple(batch.shape) == (BATCH, SEQ_LEN + 1)
    return {"import": imports, "construct": construct, "load": loaded - start, "first": first - loaded,
            "gc": spent[0], "cpu": cpu}


def child_shufflepoint(args: argparse.Namespace) -> dict[str, float]:
    begin = time.perf_counter()
    import shufflepoint

    imported = time.perf_counter()
    spent = gc_timer()
    dataset = shufflepoint.Shards(args.data, seq_len=SEQ_LEN, cache_dir=args.cache, progress=False)
    built = time.perf_counter()
    if args.construct_only:
        return {"import": imported - begin, "construct": built - imported, "construct_gc": spent[0]}
    loader = shufflepoint.DataLoader(dataset, batch_size=BATCH, seed=1, num_workers=args.workers)
    with open(args.state) as f:
        state = json.load(f)
    spent[0] = 0.0
    return timed_resume(loader, state, spent, imported - begin, built - imported)


def child_litdata(args: argparse.Namespace) -> dict[str, float]:
    begin = time.perf_counter()
    import litdata

    imported = time.perf_counter()
    dataset = litdata.StreamingDataset(args.data, item_loader=litdata.TokensLoader(block_size=SEQ_LEN + 1),
                                       shuffle=True, seed=1, drop_last=False)
    loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=args.workers)
    built = time.perf_counter()
    if args.make_state:  # its own state after one batch, the counters moved to the cursor
        next(iter(loader))
        state = json.loads(json.dumps(loader.state_dict(), default=str))
        cursor = len(dataset) // 2 // BATCH * BATCH
        state["num_samples_yielded"] = cursor
        state["dataset"]["num_samples_yielded"] = cursor
        state["dataset"]["sample_in_epoch"] = cursor
        with open(args.state, "w") as f:
            json.dump(state, f)
        return {}
    with open(args.state) as f:
        state = json.load(f)
    spent = gc_timer()
    return timed_resume(loader, state, spent, imported - begin, built - imported)


def convert_litdata(args: argparse.Namespace) -> dict[str, float]:
    """The .bin shards as LitData ``TokensLoader`` chunks, one shard's windows back to back per chunk."""
    import glob

    import litdata
    import numpy as np

    def windows(path: str) -> Any:
        tokens = np.fromfile(path, dtype="<u2")
        blocks = np.lib.stride_tricks.sliding_window_view(tokens, SEQ_LEN + 1)[::SEQ_LEN]
        yield np.ascontiguousarray(blocks).reshape(-1)

    inputs = sorted(glob.glob(args.source))
    tokens = (os.path.getsize(inputs[0]) // 2 - 1) // SEQ_LEN * (SEQ_LEN + 1)
    litdata.optimize(fn=windows, inputs=inputs, output_dir=args.data, chunk_size=tokens,
                     item_loader=litdata.TokensLoader(), num_workers=2, mode="overwrite", start_method="fork")
    return {}


def run_child(python: str, *extra: str) -> dict[str, float]:
    done = subprocess.run([python, str(HERE), *extra], capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(extra)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def shufflepoint_state(pattern: str, cache: str) -> dict[str, Any]:
    import shufflepoint

    loader = shufflepoint.DataLoader(shufflepoint.Shards(pattern, seq_len=SEQ_LEN, cache_dir=cache, progress=False),
                                     batch_size=BATCH, seed=1)
    loader.seek(0, len(loader) // 2)
    state: dict[str, Any] = loader.state_dict()
    return state


def ms(values: list[float]) -> str:
    return f"{1e3 * statistics.median(values):.1f}"


def measure_size(args: argparse.Namespace, root: Path, cache: str, windows: int) -> None:
    """The table's rows for 200 shards of ``windows`` windows: each loader, workers 0 and 2."""
    pattern = make_corpus(root / f"tokens-{windows}", SHARDS, windows)
    state_file = str(root / f"state-{windows}.json")
    with open(state_file, "w") as f:
        json.dump(shufflepoint_state(pattern, cache), f)  # also keeps the index, as a restart finds it
    loaders = [("shufflepoint", sys.executable, pattern)]
    if args.litdata and windows <= args.litdata_max:
        lit_dir = str(root / f"litdata-{windows}")
        run_child(args.litdata, "--child", "convert", "--source", pattern, "--data", lit_dir)
        loaders.append(("LitData", args.litdata, lit_dir))
    for workers in (0, 2):
        for name, python, data in loaders:
            lit_state = str(root / f"litdata-state-{windows}-{workers}.json")
            if name == "LitData":
                run_child(python, "--child", "litdata", "--data", data, "--state", lit_state,
                          "--workers", str(workers), "--make-state")
            runs = [run_child(python, "--child", name.lower(), "--data", data, "--cache", cache,
                              "--state", state_file if name == "shufflepoint" else lit_state,
                              "--workers", str(workers)) for _ in range(args.repeats)]
            column = {key: [r[key] for r in runs] for key in runs[0]}
            total = [r["load"] + r["first"] for r in runs]
            print(f"| {name} | {SHARDS * windows:.0e} | {workers} | {ms(column['import'])} | "
                  f"{ms(column['construct'])} | {ms(column['load'])} | {ms(column['first'])} | "
                  f"**{ms(total)}** (min {1e3 * min(total):.1f}) | {ms(column['cpu'])} | {ms(column['gc'])} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", choices=["shufflepoint", "litdata", "convert"])
    parser.add_argument("--data", default="")
    parser.add_argument("--source", default="")
    parser.add_argument("--state", default="")
    parser.add_argument("--cache", default="")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--construct-only", action="store_true")
    parser.add_argument("--make-state", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default="500,5000,50000", help="windows per shard (x 200 shards)")
    parser.add_argument("--litdata", default="", help="a Python with litdata 0.2.76 (skipped when empty)")
    parser.add_argument("--litdata-max", type=int, default=5000, help="largest windows per shard converted for LitData")
    parser.add_argument("--root", default="", help="where the corpora go (default: a temporary folder)")
    args = parser.parse_args()
    if args.child:
        run = {"shufflepoint": child_shufflepoint, "litdata": child_litdata, "convert": convert_litdata}[args.child]
        print(json.dumps(run(args)), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp)
        cache = str(root / "cache")
        print(f"<!-- make bench-cold, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, load average at start: "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} -->")
        print(f"# cold first batch at 50% of the epoch, {SHARDS} token shards, seq_len {SEQ_LEN}, batch {BATCH}, "
              f"median of {args.repeats} fresh processes (ms)")
        print("| loader | windows | workers | import | construct | load_state_dict | first batch | load + first "
              "| its CPU time | of which GC |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for windows in [int(w) for w in args.sizes.split(",")]:
            measure_size(args, root, cache, windows)
        pattern = make_corpus(root / "tokens-1000-shards", 1000, 100)
        shufflepoint_state(pattern, cache)  # the index, kept
        runs = [run_child(sys.executable, "--child", "shufflepoint", "--data", pattern, "--cache", cache,
                          "--construct-only") for _ in range(args.repeats)]
        print(f"\nConstruction with a kept index, 1,000 shards: {ms([r['construct'] for r in runs])} ms "
              f"(min {1e3 * min(r['construct'] for r in runs):.1f}), of which the garbage collector "
              f"{ms([r['construct_gc'] for r in runs])} ms; without it "
              f"{ms([r['construct'] - r['construct_gc'] for r in runs])} ms "
              f"(min {1e3 * min(r['construct'] - r['construct_gc'] for r in runs):.1f})")
        print(f"<!-- load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())} -->")


if __name__ == "__main__":
    main()

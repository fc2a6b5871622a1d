"""One loader at one n, in a fresh process: peak memory of a resume, then resume latency repeats.

Run by ``run.py`` (one process per loader and n, so a peer's GiB-sized heap never leaks into the
next measurement). Prints one JSON object per line on stdout:

- ``memory``: the first resume in this process, at the last cursor of ``--fracs``. Peak RSS delta =
  VmHWM (reset through /proc/self/clear_refs just before) minus VmRSS just before; kept = VmRSS
  after it, with the loader and its iterator still referenced, minus VmRSS before. For shufflepoint
  also the Python/numpy allocations of the loader traced by ``tracemalloc``: retained after the first
  batch, and the peak over the following ``--trace-batches`` batches (the index chunks reach their
  largest size within them).
- ``resume``: seconds for ``load_state_dict`` + ``iter`` + ``next`` on a freshly built loader (built
  after ``torch.manual_seed``, not timed), the state having made a round trip through JSON or pickle
  (not timed). ``exact`` says whether the batch equals the closed-form reference.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _loaders as L  # noqa: E402


def status_kib() -> dict[str, int]:
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                values[name] = int(value.split()[0])
    return values


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def emit(**record: object) -> None:
    print(json.dumps(record), flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True, choices=sorted(L.IMPLS))
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--fracs", default="0,0.5,0.9")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--schedule", default="",
                        help="cursors of the timed runs after the memory run, in order (overrides --repeats)")
    parser.add_argument("--synth", action="store_true", help="write the states instead of iterating")
    parser.add_argument("--trace-batches", type=int, default=0)
    parser.add_argument("--no-reference", action="store_true")
    return parser.parse_args()


def warm_up(key: str) -> None:
    """Imports, lazy initialisation and first-call costs, on a tiny dataset."""
    warm = L.build(key, 1000)
    state = L.state_of(key, warm) if L.IMPLS[key].resumable else None
    L.resume(key, L.build(key, 1000), L.round_trip(key, state) if state is not None else None)


def build_states(args: argparse.Namespace, cursors: dict[float, int]) -> dict[float, dict | None]:
    key, n = args.impl, args.n
    states: dict[float, dict | None] = {}
    for frac, k in cursors.items():
        if not L.IMPLS[key].resumable or k == 0:
            states[frac] = None  # cursor 0: a fresh loader, no state to load
        elif args.synth:
            states[frac] = L.round_trip(key, L.synthetic_state(key, n, k))
        else:
            states[frac] = L.round_trip(key, L.real_state(key, n, k))
    gc.collect()
    return states


def run_once(key: str, n: int, state: dict | None) -> tuple[float, list[int], object]:
    """One timed resume: build the loader, load a copy of the state, take the first batch. The
    loader is returned so that the caller decides when its memory is released."""
    loader = L.build(key, n)
    state = L.copy_state(state) if state is not None else None
    gc.collect()
    start = time.perf_counter()
    batch = L.resume(key, loader, state)
    seconds = time.perf_counter() - start
    return seconds, batch.tolist(), loader


def trace_allocations(key: str, n: int, state: dict | None, batches: int) -> dict[str, int]:
    """tracemalloc over a resume and the next ``batches`` batches (shufflepoint's loaders only)."""
    tracemalloc.start()
    loader = L.build(key, n)
    if state is not None:
        L.load(key, loader, L.copy_state(state))
    iterator = iter(loader)
    next(iterator)
    record = {"traced_retained_bytes": tracemalloc.get_traced_memory()[0]}
    tracemalloc.reset_peak()
    for _ in itertools.islice(iterator, batches):
        pass
    record["traced_peak_bytes"] = tracemalloc.get_traced_memory()[1]
    record["traced_batches"] = batches
    tracemalloc.stop()
    del loader, iterator
    gc.collect()
    return record


def main() -> None:
    args = parse_args()
    key, n = args.impl, args.n
    fracs = [float(f) for f in args.fracs.split(",")]
    per_epoch = L.batches_per_epoch(key, n)
    cursors = {frac: int(frac * per_epoch) for frac in fracs}
    warm_up(key)
    states = build_states(args, cursors)

    # Memory: the first resume of this process, at the last (largest) cursor.
    frac = fracs[-1]
    before = status_kib()["VmRSS"]
    reset_peak()
    seconds, batch, loader = run_once(key, n, states[frac])
    after = status_kib()
    runs = [{"frac": frac, "seconds": seconds, "batch": batch}]
    record: dict[str, object] = {
        "section": "memory", "impl": key, "n": n, "frac": frac, "synth": args.synth,
        "peak_delta_bytes": (after["VmHWM"] - before) * 1024, "kept_bytes": (after["VmRSS"] - before) * 1024,
    }
    del loader
    gc.collect()
    if key in ("shufflepoint", "sp_sampler") and args.trace_batches:
        record.update(trace_allocations(key, n, states[frac], args.trace_batches))
    emit(**record)

    reference = None if args.no_reference or key in ("torch", "torch_ds") else L.Reference(key, n)
    gc.collect()
    # Repeats, interleaved over the cursors; the memory run above counts as one at the last cursor.
    if args.schedule:
        schedule = [float(f) for f in args.schedule.split(",")]
    else:
        schedule = [frac for _ in range(args.repeats) for frac in fracs][:-1]
    for frac in schedule:
        seconds, batch, loader = run_once(key, n, states[frac])
        del loader
        runs.append({"frac": frac, "seconds": seconds, "batch": batch})
    for run in runs:
        k = cursors[run["frac"]]
        exact = None if reference is None else run["batch"] == reference.batch(k)
        emit(section="resume", impl=key, n=n, frac=run["frac"], k=k, seconds=run["seconds"], exact=exact,
             synth=args.synth and k > 0 and L.IMPLS[key].resumable)


if __name__ == "__main__":
    main()

"""``make bench``: shufflepoint side by side with its peers, in one run, on this machine.

Sections (each a list of JSON records appended to ``benchmarks/results/raw.jsonl``; ``report.py``
turns them into ``results.md`` and the charts):

- ``machine``: cores, CPU model, versions.
- ``indexgen``: indices per second of each order (``feistel`` vectorised ``take``, the loader's
  index stream as Python ints, the ``torch`` order) against ``torch.randperm`` (+ ``.tolist()``).
- ``iter``: batches per second over one whole epoch of a freshly built loader (``iter`` included),
  num_workers 0 and 2; the loaders take turns, repeat after repeat, so noise hits all alike.
- ``state``: state size (JSON, pickle) and the cost of one ``state_dict()`` call mid-epoch.
- ``synth_check``: the synthetic states used for large n are equal to real ones (deep equality,
  generator tensor included) and resume to the true next batch.
- ``memory`` and ``resume``: one fresh process per loader and n (``_resume_child.py``).

Usage: ``python benchmarks/run.py [--quick] [--sections a,b] [--no-report]``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RAW = RESULTS / "raw.jsonl"
sys.path.insert(0, str(HERE))

import _loaders as L  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

# (impl, n, repeats, synthetic state): one fresh process each. A repeat is one resume at each
# cursor; the first resume of a process (at 90%) is also its memory measurement. Peers at 1e8 cost
# tens of seconds per resume (minutes on a busy machine), so there: 0% and 50% once, 90% twice
# (PEER_1E8_SCHEDULE). Real states (iterated) up to 1e6; written ("synthetic") states above,
# checked against real ones by synth_check.
BIG = 10**8
PEER_1E8_SCHEDULE = "0,0.5,0.9"
RESUME_PLAN: list[tuple[str, int, int, bool]] = [
    *[("shufflepoint", n, 15, n > 10**6) for n in (10**5, 10**6, 10**7, 10**8, 10**9)],
    *[("sp_sampler", n, 9, n > 10**6) for n in (10**5, 10**9)],
    *[("torch_ds", n, r, False) for n, r in ((10**5, 9), (10**6, 5), (10**7, 3), (BIG, 2))],
    *[("accelerate", n, r, n > 10**6) for n, r in ((10**5, 7), (10**6, 5), (10**7, 2), (BIG, 2))],
    *[("torchdata", n, r, n > 10**6) for n, r in ((10**5, 7), (10**6, 3), (10**7, 2), (BIG, 2))],
]
QUICK_RESUME_PLAN: list[tuple[str, int, int, bool]] = [
    *[("shufflepoint", n, 5, n > 10**5) for n in (10**5, 10**6, 10**9)],
    *[("torch_ds", 10**5, 3, False), ("accelerate", 10**5, 3, False), ("torchdata", 10**5, 3, False)],
    *[("accelerate", 10**6, 2, True), ("torchdata", 10**6, 2, True)],
]
FRACS = (0.0, 0.5, 0.9)
TRACE_BATCHES = 4000  # the loader's index chunks reach their largest size within these


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Sink:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")


# -- machine ---------------------------------------------------------------------------------
def machine() -> dict:
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        mem_kib = int(meminfo.readline().split()[1])
    import accelerate
    import torchdata

    import shufflepoint

    return {
        "section": "machine", "cpu_model": model, "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)), "mem_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
        "torchdata": torchdata.__version__, "accelerate": accelerate.__version__,
        "shufflepoint": shufflepoint.__version__, "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(), "commit": _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=HERE, capture_output=True,
                               text=True)
        return out.stdout.strip() + ("+dirty-src" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


# -- index generation ------------------------------------------------------------------------
def _time(fn, repeats: int) -> dict[str, list[float]]:
    """Wall and CPU seconds (this thread; numpy and the list work here are single-threaded)."""
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    return {"seconds": wall, "cpu_seconds": cpu}


# Sizes for the seekable orders: round numbers, and just above powers of two (2**24 + 1, 2**30 + 1),
# where a power-of-two domain cycle-walks almost half of its values.
INDEXGEN_SIZES = (10**6, 2**24 + 1, 10**8, 2**30 + 1, 10**9, 10**12, 2**62)


def indexgen(sink: Sink, quick: bool) -> None:
    from shufflepoint._core.plan import Layout, StridedCut
    from shufflepoint._loading.deal import rank_index_chunks
    from shufflepoint._order import make_order

    count = 1 << 21
    repeats = 3 if quick else 5
    for n, name in itertools.product(INDEXGEN_SIZES, ("feistel", "radix-feistel")):
        order = make_order(name, n, L.SEED, 0)
        positions = np.arange(min(n, count), dtype=np.int64)
        order.take(positions[:1000])
        times = _time(lambda order=order, positions=positions: order.take(positions), repeats)
        sink.write({"section": "indexgen", "op": f"{name} take (int64 array)", "order": name, "n": n,
                    "count": positions.size, **times})
        if n not in (10**8, 10**9):
            continue
        layout = Layout(n, L.WORLD, L.BATCH, False)
        stream_count = min(n // L.WORLD, 1 << 20)

        def stream(order=order, layout=layout, stream_count=stream_count) -> None:
            chunks = itertools.chain.from_iterable(rank_index_chunks(order, StridedCut(layout, 0), 0))
            for _ in itertools.islice(chunks, 0, stream_count, L.BATCH):  # consumed in C, one per batch
                pass

        times = _time(stream, repeats)
        sink.write({"section": "indexgen", "op": f"{name} loader stream (rank 0 of 2, Python ints)", "order": name,
                    "n": n, "count": stream_count, **times})
    for n in (10**6, 10**7) if quick else (10**6, 10**7, 10**8):
        reps = 2 if n >= 10**8 else 3 if n >= 10**7 else repeats
        times = _time(lambda n=n: torch.randperm(n), reps)
        sink.write({"section": "indexgen", "op": "torch.randperm", "n": n, "count": n, **times})
        if n <= 10**7:
            times = _time(lambda n=n: torch.randperm(n).tolist(), reps)
            sink.write({"section": "indexgen", "op": "torch.randperm(n).tolist() (what samplers do)", "n": n,
                        "count": n, **times})
            positions = np.arange(n, dtype=np.int64)
            times = _time(lambda n=n, positions=positions: make_order("torch", n, L.SEED, 0).take(positions), reps)
            sink.write({"section": "indexgen", "op": "torch order (build + take all)", "n": n, "count": n,
                        **times})
        log(f"indexgen n={n:.0e} done")


# -- iteration throughput ----------------------------------------------------------------------
ITER_IMPLS = ("torch_ds", "shufflepoint", "sp_sampler", "torch", "torchdata", "accelerate")


def iteration(sink: Sink, quick: bool) -> None:
    settings = [(0, 10**6, 3 if quick else 5), (2, 5 * 10**4, 1 if quick else 2)]
    for workers, n, repeats in settings:
        for repeat in range(repeats):
            for key in ITER_IMPLS:
                loader = L.build(key, n, num_workers=workers)
                gc.collect()
                batches = 0
                start, start_cpu = time.perf_counter(), time.thread_time()
                for _ in loader:
                    batches += 1
                seconds, cpu_seconds = time.perf_counter() - start, time.thread_time() - start_cpu
                sink.write({"section": "iter", "impl": key, "workers": workers, "n": n, "repeat": repeat,
                            "batches": batches, "seconds": seconds, "cpu_seconds": cpu_seconds})
                del loader
        log(f"iter num_workers={workers} done")


# -- state -----------------------------------------------------------------------------------
def state(sink: Sink, quick: bool) -> None:
    import pickle

    n, k = 10**6, 1000
    for key in ("shufflepoint", "sp_sampler", "torchdata", "accelerate"):
        loader = L.build(key, n)
        iterator = iter(loader)
        for _ in itertools.islice(iterator, k):
            pass
        target = loader.sampler if key == "sp_sampler" else loader
        saved = target.state_dict()
        try:
            json_bytes: int | None = len(json.dumps(saved).encode())
        except TypeError:
            json_bytes = None
        per_call = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(1000):
                target.state_dict()
            per_call.append((time.perf_counter() - start) / 1000)
        sink.write({"section": "state", "impl": key, "n": n, "k": k, "json_bytes": json_bytes,
                    "pickle_bytes": len(pickle.dumps(saved)), "call_seconds": per_call})
        del loader, iterator
    # shufflepoint at n = 1e9 mid-epoch, and the widest values every field can hold.
    import shufflepoint

    big = L.build("shufflepoint", 10**9)
    saved = L.synthetic_state("shufflepoint", 10**9, int(0.9 * len(big)))
    big.load_state_dict(saved)
    sink.write({"section": "state_size", "case": "n=1e9, seed 1234, 90% of epoch 0",
                "json_bytes": len(json.dumps(big.state_dict()).encode()), "state": big.state_dict()})
    # seed: 2**63 - 1 is the largest a state can carry (the state schema caps ints at int64).
    widest = shufflepoint.DataLoader(L.Ids(2**62), batch_size=2**31, seed=2**63 - 1, world_size=2**31,
                                     rank=2**31 - 1, drop_last=True)
    saved = widest.state_dict()
    # epoch and steps: 2**62 is the largest a state takes (room to count on, _core/state.py MAX_EPOCH)
    saved["epoch"], saved["cursor"], saved["steps"] = 2**62, 2**62 - 1, 2**62
    saved["history"] = [[2**62, 2**31, 2**31, 1, 2**62, 2**62 - 1]]  # one leg, starting there
    widest.load_state_dict(saved)
    sink.write({"section": "state_size", "case": "widest: n=2**62, seed=2**63-1, epoch=2**62, W=B=2**31",
                "json_bytes": len(json.dumps(widest.state_dict()).encode()), "state": widest.state_dict()})
    log("state done")


# -- synthetic states vs real ones -----------------------------------------------------------
def synth_check(sink: Sink, quick: bool) -> None:
    n = 10**5 if quick else 10**6
    for key in ("shufflepoint", "sp_sampler", "torchdata", "accelerate"):
        reference = L.Reference(key, n)
        for frac in (0.5, 0.9):
            k = int(frac * L.batches_per_epoch(key, n))
            real, synthetic = L.real_state(key, n, k), L.synthetic_state(key, n, k)
            resumed = L.resume(key, L.build(key, n), L.round_trip(key, synthetic)).tolist()
            sink.write({"section": "synth_check", "impl": key, "n": n, "frac": frac, "k": k,
                        "state_equal": L.states_equal(real, synthetic),
                        "next_batch_exact": resumed == reference.batch(k)})
    log("synth_check done")


# -- resume and memory, in child processes ---------------------------------------------------
def resume_and_memory(sink: Sink, quick: bool) -> None:
    plan = QUICK_RESUME_PLAN if quick else RESUME_PLAN
    for key, n, repeats, synth in plan:
        fracs = "0" if not L.IMPLS[key].resumable else ",".join(map(str, FRACS))
        command = [sys.executable, str(HERE / "_resume_child.py"), "--impl", key, "--n", str(n),
                   "--repeats", str(repeats), "--fracs", fracs]
        if synth:
            command.append("--synth")
        if n >= BIG and key in ("torchdata", "accelerate"):
            command += ["--schedule", PEER_1E8_SCHEDULE]
        if key in ("shufflepoint", "sp_sampler"):
            command += ["--trace-batches", str(TRACE_BATCHES)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sink.write({"section": "error", "impl": key, "n": n, "stderr": done.stderr[-2000:]})
            log(f"resume {key} n={n:.0e} FAILED: {done.stderr[-300:]}")
            continue
        for line in done.stdout.splitlines():
            sink.write(json.loads(line))
        log(f"resume {key} n={n:.0e} x{repeats}: {time.perf_counter() - start:.1f} s")


SECTIONS = {
    "indexgen": indexgen, "iter": iteration, "state": state, "synth_check": synth_check,
    "resume": resume_and_memory,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke run)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--append", action="store_true", help="add to raw.jsonl instead of starting it over")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    if not args.append and RAW.exists():
        RAW.unlink()
    sink = Sink(RAW)
    started = time.perf_counter()
    sink.write(machine())
    for name in args.sections.split(","):
        SECTIONS[name](sink, args.quick)
    total = time.perf_counter() - started
    sink.write({"section": "run", "seconds": total, "quick": args.quick, "sections": args.sections})
    log(f"all sections: {total:.0f} s")
    if not args.no_report:
        import report

        report.main([str(RAW), str(RESULTS)])


if __name__ == "__main__":
    main()

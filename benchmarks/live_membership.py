"""torchft's data path against shufflepoint's, side by side, for the same failures (issue 43; make bench-torchft).

1. Real torchft 0.2.0 (a Lighthouse, 3 replica groups of 1 process on Gloo, 240 samples, batch 4): a group SIGKILLed
   and restarted (healing from a peer), and a group lost for good, each run with torchft's own sampler
   (``torchft.DistributedSampler`` into torchdata's ``StatefulDataLoader``, its state in the Manager's state
   transfer: benchmarks/_torchft_sampler_worker.py) and with shufflepoint's (tests/fault_tolerance/worker.py).
   Counted the same way for both: the ids of the draws of every committed step's quorum; distinct, twice, never.
2. In one process, a simulated Manager: the loader's own cost of a step, steady and just after a membership
   change, and the step rate with a change every 10 steps against a fixed world (the loader only, no model).
3. The same with a slow transform (2 ms a sample, of CPU or of waiting, batch 8, 10 ms of compute a step; and a
   waiting one with 4 ms of compute, where the workers are the bottleneck) at num_workers 0 (the read-ahead thread)
   and 2 (torch's worker processes): the step rate in a fixed world and with a change every 20 steps, the steady
   rate between changes, and a change's cost in milliseconds and in share reads.
   ``--cost-only`` runs 2 and 3 and keeps the last run's 1; ``--workers-only`` runs 3 alone. Run it with
   ``PYTHONPATH=src`` to measure a checkout other than the one the venv installed.

Results: benchmarks/results/torchft.md and .json. Run with .venv-torchft's python (not named torchft.py: a script
of that name beside the workers would shadow the torchft package).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fault_tolerance"))
from harness import Run, records  # noqa: E402

from shufflepoint._loading.live import LiveLoader  # noqa: E402

N, BATCH, GROUPS = 240, 4, 3
RESULTS = ROOT / "benchmarks" / "results"


def trained_ids(found: list[dict[str, Any]]) -> list[int]:
    """The ids of every committed step: the draws of the quorum that committed it (each rank's last at that step)."""
    ids: list[int] = []
    for step in sorted({r["step"] for r in found if r["committed"]}):
        quorum = next(r["quorum"] for r in found if r["step"] == step and r["committed"])
        last: dict[tuple[int, int], list[int]] = {}
        for r in found:
            if r["step"] == step and r["quorum"] == quorum and r["rank"] is not None:
                last[(r["group"], r["group_rank"])] = r["ids"]
        ids.extend(i for share in last.values() for i in share)
    return ids


def counted(ids: list[int]) -> dict[str, int]:
    counts: dict[int, int] = {}
    for i in ids:
        counts[i] = counts.get(i, 0) + 1
    return {"distinct": len(counts), "twice": sum(1 for c in counts.values() if c > 1), "never": N - len(counts)}


def scenario(name: str, worker: pathlib.Path, out: pathlib.Path) -> dict[str, Any]:
    run = Run(out, GROUPS, worker_args=["--n", str(N), "--batch", str(BATCH), "--hold-at", "8"], worker=worker)
    started = time.time()
    run.start_all()
    if name == "killed and restarted":
        run.wait_until(lambda: run.committed_steps(2) >= 4)
        run.kill(2)
        time.sleep(1)
        run.restart(2)
    else:
        run.wait_until(lambda: run.committed_steps(1) >= 4)
        run.kill(1)
        (out / "go").touch()
    run.finish()
    found = records(out)
    return {"steps": len({r["step"] for r in found if r["committed"]}), **counted(trained_ids(found)),
            "seconds": round(time.time() - started, 1)}


class Manager:
    """A simulated torchft Manager: the quorum is set by the benchmark, every step commits."""

    def __init__(self) -> None:
        self.step, self.participants, self.rank = 0, GROUPS, 0

    def start_quorum(self) -> None: ...

    def num_participants(self) -> int:
        return self.participants

    def participating_rank(self) -> int | None:
        return self.rank

    def current_step(self) -> int:
        return self.step


def loader_cost(steps: int, change_every: int | None) -> dict[str, float]:
    """Seconds per step of the loader alone (a 64-float row per sample, batch 32), steady and at a change."""
    rows = np.random.default_rng(0).random((200_000, 64), dtype=np.float32)
    manager = Manager()
    loader = LiveLoader(rows, 32, replica_groups=GROUPS, manager=manager, seed=0)
    steady, changed = [], []
    iterator = iter(loader)
    for step in range(steps):
        change = change_every is not None and step > 0 and step % change_every == 0
        if change:
            manager.participants = 2 if manager.participants == GROUPS else GROUPS
        began = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            iterator = iter(loader)
            next(iterator)
        (changed if change else steady).append(time.perf_counter() - began)
        manager.step += 1
        time.sleep(0.002)  # the step's compute: the read-ahead runs meanwhile
    found = {"steady_us": 1e6 * float(np.median(steady)),
             "steps_per_s_loader": (len(steady) + len(changed)) / (sum(steady) + sum(changed)),
             "dropped": float(loader.prefetch_dropped)}
    if changed:
        found["change_us"] = 1e6 * float(np.median(changed))
    return found


def slow(sample: Any, rng: np.random.Generator) -> Any:
    """A decode-heavy transform: 2 ms of CPU (the GIL held, as a Python decoder holds it)."""
    until = time.perf_counter() + 0.002
    while time.perf_counter() < until:
        pass
    return sample


def waiting(sample: Any, rng: np.random.Generator) -> Any:
    """A transform that waits 2 ms (a remote read or a decoder that releases the GIL): no CPU taken."""
    time.sleep(0.002)
    return sample


def worker_cost(steps: int, change_every: int | None, workers: int, transform: Any,
                compute: float = 0.010) -> dict[str, float]:
    """Steps per second with ``transform`` on every sample and ``compute`` seconds of compute a step, the shares
    dropped, and each step's own time (its wait for the batch and its compute), to tell a change's cost from the
    steady rate."""
    rows = np.arange(100_000, dtype=np.int64)
    manager = Manager()
    manager.participants = GROUPS
    loader = LiveLoader(rows, 8, replica_groups=GROUPS, manager=manager, seed=0, transform=transform,
                        num_workers=workers)
    iterator = iter(loader)
    next(iterator)  # the workers start
    manager.step += 1
    for _ in range(5):  # the read-ahead fills
        next(iterator)
        manager.step += 1
        time.sleep(compute)
    times, changed = [], []
    began = time.perf_counter()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        if change_every is not None and step % change_every == 0:
            manager.participants = 2 if manager.participants == GROUPS else GROUPS
            changed.append(step - 1)
        next(iterator)
        manager.step += 1
        time.sleep(compute)  # the step's compute
        times.append(time.perf_counter() - start)
    total = time.perf_counter() - began
    loader.close()
    since = [min((i - c for c in changed if c <= i), default=steps) for i in range(steps)]
    steady = [t for t, s in zip(times, since, strict=True) if s >= STEADY_AFTER]
    return {"steps_per_s": steps / total, "dropped": float(loader.prefetch_dropped), "changes": float(len(changed)),
            "steady_steps_per_s": len(steady) / sum(steady),
            "change_step_ms": 1e3 * float(np.median([times[c] for c in changed])) if changed else 0.0,
            "seconds": total}


WORKER_STEPS = 400
STEADY_AFTER = 5  # a step this many steps after the last change is steady (the read-ahead refilled)


def share_read_s(transform: Any) -> float:
    """One share's read (8 samples through ``transform``) in this process, median of 20."""
    found = []
    for _ in range(20):
        began = time.perf_counter()
        for i in range(8):
            transform(i, None)
        found.append(time.perf_counter() - began)
    return float(np.median(found))


def change_costs(results: dict[str, Any], kind: str, workers: int, read_s: float) -> None:
    """A change's cost: the time a run with changes took over a fixed world's for as many steps, per change, in
    milliseconds and in share reads (``read_s``)."""
    fixed, moved = (results["workers"][f"{kind} | {workers} | {label}"] for label in (FIXED, CHANGING))
    extra = moved["seconds"] - moved["seconds"] * moved["steps_per_s"] / fixed["steps_per_s"]
    moved["change_cost_ms"] = 1e3 * extra / moved["changes"]
    moved["change_cost_reads"] = extra / moved["changes"] / read_s


FIXED, CHANGING = "fixed world", "a change every 20 steps"


def workers_part(results: dict[str, Any], rounds: int) -> None:
    """3. (module docstring): each transform at 0 and 2 workers, fixed world and changing runs alternated."""
    for kind, transform, compute in (("2 ms CPU", slow, 0.010), ("2 ms wait", waiting, 0.010),
                                     ("2 ms wait, 4 ms compute", waiting, 0.004)):
        read_s = share_read_s(transform)
        for workers in (0, 2):
            runs: dict[str, list[dict[str, float]]] = {FIXED: [], CHANGING: []}
            for _ in range(rounds):  # alternated, so a load that comes and goes falls on both
                for label, every in ((FIXED, None), (CHANGING, 20)):
                    runs[label].append(worker_cost(WORKER_STEPS, every, workers, transform, compute))
            for label, found in runs.items():
                results["workers"][f"{kind} | {workers} | {label}"] = {
                    key: float(np.median([run[key] for run in found])) for key in found[0]}
            change_costs(results, kind, workers, read_s)
            results["workers"][f"{kind} | {workers} | {CHANGING}"]["share_read_ms"] = 1e3 * read_s


def report(results: dict[str, Any], rounds: int) -> str:
    """benchmarks/results/torchft.md."""
    lines = ["# torchft 0.2.0: torchft's sampler and shufflepoint's, the same failures (make bench-torchft)", "",
             f"{GROUPS} replica groups x 1 process, Gloo on 127.0.0.1, {N} samples, batch {BATCH}; trained = the ids "
             "of every committed step's quorum. One run each, on a shared 2-core machine.", "",
             "| failure | data path | committed steps | distinct | twice+ | never | wall s |",
             "|---|---|---|---|---|---|---|"]
    for key, found in results["real"].items():
        name, label = key.split(" | ")
        lines.append(f"| {name} | {label} | {found['steps']} | {found['distinct']} | {found['twice']} | "
                     f"{found['never']} | {found['seconds']} |")
    lines += ["", "The loader alone (simulated Manager, 64-float rows, batch 32, read-ahead on; median per step):", "",
              "| membership | steady step (us) | step at a change (us) | loader steps/s | read-aheads dropped |",
              "|---|---|---|---|---|"]
    for key, found in results["loader"].items():
        change = f"{found['change_us']:.0f}" if "change_us" in found else "-"
        lines.append(f"| {key} | {found['steady_us']:.0f} | {change} | {found['steps_per_s_loader']:.0f} | "
                     f"{found['dropped']:.0f} |")
    lines += ["", f"A slow transform (2 ms a sample: of CPU, or of waiting; batch 8, 3 groups and 2 alternating at a "
              f"change, 10 ms of compute a step, {WORKER_STEPS} steps; the median of {rounds} runs each, "
              "alternated): the step rate at num_workers 0 (the read-ahead thread) and 2 (torch's worker processes, "
              "prefetch_factor 2: at most 4 shares in flight at a change). The ideal at 2 workers is 100 steps/s "
              "(compute-bound); at 0, 62 (the 16 ms read of a step). With 4 ms of compute the 2 workers are the "
              "bottleneck (125 shares/s at most): a change finds its shares in flight unread. Steady: the steps at "
              f"least {STEADY_AFTER} after a change. A change's cost: the time over a fixed world's for as many "
              "steps, per change, in ms and in share reads (one share's read measured in the main process). "
              "On this shared 2-core machine the CPU case has no core to spare for the workers.", "",
              "| transform | num_workers | membership | steps/s | steady steps/s | step at a change (ms) | "
              "a change's cost (ms) | in share reads | shares dropped |", "|---|---|---|---|---|---|---|---|---|"]
    for key, found in results["workers"].items():
        kind, workers, label = key.split(" | ")
        cost = (f"{found['change_cost_ms']:.1f} | {found['change_cost_reads']:.2f}" if "change_cost_ms" in found
                else "- | -")
        at = f"{found['change_step_ms']:.1f}" if found.get("changes") else "-"
        lines.append(f"| {kind} | {workers} | {label} | {found['steps_per_s']:.1f} | "
                     f"{found['steady_steps_per_s']:.1f} | {at} | {cost} | {found['dropped']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--cost-only", action="store_true", help="only 2 and 3; 1 from the last results")
    parser.add_argument("--workers-only", action="store_true", help="only 3; 1 and 2 from the last results")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case in 3 (the median kept)")
    args = parser.parse_args()
    results: dict[str, Any] = {"real": {}, "loader": {}, "workers": {}}
    if args.cost_only or args.workers_only:
        results["real"] = json.loads((RESULTS / "torchft.json").read_text())["real"]
    if args.workers_only:
        results["loader"] = json.loads((RESULTS / "torchft.json").read_text())["loader"]
    for name in () if args.cost_only or args.workers_only else ("killed and restarted", "lost for good"):
        for label, worker in (("torchft DistributedSampler", ROOT / "benchmarks" / "_torchft_sampler_worker.py"),
                              ("shufflepoint", ROOT / "tests" / "fault_tolerance" / "worker.py")):
            with tempfile.TemporaryDirectory() as folder:
                results["real"][f"{name} | {label}"] = found = scenario(name, worker, pathlib.Path(folder))
            print(name, "|", label, found, flush=True)
    if not args.workers_only:
        results["loader"]["fixed world"] = loader_cost(args.steps, None)
        results["loader"]["a change every 10 steps"] = loader_cost(args.steps, 10)
    workers_part(results, args.rounds)
    print(json.dumps({key: results[key] for key in ("loader", "workers")}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "torchft.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "torchft.md").write_text(report(results, args.rounds))


if __name__ == "__main__":
    main()

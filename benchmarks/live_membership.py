"""torchft's data path against shufflepoint's, side by side, for the same failures (issue 43; make bench-torchft).

1. Real torchft 0.2.0 (a Lighthouse, 3 replica groups of 1 process on Gloo, 240 samples, batch 4): a group SIGKILLed
   and restarted (healing from a peer), and a group lost for good, each run with torchft's own sampler
   (``torchft.DistributedSampler`` into torchdata's ``StatefulDataLoader``, its state in the Manager's state
   transfer: benchmarks/_torchft_sampler_worker.py) and with shufflepoint's (tests/fault_tolerance/worker.py).
   Counted the same way for both: the ids of the draws of every committed step's quorum; distinct, twice, never.
2. In one process, a simulated Manager: the loader's own cost of a step, steady and just after a membership
   change, and the step rate with a change every 10 steps against a fixed world (the loader only, no model).

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    results: dict[str, Any] = {"real": {}, "loader": {}}
    for name in ("killed and restarted", "lost for good"):
        for label, worker in (("torchft DistributedSampler", ROOT / "benchmarks" / "_torchft_sampler_worker.py"),
                              ("shufflepoint", ROOT / "tests" / "fault_tolerance" / "worker.py")):
            with tempfile.TemporaryDirectory() as folder:
                results["real"][f"{name} | {label}"] = found = scenario(name, worker, pathlib.Path(folder))
            print(name, "|", label, found, flush=True)
    results["loader"]["fixed world"] = loader_cost(args.steps, None)
    results["loader"]["a change every 10 steps"] = loader_cost(args.steps, 10)
    print(json.dumps(results["loader"], indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "torchft.json").write_text(json.dumps(results, indent=1) + "\n")
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
    (RESULTS / "torchft.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

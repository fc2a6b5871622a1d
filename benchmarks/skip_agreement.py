"""What ``skip_bad_samples`` costs a step on 2 Gloo ranks, and what a pipelined agreement would save.

    python benchmarks/skip_agreement.py        # writes benchmarks/results/skip_agreement.md

One torchrun launch of 2 ranks on Gloo over loopback. Each rank times, after a warm-up:

- the loader's step without and with ``skip_bad_samples`` (no sample fails: the pure cost of agreeing), batch 64
  of ints from a list, ``num_workers=0``;
- the agreement alone, as it is: a blocking all_reduce(MAX) of one int64 a step, with a step's work (``WORK_MS`` of
  sleep, a stand-in for the model) after it;
- that all_reduce *pipelined*: posted at step t (``async_op=True``) and waited at step t+1, with a step's work
  in between: what agreeing with a lag of one step would cost.

Medians over both ranks and all rounds. The box's 2 cores are shared, so absolute figures move with its load;
the ratios are the finding.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "skip_agreement.md")
ROUNDS, WORK_MS = 300, 2.0


def _worker(out: str) -> None:
    import torch
    import torch.distributed as dist

    import shufflepoint
    from shufflepoint._tools.launch import end_worker

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    found: dict[str, list[float]] = {}

    def loader_step(skip: bool) -> list[float]:
        ld = shufflepoint.DataLoader(list(range(64 * (ROUNDS + 20) * 2)), 64, seed=1, skip_bad_samples=skip)
        times, clock = [], time.perf_counter
        batches = iter(ld)
        for _ in range(20):
            next(batches)
        for _ in range(ROUNDS):
            start = clock()
            next(batches)
            times.append(clock() - start)
        return times

    dist.barrier()
    found["loader"] = loader_step(False)
    dist.barrier()
    found["loader_skip"] = loader_step(True)
    flag = torch.zeros(1, dtype=torch.int64)
    blocking, pipelined, clock = [], [], time.perf_counter
    for _ in range(ROUNDS):
        start = clock()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        blocking.append(clock() - start)
        time.sleep(WORK_MS / 1000)  # the step's work
    dist.barrier()
    pending = None
    for _ in range(ROUNDS):
        start = clock()
        if pending is not None:
            pending.wait()
        pending = dist.all_reduce(flag, op=dist.ReduceOp.MAX, async_op=True)
        pipelined.append(clock() - start)
        time.sleep(WORK_MS / 1000)  # the step's work: the collective completes meanwhile
    pending.wait()  # type: ignore[union-attr]
    found["all_reduce_blocking"], found["all_reduce_pipelined"] = blocking, pipelined
    with open(os.path.join(out, f"r{rank}.json"), "w") as f:
        json.dump(found, f)
    end_worker()


def main() -> None:
    from shufflepoint._tools.launch import launch

    out = tempfile.mkdtemp(prefix="skip_agreement_")
    launch([os.path.abspath(__file__), "--worker", out], 2, timeout=600).check()
    runs = [json.load(open(os.path.join(out, f"r{rank}.json"))) for rank in range(2)]
    median = {key: statistics.median([t for run in runs for t in run[key]]) * 1e6 for key in runs[0]}
    lines = [
        "# skip_bad_samples: the agreement's cost a step (2 Gloo ranks, loopback)",
        "",
        f"Medians of {ROUNDS} steps x 2 ranks, microseconds (`python benchmarks/skip_agreement.py`).",
        "",
        "| what | µs a step |",
        "|---|---|",
        f"| loader step, batch 64 of ints, no skip_bad_samples | {median['loader']:.0f} |",
        f"| the same with skip_bad_samples=True (nothing fails) | {median['loader_skip']:.0f} |",
        f"| the agreement alone: blocking all_reduce of one int64 ({WORK_MS:g} ms of work a step) | "
        f"{median['all_reduce_blocking']:.0f} |",
        f"| that all_reduce pipelined: posted at step t, waited at t+1 ({WORK_MS:g} ms of work between) | "
        f"{median['all_reduce_pipelined']:.0f} |",
    ]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    else:
        main()

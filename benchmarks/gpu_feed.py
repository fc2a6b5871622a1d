"""make bench-gpu: does shufflepoint keep one GPU fed? (issue 25.8)

    python benchmarks/gpu_feed.py [--device auto|cuda|cpu] [--tiny] [--workers 0,4,8] [--steps N] [--out FILE]

Where CUDA is absent, ``--device auto`` (the default) prints "no GPU" and exits 0: nothing is measured.
On a GPU it builds a Llama of ~125M parameters (bf16, sdpa) from a config, writes Parquet token shards
itself (deterministic, cached in ``--cache``), and measures, side by side in one run:

1. **synthetic**: the timed steps on batches already on the GPU (the same rows, read and copied
   before the clock starts): the step time with no data path at all;
2. **shufflepoint** at each ``--workers`` count: ``Packed`` rows of 2048 tokens from the shards through
   ``shufflepoint.DataLoader(pin_memory=True)``, copied with ``non_blocking``. Data wait = the time the
   loop spends in ``next(loader)`` and the copy call, as a share of the step time; the target is <= 1%.
   The first batch's wait (workers starting, shards opened) is reported apart;
3. **kill and resume** in deterministic mode (``torch.use_deterministic_algorithms``, eager attention):
   one process trains ``resume_steps`` steps; another trains ``stop_at`` steps, checkpoints model,
   optimizer and loader state, trains 2 more and SIGKILLs itself; a fresh process resumes from the
   checkpoint. The resumed losses must equal the whole run's, bit for bit. It times the data's way
   back: building ``Packed`` and the loader (token counts read from the cache), ``load_state_dict``,
   and the first batch on the device.

``--device cpu --tiny`` runs the same code at toy sizes on the CPU (a dry run, for the tests); its
numbers say nothing about a GPU. Results: a table on stdout and JSON in ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _gpu_feed_parts as parts  # noqa: E402

WAIT_TARGET = 0.01  # data wait as a share of step time


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="auto: cuda if present, else say 'no GPU' and exit 0")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (a CPU dry run of the same code)")
    parser.add_argument("--workers", default=None, help="comma-separated num_workers (default: 0,4,8; tiny 0,2)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    parser.add_argument("--cache", default=".bench-cache/gpu-feed", help="where the shards are written once")
    parser.add_argument("--out", default=None, help="JSON results (default: benchmarks/results/gpu_feed[-tiny].json)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # whole | kill | resume (internal)
    parser.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cpu" and not args.tiny:
        parser.error("--device cpu needs --tiny: a 125M-parameter model on 2048-token rows is a GPU job")
    return args


def setup_of(args: argparse.Namespace) -> parts.Setup:
    setup = parts.TINY if args.tiny else parts.FULL
    changes: dict[str, Any] = {}
    if args.workers is not None:
        try:
            changes["workers"] = tuple(int(w) for w in args.workers.split(","))
        except ValueError:
            raise SystemExit(f"--workers: found {args.workers!r}, expected integers like 0,4,8") from None
        if any(w < 0 for w in changes["workers"]):
            raise SystemExit(f"--workers: found {args.workers!r}, expected integers >= 0")
    if args.steps is not None:
        if args.steps < 1:
            raise SystemExit(f"--steps: found {args.steps}, expected an integer >= 1")
        changes["steps"] = args.steps
    return dataclasses.replace(setup, **changes)


def resolve_device(choice: str) -> str | None:
    """The device to run on, or None (no GPU, nothing to measure)."""
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else None
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False here (a CPU build of torch, or no "
                         "GPU); run it on a machine with a GPU, or --device cpu --tiny for a dry run")
    return choice


def timed_steps(llama: Any, optimizer: Any, batches: Any, setup: parts.Setup, device: Any) -> dict[str, Any]:
    """Warmup, then ``steps`` timed steps: per step the wait for data (next + copy) and the whole step."""
    waits, steps = [], []
    first_wait = None
    for index in range(setup.warmup + setup.steps):
        before = time.perf_counter()
        batch = parts.to_device(next(batches), device)
        fed = time.perf_counter()
        parts.train_step(llama, optimizer, batch)
        done = time.perf_counter()
        if index == 0:
            first_wait = fed - before
        if index >= setup.warmup:
            waits.append(fed - before)
            steps.append(done - before)
    step_time = sum(steps) / len(steps)
    return {"first_batch_wait_s": first_wait, "step_s": step_time, "wait_s": sum(waits) / len(waits),
            "wait_share": sum(waits) / sum(steps), "max_wait_s": max(waits)}


def measure_feed(setup: parts.Setup, folder: str, cache_dir: str, device_name: str) -> dict[str, Any]:
    import torch

    device = torch.device(device_name)
    llama, optimizer = parts.model(setup, device, attention="sdpa")
    dataset = parts.packed(folder, setup, cache_dir)
    reader = iter(parts.loader(dataset, setup, 0, device))  # the same rows, on the device before timing
    resident = [parts.to_device(next(reader), device) for _ in range(setup.warmup + setup.steps)]
    if device.type == "cuda":
        torch.cuda.synchronize()
    results = {"synthetic": timed_steps(llama, optimizer, iter(resident), setup, device)}
    del resident
    for workers in setup.workers:
        batches = iter(parts.loader(dataset, setup, workers, device))
        results[f"workers={workers}"] = timed_steps(llama, optimizer, batches, setup, device)
    base = results["synthetic"]["step_s"]
    for name, row in results.items():
        row["step_vs_synthetic"] = row["step_s"] / base
        row["meets_target"] = name == "synthetic" or row["wait_share"] <= WAIT_TARGET
    results["parameters"] = sum(p.numel() for p in llama.parameters())
    return results


def run_child(mode: str, args: argparse.Namespace, device_name: str, checkpoint: str) -> subprocess.CompletedProcess:
    command = [sys.executable, os.path.abspath(__file__), "--child", mode, "--checkpoint", checkpoint,
               "--device", device_name, "--cache", args.cache] + (["--tiny"] if args.tiny else [])
    if args.workers is not None:
        command += ["--workers", args.workers]
    environment = os.environ | {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # before CUDA starts: deterministic GEMMs
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=1800)


def kill_and_resume(args: argparse.Namespace, device_name: str) -> dict[str, Any]:
    """Three fresh processes: whole, killed after its checkpoint, resumed from it. Losses compared bitwise."""
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = os.path.join(scratch, "checkpoint.pt")
        outputs = {}
        for mode in ("whole", "kill", "resume"):
            finished = run_child(mode, args, device_name, checkpoint)
            expected = -9 if mode == "kill" else 0
            if finished.returncode != expected:
                raise RuntimeError(f"the {mode} process exited with {finished.returncode}, expected {expected}:\n"
                                   f"{finished.stderr[-3000:]}")
            source = f"{checkpoint}.losses.json" if mode == "kill" else None
            if source is not None:
                with open(source) as f:
                    outputs[mode] = json.load(f)
            else:
                outputs[mode] = json.loads(finished.stdout.strip().splitlines()[-1])
    setup = setup_of(args)
    whole, killed, resumed = (outputs[m]["losses"] for m in ("whole", "kill", "resume"))
    return {"stop_at": setup.stop_at, "steps": setup.resume_steps, "workers": setup.resume_workers,
            "killed_run_equal_before_the_kill": killed == whole[:len(killed)],
            "resumed_losses_bitwise_equal": resumed == whole[setup.stop_at:],
            "resume_s": outputs["resume"]["resume_s"], "whole_losses": whole, "resumed_losses": resumed}


def report(results: dict[str, Any], setup: parts.Setup, device: str) -> str:
    lines = [f"device {device}; {results['feed']['parameters'] / 1e6:.1f}M parameters; rows of {setup.seq_len} "
             f"tokens x batch {setup.batch}; {setup.steps} timed steps after {setup.warmup}; load average "
             f"{results['load_average']}",
             f"{'feed':<12} {'step ms':>9} {'x synthetic':>12} {'wait ms':>9} {'wait %':>8} {'first ms':>9}  target"]
    for name, row in results["feed"].items():
        if name == "parameters":
            continue
        lines.append(f"{name:<12} {row['step_s'] * 1e3:>9.1f} {row['step_vs_synthetic']:>12.3f} "
                     f"{row['wait_s'] * 1e3:>9.2f} {row['wait_share'] * 100:>7.2f}% "
                     f"{row['first_batch_wait_s'] * 1e3:>9.1f}  {'ok' if row['meets_target'] else 'MISSED'}")
    resume = results["resume"]
    lines.append(f"kill at step {resume['stop_at'] + 2} (checkpoint {resume['stop_at']}), resumed to "
                 f"{resume['steps']}: losses bitwise equal: {resume['resumed_losses_bitwise_equal']}; "
                 + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in resume["resume_s"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = resolve_device(args.device)
    if device is None:
        print("no GPU: torch.cuda.is_available() is False here, so make bench-gpu measured nothing "
              "(run it on a machine with a GPU; `python benchmarks/gpu_feed.py --device cpu --tiny` is a dry run)")
        return 0
    setup = setup_of(args)
    folder = os.path.join(args.cache, "tiny" if args.tiny else "full")
    parts.write_shards(os.path.join(folder, "shards"), setup)
    if args.child is not None:
        result = parts.resume_child(args.child, os.path.join(folder, "shards"), os.path.join(folder, "index"),
                                    args.checkpoint, setup, device)
        print(json.dumps(result))
        return 0
    results: dict[str, Any] = {"setup": dataclasses.asdict(setup), "device": device,
                               "load_average": [round(x, 2) for x in os.getloadavg()]}
    results["feed"] = measure_feed(setup, os.path.join(folder, "shards"), os.path.join(folder, "index"), device)
    results["resume"] = kill_and_resume(args, device)
    print(report(results, setup, device))
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"gpu_feed{'-tiny' if args.tiny else ''}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

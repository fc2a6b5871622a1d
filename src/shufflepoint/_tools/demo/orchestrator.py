"""The demo's orchestrator: three launches of fresh processes, then the audit's judge on each variant."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from shufflepoint._tools import audit as _audit
from shufflepoint._tools.demo.report import import_matplotlib, plot_losses
from shufflepoint._tools.demo.variants import (
    BATCH,
    ELASTIC_BATCH,
    EPOCHS,
    NPROC,
    SAVE,
    VARIANTS,
    N,
    Variant,
    accelerate_available,
)


def _read(out: str, phase: str, names: list[str], nproc: int) -> list[dict[str, Any]]:
    records = []
    for rank in range(nproc):
        with open(os.path.join(out, f"{phase}_{'_'.join(names)}_r{rank}.json")) as f:
            records.append(json.load(f))
    return records


def _compare_weights(out: str, name: str) -> tuple[bool, float]:
    import torch

    source = "shufflepoint" if name == "elastic" else name
    reference = torch.load(os.path.join(out, f"weights_reference_{source}.pt"), weights_only=True)
    resumed = torch.load(os.path.join(out, f"weights_resumed_{name}.pt"), weights_only=True)
    equal = all(torch.equal(reference[k], resumed[k]) for k in reference)
    largest = max(float((reference[k] - resumed[k]).abs().max()) for k in reference)
    return equal, largest


def run_demo(out: str, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the demo; returns the result dict (``render`` turns it into the table)."""
    started = time.monotonic()
    out = os.path.abspath(out)
    run_dir = os.path.join(out, "run")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(os.path.join(run_dir, "checkpoints"))
    have_accelerate = accelerate_available()
    variants = [v for v in VARIANTS if have_accelerate or not v.needs_accelerate]
    two = [v.name for v in variants if v.name != "elastic"]
    progress(f"shufflepoint demo: {', '.join(v.label for v in variants)}; {NPROC} processes on Gloo, "
             f"{EPOCHS} epochs of {N} samples, checkpoint at epoch {SAVE.epoch} after {SAVE.step} steps")
    if not have_accelerate:
        progress("  (Accelerate or torchdata is not installed: the Accelerate variants are skipped)")
    timings = _launch_phases(run_dir, two, started, progress)
    reference = _read(run_dir, "run", two, NPROC)
    interrupted = [{k: torch_load_record(run_dir, k, r) for k in two} for r in range(NPROC)]
    resumed = {"two": _read(run_dir, "resume", two, NPROC), "elastic": _read(run_dir, "resume", ["elastic"], 1)}
    rows = []
    curves = {}
    for variant in variants:
        row, curve = _judge_variant(variant, run_dir, reference, interrupted, resumed)
        rows.append(row)
        curves[variant.label] = curve
    plot, plot_note = plot_losses(curves, os.path.join(out, "demo_loss.png"))
    wall = time.monotonic() - started
    return {
        "schema_version": 1,
        "exit_code": 0 if all(r["as_expected"] for r in rows) else 1,
        "variants": rows,
        "plot": plot,
        "plot_note": plot_note,
        "checkpoints": os.path.join(run_dir, "checkpoints"),
        "setup": {"processes": NPROC, "epochs": EPOCHS, "samples": N, "batch_size": BATCH,
                  "save_at": {"epoch": SAVE.epoch, "step": SAVE.step}, "elastic_batch_size": ELASTIC_BATCH},
        "wall_time_s": round(wall, 1),
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
    }


def _launch_phases(run_dir: str, two: list[str], started: float, progress: Callable[[str], None]) -> dict[str, float]:
    """The three launches: run (reference, then checkpoint and SIGKILL), resume, and the elastic
    resume concurrently with it. Returns each launch's wall time."""
    from shufflepoint._tools.launch import launch

    target = ["-m", "shufflepoint._tools.demo"]
    timings: dict[str, float] = {}

    def step(label: str, key: str, phase: str, names: list[str], nproc: int, kill: bool = False) -> None:
        begin = time.monotonic()
        progress(f"[{begin - started:5.1f}s] {label} ...")
        result = launch([*target, phase, run_dir, *names], nproc, timeout=300,
                        kill_when=os.path.join(run_dir, "interrupt.saved") if kill else None)
        timings[key] = time.monotonic() - begin
        if not result.killed:
            result.check()
        how = "SIGKILLed right after the checkpoint" if result.killed else "done"
        progress(f"[{time.monotonic() - started:5.1f}s] {label}: {how}")

    plotting = threading.Thread(target=import_matplotlib, daemon=True)  # meanwhile, while workers run
    plotting.start()
    step(f"uninterrupted runs, then runs checkpointed at epoch {SAVE.epoch} step {SAVE.step} and SIGKILLed",
         "run", "run", two, NPROC, kill=True)
    elastic_error: list[BaseException] = []

    def elastic() -> None:
        try:
            step("elastic resume in 1 new process", "elastic", "resume", ["elastic"], 1)
        except BaseException as error:  # re-raised below, in the main thread
            elastic_error.append(error)

    thread = threading.Thread(target=elastic)
    thread.start()
    step("resumed in 2 new processes", "resume", "resume", two, NPROC)
    thread.join()
    if elastic_error:
        raise elastic_error[0]
    return timings


Curve = tuple[list[float], list[float], int, str]


def _judge_variant(variant: Variant, run_dir: str, reference: list[dict[str, Any]],
                   interrupted: list[dict[str, Any]], resumed: dict[str, list[dict[str, Any]]],
                   ) -> tuple[dict[str, Any], Curve]:
    """One variant's row of the table (verdict, weights) and its loss curves."""
    source = "shufflepoint" if variant.name == "elastic" else variant.name
    ref_streams = [reference[r][source]["passes"] for r in range(NPROC)]
    new = resumed["elastic"] if variant.name == "elastic" else resumed["two"]
    new_streams = [record[variant.name]["passes"] for record in new]
    judgement = _audit.judge(ref_streams, new_streams, SAVE, dataset_length=N, drop_last=False)
    before = [interrupted[r][source]["passes"] for r in range(NPROC)]
    reason = _audit.check_reproducible(ref_streams, before, SAVE)
    if reason is not None:
        judgement.verdict, judgement.summary = _audit.DIVERGED, reason
    equal, largest = _compare_weights(run_dir, variant.name)
    ok = judgement.verdict == variant.expected and equal == variant.weights_equal
    if variant.name == "stock" and judgement.verdict == _audit.EXACT:
        ok = True  # an Accelerate release without the bug: nothing to show, nothing wrong
    row = {
        "variant": variant.name, "label": variant.label, "verdict": judgement.verdict,
        "expected_verdict": variant.expected, "summary": judgement.summary,
        "weights_identical": equal, "weights_max_abs_diff": largest,
        "weights_expected_identical": variant.weights_equal, "as_expected": ok,
    }
    curve = (reference[0][source]["losses"], interrupted[0][source]["losses"] + new[0][variant.name]["losses"],
             len(interrupted[0][source]["losses"]), judgement.verdict)
    return row, curve


def torch_load_record(run_dir: str, name: str, rank: int) -> dict[str, Any]:
    """The interrupted run's record, from inside its checkpoint (it was killed before writing more)."""
    import torch

    checkpoint = torch.load(os.path.join(run_dir, "checkpoints", f"{name}_r{rank}.pt"), weights_only=False)
    return cast(dict[str, Any], checkpoint["record"])

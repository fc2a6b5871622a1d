"""``shufflepoint demo``: the seed's bug and its fixes, in real processes, in under a minute.

A tiny model is trained for 2 epochs on a synthetic regression set by 2 processes on Gloo,
checkpointed mid-epoch 1 (model, optimizer, loader state), SIGKILLed, and resumed in new
processes, once per variant:

- ``stock``: Accelerate with ``use_stateful_dataloader=True`` (the seed's setup, when installed)
- ``patched``: the same with ``shufflepoint.patch_accelerate()``
- ``shufflepoint``: ``shufflepoint.DataLoader`` with plain DDP
- ``elastic``: the ``shufflepoint`` checkpoint resumed by 1 process (batch 8 instead of 2 x 4)

Three launches, each running every variant it can (a launch costs seconds, a variant
milliseconds): 2 processes that run each variant uninterrupted (the reference) and then again from
scratch up to the checkpoint, and are SIGKILLed right after the last checkpoint is written; 2 new
processes that resume every variant; and, concurrently, 1 new process for the elastic resume.
The reference and the interrupted run share processes (each built from scratch); that both
served the same batches up to the checkpoint is checked. The data order is judged with the
audit's judge; the final weights are compared with the uninterrupted run's, bit for bit.

The worker side of this module runs as ``python -m shufflepoint._demo PHASE OUT`` under torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shufflepoint import _audit

N, BATCH, EPOCHS, FEATURES, SEED = 96, 4, 2, 8, 1234
SAVE = _audit.SavePoint(epoch=1, step=5)
NPROC = 2
ELASTIC_BATCH = 8  # 1 process x 8 = the same global batch as 2 x 4


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    expected: str  # the verdict the demo expects
    weights_equal: bool  # whether the final weights should equal the uninterrupted run's
    needs_accelerate: bool


VARIANTS = (
    Variant("stock", "stock Accelerate", _audit.ORDER_LOST, False, True),
    Variant("patched", "Accelerate + patch_accelerate()", _audit.EXACT, True, True),
    Variant("shufflepoint", "shufflepoint.DataLoader", _audit.EXACT, True, False),
    Variant("elastic", "elastic 2 -> 1 (shufflepoint)", _audit.EXACTLY_ONCE, False, False),
)


def accelerate_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("accelerate", "torchdata"))


# ----------------------------------------------------------------------------------------------
# Worker: runs inside the launched processes
# ----------------------------------------------------------------------------------------------


def _dataset() -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    features = torch.randn(N, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.tanh(features @ weights) + 0.05 * torch.randn(N, 1, generator=generator)
    return TensorDataset(torch.arange(N), features, targets)


def _model() -> Any:
    import torch

    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


class _Run:
    """One variant's model, optimizer and loader, built the way its user would build them."""

    def __init__(self, variant: str, batch_size: int = BATCH) -> None:
        import torch

        self.variant = variant
        dataset = _dataset()
        if variant in ("stock", "patched"):
            from accelerate import Accelerator, DataLoaderConfiguration
            from torch.utils.data import DataLoader

            accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
                use_stateful_dataloader=True))
            model = _model()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
            self.model, self.optimizer, self.loader = accelerator.prepare(model, optimizer, loader)
            self.module = accelerator.unwrap_model(self.model)
            self.backward = accelerator.backward
        else:
            import torch.distributed as dist

            import shufflepoint

            if not dist.is_initialized():
                dist.init_process_group("gloo")
            self.module = _model()
            self.model = torch.nn.parallel.DistributedDataParallel(self.module)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
            self.loader = shufflepoint.DataLoader(dataset, batch_size=batch_size, seed=SEED)
            self.backward = lambda loss: loss.backward()

    def train(self, start_epoch: int, record: dict[str, Any], stop_at: _audit.SavePoint | None = None) -> bool:
        """The user's loop. Returns True when it stopped at ``stop_at``."""
        import torch
        import torch.distributed as dist

        world = dist.get_world_size()
        for epoch in range(start_epoch, EPOCHS):
            batches: list[list[int]] = []
            record["passes"].append(batches)
            for ids, features, targets in self.loader:
                loss = torch.nn.functional.mse_loss(self.model(features), targets)
                self.backward(loss)
                self.optimizer.step()
                self.optimizer.zero_grad()
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                record["losses"].append(mean.item() / world)
                batches.append(ids.tolist())
                if stop_at is not None and epoch == stop_at.epoch and len(batches) == stop_at.step:
                    return True
        return False

    def checkpoint(self, epoch: int, record: dict[str, Any]) -> dict[str, Any]:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "loader": self.loader.state_dict(), "epoch": epoch, "record": record}

    def restore(self, checkpoint: dict[str, Any]) -> None:
        self.module.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.loader.load_state_dict(checkpoint["loader"])


def _save(path: str, payload: Any) -> None:
    import torch

    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _variant_scope(name: str) -> Any:
    """patch_accelerate() for the patched variant only, undone after it: one process runs both."""
    import contextlib

    if name != "patched":
        return contextlib.nullcontext()
    import shufflepoint

    @contextlib.contextmanager
    def patched() -> Any:
        shufflepoint.patch_accelerate()
        try:
            yield
        finally:
            shufflepoint.unpatch_accelerate()

    return patched()


def worker_main(argv: list[str]) -> int:
    """``PHASE OUT VARIANT...``: run each variant's part of PHASE, write OUT/<phase>_r<rank>.json."""
    phase, out, names = argv[0], argv[1], argv[2:]
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", message=".*set_vital.*")
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    results: dict[str, Any] = {}
    for name in names:
        record: dict[str, Any] = {"passes": [], "losses": []}
        with _variant_scope(name):
            if phase == "run":  # the uninterrupted reference, then a fresh run that is checkpointed
                run = _Run(name)
                run.train(0, record)
                if rank == 0:
                    _save(os.path.join(out, f"weights_reference_{name}.pt"), run.module.state_dict())
                interrupted: dict[str, Any] = {"passes": [], "losses": []}
                run = _Run(name)
                run.train(0, interrupted, stop_at=SAVE)
                _save(os.path.join(out, "checkpoints", f"{name}_r{rank}.pt"), run.checkpoint(SAVE.epoch, interrupted))
            else:  # resume: fresh processes, the checkpoint of this rank (elastic: of old rank 0)
                source = "shufflepoint" if name == "elastic" else name
                run = _Run(source, batch_size=ELASTIC_BATCH if name == "elastic" else BATCH)
                checkpoint = torch.load(os.path.join(out, "checkpoints", f"{source}_r{rank}.pt"),
                                        weights_only=False)
                run.restore(checkpoint)
                run.train(checkpoint["epoch"], record)
                if rank == 0:
                    _save(os.path.join(out, f"weights_resumed_{name}.pt"), run.module.state_dict())
        results[name] = record
    with open(os.path.join(out, f"{phase}_{'_'.join(names)}_r{rank}.json"), "w") as f:
        json.dump(results, f)
    if phase == "run":
        open(os.path.join(out, f"interrupt_saved_r{rank}"), "w").close()
        world = dist.get_world_size()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for the SIGKILL, as a preempted job would
            if rank == 0 and all(os.path.exists(os.path.join(out, f"interrupt_saved_r{r}")) for r in range(world)):
                open(os.path.join(out, "interrupt.saved"), "w").close()
            time.sleep(0.02)
        return 3
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------------------------
# Orchestrator: the command
# ----------------------------------------------------------------------------------------------


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
    from shufflepoint._launch import launch

    started = time.monotonic()
    out = os.path.abspath(out)
    run_dir = os.path.join(out, "run")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(os.path.join(run_dir, "checkpoints"))
    have_accelerate = accelerate_available()
    variants = [v for v in VARIANTS if have_accelerate or not v.needs_accelerate]
    two = [v.name for v in variants if v.name != "elastic"]
    target = ["-m", "shufflepoint._demo"]
    timings: dict[str, float] = {}
    progress(f"shufflepoint demo: {', '.join(v.label for v in variants)}; {NPROC} processes on Gloo, "
             f"{EPOCHS} epochs of {N} samples, checkpoint at epoch {SAVE.epoch} after {SAVE.step} steps")
    if not have_accelerate:
        progress("  (Accelerate or torchdata is not installed: the Accelerate variants are skipped)")

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

    plotting = threading.Thread(target=_import_matplotlib, daemon=True)  # meanwhile, while workers run
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

    reference = _read(run_dir, "run", two, NPROC)
    interrupted = [{k: torch_load_record(run_dir, k, r) for k in two} for r in range(NPROC)]
    resumed = _read(run_dir, "resume", two, NPROC)
    resumed_elastic = _read(run_dir, "resume", ["elastic"], 1)
    rows = []
    curves = {}
    for variant in variants:
        source = "shufflepoint" if variant.name == "elastic" else variant.name
        ref_streams = [reference[r][source]["passes"] for r in range(NPROC)]
        new = resumed_elastic if variant.name == "elastic" else resumed
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
        rows.append({
            "variant": variant.name, "label": variant.label, "verdict": judgement.verdict,
            "expected_verdict": variant.expected, "summary": judgement.summary,
            "weights_identical": equal, "weights_max_abs_diff": largest,
            "weights_expected_identical": variant.weights_equal, "as_expected": ok,
        })
        curves[variant.label] = (reference[0][source]["losses"],
                                 interrupted[0][source]["losses"] + new[0][variant.name]["losses"],
                                 len(interrupted[0][source]["losses"]), judgement.verdict)
    plot, plot_note = _plot(curves, os.path.join(out, "demo_loss.png"))
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


def torch_load_record(run_dir: str, name: str, rank: int) -> dict[str, Any]:
    """The interrupted run's record, from inside its checkpoint (it was killed before writing more)."""
    import torch

    return torch.load(os.path.join(run_dir, "checkpoints", f"{name}_r{rank}.pt"), weights_only=False)["record"]


def _import_matplotlib() -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass


def _plot(curves: dict[str, tuple[list, list, int, str]], path: str) -> tuple[str | None, str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "no plot: matplotlib is not installed (pip install 'shufflepoint[plot]')"
    figure, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), sharey=True, squeeze=False)
    for axis, (label, (reference, resumed, cut, verdict)) in zip(axes[0], curves.items(), strict=True):
        axis.plot(range(1, len(reference) + 1), reference, color="#444444", lw=2.2, label="uninterrupted")
        axis.plot(range(cut + 1, len(resumed) + 1), resumed[cut:], color="#d62728" if verdict not in
                  _audit.PASSING else "#2ca02c", lw=1.4, ls="--", marker=".", label="resumed after SIGKILL")
        axis.axvline(cut + 0.5, color="#888888", ls=":", lw=1)
        axis.annotate("checkpoint,\nSIGKILL", (cut + 0.5, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(-4, -4), textcoords="offset points", ha="right", va="top", fontsize=7,
                      color="#666666")
        axis.set_title(f"{label}\n{verdict}", fontsize=10)
        axis.set_xlabel("training step")
        axis.legend(fontsize=8, loc="upper right")
    axes[0][0].set_ylabel("loss (mean over ranks)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path, f"loss per step, uninterrupted vs resumed: {path}"


def render(result: dict[str, Any]) -> str:
    setup = result["setup"]
    lines = [
        "",
        f"shufflepoint demo: {setup['processes']} processes, {setup['epochs']} epochs, checkpoint at epoch "
        f"{setup['save_at']['epoch']} step {setup['save_at']['step']}, SIGKILL, resume in new processes",
        "",
        f"  {'variant':<33} {'data order':<13} {'final weights vs uninterrupted':<40}",
        f"  {'-' * 33} {'-' * 13} {'-' * 40}",
    ]
    for row in result["variants"]:
        if row["weights_identical"]:
            weights = "identical, bit for bit"
        elif row["variant"] == "elastic":
            weights = f"differ by {row['weights_max_abs_diff']:.1e} (expected)"
        else:
            weights = f"DIFFER (max |diff| {row['weights_max_abs_diff']:.1e})"
        flag = "" if row["as_expected"] else "   <- unexpected"
        lines.append(f"  {row['label']:<33} {row['verdict']:<13} {weights}{flag}")
    lines.append("")
    for row in result["variants"]:
        lines.append(f"  {row['label']}: {row['summary']}")
    if any(r["variant"] == "elastic" for r in result["variants"]):
        lines.append("  (elastic: 1 process x batch 8 takes the same global batches as 2 x 4, but averages "
                     "the gradient in another order, so the weights are close, not equal)")
    lines += ["", f"  {result['plot_note']}",
              f"  checkpoints to look at: shufflepoint inspect {result['checkpoints']}/stock_r0.pt",
              f"  wall time {result['wall_time_s']:.1f}s"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))

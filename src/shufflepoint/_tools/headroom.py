"""``shufflepoint headroom TARGET``: a data pipeline run alone, with no model, at 0..N workers: how many batches a
second it can serve, and which stage bounds it.

TARGET's factory takes ``num_workers`` and returns a ``shufflepoint.DataLoader``. For each worker count the loader
serves ``--warmup`` batches, then ``--batches`` timed ones, each moved to ``--device`` as a training step would move
it. Its data wait (``loader.data_wait()``, ``_loading/wait.py``) says where each batch's time went; the move is
timed here. The stages, per batch::

    read       dataset[i] / __getitems__ (a corpus's decode included)      in the workers (or the loop, 0 workers)
    transform  transform=                                                  in the workers
    collate    collate_fn                                                  in the workers
    transfer   pin_memory and the copy to the device                       in the loop's process

The bound: without workers every stage takes its turn in the loop, so the slowest stage bounds the rate. With N
workers, the workers' stages run N at a time: the transfer bounds the rate when it takes longer than a batch's
worker time over N, else the slowest of the workers' stages does.

Words: docs/glossary.md (data wait, headroom, bound stage).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from shufflepoint._loading.loader import DataLoader
from shufflepoint._loading.wait import DataWait

STAGES = ("read", "transform", "collate", "transfer")


class HeadroomError(ValueError):
    """A TARGET or an option headroom cannot use (exit 2)."""


@dataclass(frozen=True)
class Headroom:
    """One worker count's run: batches a second, each stage's seconds a batch, and the stage that bounds it."""

    workers: int
    batches_per_s: float
    stage_s: dict[str, float]
    bound: str

    def to_json(self) -> dict[str, Any]:
        return {"workers": self.workers, "batches_per_s": round(self.batches_per_s, 2),
                "stage_ms": {stage: round(1e3 * s, 3) for stage, s in self.stage_s.items()}, "bound": self.bound}


def bound_stage(stage_s: dict[str, float], workers: int) -> str:
    """The stage that bounds the rate (see the module): the slowest, with the workers' stages shared by N.

    >>> bound_stage({"read": 0.02, "transform": 0.0, "collate": 0.001, "transfer": 0.005}, 0)
    'read'
    >>> bound_stage({"read": 0.02, "transform": 0.0, "collate": 0.001, "transfer": 0.005}, 8)
    'transfer'
    """
    in_workers = {stage: stage_s[stage] for stage in ("read", "transform", "collate")}
    if workers == 0:
        return max(STAGES, key=lambda stage: stage_s[stage])
    if stage_s["transfer"] >= sum(in_workers.values()) / workers:
        return "transfer"
    return max(in_workers, key=lambda stage: in_workers[stage])


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` on ``device`` as a training step moves it: tensors (in dicts, lists, tuples) or ``batch.to``."""
    if isinstance(batch, torch.Tensor) or (not isinstance(batch, (dict, list, tuple)) and callable(
            getattr(batch, "to", None))):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(value, device) for value in batch]
        named = hasattr(batch, "_fields")  # private: a namedtuple is built from its fields, not from one iterable
        return type(batch)(*moved) if named else type(batch)(moved)
    return batch


class _Serving:
    """One iterator of the loader, as a training loop holds it (the warmup's workers serve the timed batches),
    and the next epoch's where one ends."""

    def __init__(self, loader: DataLoader, device: torch.device) -> None:
        self.loader, self.device, self.batches = loader, device, iter(loader)

    def take(self, count: int) -> float:
        """Take ``count`` batches, each moved to the device; the move's seconds."""
        moved_s = 0.0
        for _ in range(count):
            batch = next(self.batches, None)
            if batch is None:
                self.batches = iter(self.loader)
                batch = next(self.batches, None)
                if batch is None:
                    raise HeadroomError("the loader served no batch: its epoch is empty")
            start = time.perf_counter()
            to_device(batch, self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            moved_s += time.perf_counter() - start
        return moved_s


def measure(factory: Callable[..., Any], workers: int, batches: int, warmup: int, device: str) -> Headroom:
    """Run the pipeline ``factory(num_workers=workers)`` builds alone (see the module)."""
    loader = factory(num_workers=workers)
    if not isinstance(loader, DataLoader):
        raise HeadroomError(f"TARGET: found a {type(loader).__name__}, expected a shufflepoint.DataLoader "
                            "(only it measures its data wait); return one from factory(num_workers=...)")
    serving = _Serving(loader, torch.device(device))
    serving.take(warmup)
    before, start = loader.data_wait(), time.perf_counter()
    moved_s = serving.take(batches)
    elapsed = time.perf_counter() - start
    window: DataWait = loader.data_wait() - before
    count = max(window.batches, 1)
    stage_s = {"read": sum(w.read_s for w in window.workers) / count,
               "transform": sum(w.transform_s for w in window.workers) / count,
               "collate": sum(w.collate_s for w in window.workers) / count,
               "transfer": (window.pin_s + moved_s) / count}
    return Headroom(workers, batches / elapsed if elapsed > 0 else float("inf"), stage_s, bound_stage(stage_s, workers))


def run_headroom(factory: Callable[..., Any], workers: Sequence[int], batches: int, warmup: int,
                 device: str) -> dict[str, Any]:
    """Every worker count's ``Headroom``, and the best one's rate and bound."""
    runs = [measure(factory, count, batches, warmup, device) for count in workers]
    best = max(runs, key=lambda run: run.batches_per_s)
    return {"schema_version": 1, "command": "headroom", "device": device, "batches": batches,
            "runs": [run.to_json() for run in runs], "best": best.to_json(), "exit_code": 0}


def render(found: dict[str, Any]) -> str:
    lines = [f"{'workers':>7}  {'batches/s':>10}  " + "  ".join(f"{stage + ' ms':>12}" for stage in STAGES)
             + "  bound"]
    for run in found["runs"]:
        lines.append(f"{run['workers']:>7}  {run['batches_per_s']:>10.1f}  "
                     + "  ".join(f"{run['stage_ms'][stage]:>12.3f}" for stage in STAGES) + f"  {run['bound']}")
    best = found["best"]
    lines.append(f"best: {best['batches_per_s']:.1f} batches/s at {best['workers']} workers, bound by "
                 f"{best['bound']} (stage times are per batch, summed over the workers; on {found['device']})")
    return "\n".join(lines)

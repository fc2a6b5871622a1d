"""What runs inside each process the audit launches. It records; it never judges.

    python -m torch.distributed.run --nproc_per_node=N -m shufflepoint._tools.audit.worker PHASE \\
        --target MODULE_OR_FILE:FACTORY (--file-target | --module-target) --out DIR \\
        --epochs E --save-at EPOCH:STEP [--sample-id MODULE:FN]

Phases (each writes DIR/<phase>_r<rank>.json):

- ``record``: run E epochs uninterrupted; at the save point write ``loader.state_dict()`` to
  DIR/state_r<rank>.pt and go on.
- ``reference``: run E epochs uninterrupted, save nothing (the reference when ``--kill``).
- ``interrupt``: run to the save point, save, tell the launcher (DIR/interrupt.saved, once every
  rank has saved) and wait to be SIGKILLed.
- ``resume``: build the loader anew, load the saved state (rank r loads old rank r's file, or
  rank 0's when there was no rank r), record every pass up to epoch E - 1.

The loop each phase drives is the plainest training loop for the loader:

    for epoch in range(start, E):
        if the loader has no set_epoch of its own and its sampler has one:
            loader.sampler.set_epoch(epoch)           # DistributedSampler's contract
        for batch in loader: record(batch)

A loader that tracks its epoch itself (Accelerate's prepared loaders, shufflepoint.DataLoader)
is given nothing but its own state: that is what is being audited.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from shufflepoint._tools.audit import SavePoint, Target, UsageError, load_target, parse_save_at, sample_ids
from shufflepoint._tools.audit.exclusion import exclude_at_save
from shufflepoint._tools.audit.identity import sample_digests
from shufflepoint._tools.audit.trainer import TrainerRun, describe, is_trainer
from shufflepoint._tools.launch import end_worker


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _atomic_write(path: str, write: Any) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    write(tmp)
    os.replace(tmp, path)


def _write_json(path: str, payload: dict[str, Any]) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(payload, f)

    _atomic_write(path, write)


def _samplers(loader: Any) -> list[Any]:
    """The samplers a training loop would call set_epoch on, for loaders that do not do it."""
    if hasattr(loader, "set_epoch"):
        return []  # the loader keeps its own epoch (Accelerate, shufflepoint.DataLoader)
    found = []
    for candidate in (getattr(loader, "sampler", None),
                      getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if candidate is not None and hasattr(candidate, "set_epoch") and candidate not in found:
            found.append(candidate)
    return found


def _begin_epoch(loader: Any, epoch: int) -> None:
    for sampler in _samplers(loader):
        sampler.set_epoch(epoch)


def _dataset_length(loader: Any) -> int | None:
    dataset = getattr(loader, "dataset", None)
    try:
        return int(len(dataset)) if dataset is not None else None
    except TypeError:
        return None


def _drop_last(loader: Any) -> bool | None:
    for name in ("_drop_last", "drop_last"):  # Accelerate keeps the user's value in _drop_last
        value = loader.__dict__.get(name) if hasattr(loader, "__dict__") else None
        if isinstance(value, bool):
            return value
    value = getattr(loader, "drop_last", None)
    return value if isinstance(value, bool) else None


def _batch_size(loader: Any) -> int | None:
    """Per-rank batch size, when the loader says so."""
    value = getattr(loader, "batch_size", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.save: SavePoint = parse_save_at(args.save_at)
        self.out = args.out
        self.record: dict[str, Any] = {"rank": self.rank, "world_size": self.world_size, "phase": args.phase,
                                       "error": None, "warnings": []}
        self.identify: Callable[[Any], Any] = sample_ids

    def state_path(self, rank: int) -> str:
        return os.path.join(self.out, f"state_r{rank}.pt")

    def build(self) -> Any:
        module, _, attribute = self.args.target.rpartition(":")
        target = Target(self.args.target, module, attribute, self.args.file_target)
        try:
            factory = load_target(target)
            if self.args.sample_id:
                spec_module, _, spec_attribute = self.args.sample_id.rpartition(":")
                is_file = spec_module.endswith(".py") or os.sep in spec_module
                self.identify = load_target(Target(self.args.sample_id, os.path.abspath(spec_module) if is_file
                                                   else spec_module, spec_attribute, is_file))
        except UsageError as error:
            raise _Failure("usage", str(error)) from None
        except Exception as error:
            raise _Failure("usage", f"importing TARGET {target.text!r} failed: {type(error).__name__}: "
                                    f"{error}") from error
        loader = factory()
        if is_trainer(loader):  # a Hugging Face Trainer: its own loop and checkpoints are audited
            self.record.update(describe(loader))
            return loader
        for method in ("state_dict", "load_state_dict"):
            if not callable(getattr(loader, method, None)):
                raise _Failure("usage", f"TARGET {target.text!r} returned a {type(loader).__module__}."
                                        f"{type(loader).__qualname__}, which has no {method}(); the audit "
                                        "needs a loader that checkpoints (an Accelerate-prepared DataLoader with "
                                        "use_stateful_dataloader=True, torchdata's StatefulDataLoader, "
                                        "shufflepoint.DataLoader)")
        self.record.update(
            loader=f"{type(loader).__module__}.{type(loader).__qualname__}",
            dataset_length=_dataset_length(loader), drop_last=_drop_last(loader),
            batch_size=_batch_size(loader),
        )
        return loader

    def ids(self, batch: Any) -> list[Any]:
        found = self.identify(batch)
        return [v if isinstance(v, (int, str)) and not isinstance(v, bool) else repr(v) for v in found]

    def observe(self, batch: Any, ids: list[list[Any]], digests: list[list[str] | None]) -> list[Any]:
        """Record a batch: its ids, and a digest of each sample's content (the content check)."""
        found = self.ids(batch)
        ids.append(found)
        digests.append(sample_digests(batch, len(found)))
        return found

    def save_state(self, loader: Any) -> None:
        import torch

        state = loader.state_dict()
        self.record["state_keys"] = sorted(map(str, state)) if isinstance(state, dict) else None
        _atomic_write(self.state_path(self.rank), lambda tmp: torch.save(state, tmp))

    def exclude_at_save(self, loader: Any) -> None:
        """``--exclude K``: exclude K samples right before the state is saved (``audit/exclusion.py``)."""
        if self.args.exclude:
            try:
                self.record["excluded_ids"] = exclude_at_save(loader, self.args.exclude, _dataset_length(loader),
                                                              self.ids)
            except UsageError as error:
                raise _Failure("usage", str(error)) from None

    def run_epochs(self, loader: Any, *, saving: bool, stop_at_save: bool) -> list[list[list[Any]]]:
        epochs: list[list[list[Any]]] = []
        contents: list[list[list[str] | None]] = []
        self.record["content"] = contents
        for epoch in range(self.args.epochs):
            at_save = epoch == self.save.epoch
            if at_save and self.save.step == 0:
                self.exclude_at_save(loader)
                if saving:
                    self.save_state(loader)
                    if stop_at_save:
                        return epochs + [[]]
            _begin_epoch(loader, epoch)
            batches: list[list[Any]] = []
            epochs.append(batches)
            contents.append([])
            for batch in loader:
                self.observe(batch, batches, contents[-1])
                if at_save and len(batches) == self.save.step:
                    self.exclude_at_save(loader)
                    if saving:
                        self.save_state(loader)
                        if stop_at_save:
                            return epochs
            if at_save and self.save.step >= max(len(batches), 1) and self.save.step > 0:
                raise _Failure("usage", f"--save-at {self.save}: epoch {epoch} has {len(batches)} batches on "
                                        f"rank {self.rank}; the step must be in 0..{len(batches) - 1}")
        return epochs

    def run(self) -> None:
        phase = self.args.phase
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = self.build()
            if is_trainer(loader) and self.args.exclude:
                raise _Failure("usage", "--exclude: a Trainer TARGET excludes with the ExcludeSamples callback; "
                                        "audit its train loader instead")
            if is_trainer(loader):
                self.run_trainer(loader)
            elif phase in ("record", "reference"):
                self.record["epochs"] = self.run_epochs(loader, saving=phase == "record", stop_at_save=False)
            elif phase == "interrupt":
                self.record["epochs"] = self.run_epochs(loader, saving=True, stop_at_save=True)
            else:
                self.resume(loader)
        self.record["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught
                                   if "set_vital" not in str(w.message)]

    def run_trainer(self, trainer: Any) -> None:
        """The phase for a Trainer TARGET (``audit.trainer``): its train() records, saves, resumes."""
        try:
            self._run_trainer(trainer)
        except UsageError as error:
            raise _Failure("usage", str(error)) from None

    def _run_trainer(self, trainer: Any) -> None:
        import torch

        phase, last = self.args.phase, self.args.epochs - 1
        run = TrainerRun(trainer, self.args.epochs, os.path.join(self.out, f"trainer-{phase}"), self.observe)
        if phase == "resume":
            source = self.rank if os.path.exists(self.state_path(self.rank)) else 0
            folder = torch.load(self.state_path(source), weights_only=False)["trainer_checkpoint"]
            self.record["loaded_state_of_rank"] = source
            run.train(None, stop=False, resume_from=folder)
            self.record["passes"], self.record["content_passes"] = run.epochs(self.save.epoch, last)
            self.record["replayed"] = run.replayed(self.save.epoch)
            return

        def saved(folder: str) -> None:
            if os.path.isdir(folder):
                self.record["state_keys"] = sorted(os.listdir(folder))
            _atomic_write(self.state_path(self.rank), lambda tmp: torch.save({"trainer_checkpoint": folder}, tmp))

        run.on_saved = saved
        run.train(None if phase == "reference" else self.save, stop=phase == "interrupt")
        upto = self.save.epoch if phase == "interrupt" else last
        self.record["epochs"], self.record["content"] = run.epochs(0, upto)

    def resume(self, loader: Any) -> None:
        import torch

        source = self.rank if os.path.exists(self.state_path(self.rank)) else 0
        state = torch.load(self.state_path(source), weights_only=False)
        loader.load_state_dict(state)
        self.record["loaded_state_of_rank"] = source
        passes: list[list[list[Any]]] = []
        contents: list[list[list[str] | None]] = []
        self.record["content_passes"] = contents
        for epoch in range(self.save.epoch, self.args.epochs):
            _begin_epoch(loader, epoch)
            passes.append([])
            contents.append([])
            for batch in loader:
                self.observe(batch, passes[-1], contents[-1])
        self.record["passes"] = passes

    def finish(self) -> None:
        _write_json(os.path.join(self.out, f"{self.args.phase}_r{self.rank}.json"), self.record)

    def wait_to_be_killed(self) -> None:
        open(os.path.join(self.out, f"interrupt_saved_r{self.rank}"), "w").close()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.rank == 0 and all(os.path.exists(os.path.join(self.out, f"interrupt_saved_r{r}"))
                                      for r in range(self.world_size)):
                open(os.path.join(self.out, "interrupt.saved"), "w").close()
            time.sleep(0.02)
        sys.exit(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shufflepoint._tools.audit.worker")
    parser.add_argument("phase", choices=("record", "reference", "interrupt", "resume"))
    parser.add_argument("--target", required=True)
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--file-target", action="store_true")
    kind.add_argument("--module-target", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--save-at", required=True)
    parser.add_argument("--sample-id", default=None)
    parser.add_argument("--exclude", type=int, default=0)
    args = parser.parse_args(argv)
    worker = Worker(args)
    try:
        worker.run()
    except _Failure as failure:
        worker.record["error"] = {"kind": failure.kind, "message": str(failure)}
        worker.finish()
        return 1
    except Exception as error:
        tail = "".join(traceback.format_exception(error)[-6:])
        worker.record["error"] = {"kind": "error", "message": f"{type(error).__name__}: {error}\n{tail}"}
        worker.finish()
        return 1
    worker.finish()
    if args.phase == "interrupt":
        worker.wait_to_be_killed()
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    end_worker(main(), together=False)

"""The demo's worker: trains each variant inside the launched processes and records what it served."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from shufflepoint._tools.audit.config import SavePoint
from shufflepoint._tools.demo.variants import BATCH, ELASTIC_BATCH, EPOCHS, FEATURES, SAVE, SEED, N
from shufflepoint._tools.launch import end_worker


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

    def train(self, start_epoch: int, record: dict[str, Any], stop_at: SavePoint | None = None) -> bool:
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
    end_worker()

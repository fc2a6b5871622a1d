"""Worker for tests/distributed/test_accelerate_native_resume.py: one launch runs many scenarios.

    python -m torch.distributed.run --nproc_per_node=2 accelerate_native_scenarios.py PHASE OUT NAME...

Every scenario prepares a ``shufflepoint.DataLoader`` with ``accelerator.prepare`` (patched).
PHASE is ``save`` (record an uninterrupted run, then run again and ``accelerator.save_state`` at
the scenario's point) or ``resume`` (fresh processes: ``accelerator.load_state`` and record what
follows, looping on ``loader.epoch``). Each step records the rank's sample ids and, per scenario,
what ``gather_for_metrics`` returned, ``sync_gradients`` inside ``accumulate()`` and
``end_of_dataloader``. Writes OUT/NAME/<phase>_r<rank>.json; nothing here judges.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch.utils.data import TensorDataset

import shufflepoint
from shufflepoint._tools.launch import end_worker

shufflepoint.patch_accelerate()

from accelerate import Accelerator  # noqa: E402

SEED, BS, EPOCHS = 1234, 4, 3

# name -> settings. save=(epoch, k): save_state after k batches of that epoch, inside the loop;
# k=None: after the epoch's loop ended; save=None: only the uninterrupted run is recorded.
SCENARIOS: dict[str, dict] = {
    "native_mid_epoch": dict(save=(1, 3)),
    "native_epoch0": dict(save=(0, 5)),
    "native_last_batch": dict(save=(1, 8)),
    "native_between_epochs": dict(save=(1, None)),
    "native_workers2": dict(save=(1, 3), num_workers=2),
    # 72 samples = 9 batches per rank: an odd count, so the epoch ends between accumulation steps
    "native_accumulate": dict(save=(1, 3), n=72, accumulate=2),
    # 67 = 8 * 8 + 3: the last step has 3 real samples, one rank gets a padded one
    "native_gather_tail": dict(save=(1, 5), n=67, gather=True),
    "native_gather_tail_workers2": dict(save=(0, 8), n=67, gather=True, num_workers=2),
    "native_drop_last": dict(save=(1, 3), n=67, drop_last=True, gather=True),
    # three processes, batch 2: 22 = 3 * 6 + 4, the padding sits in two ranks' parts (no prefix)
    "native_gather_tail_w3": dict(save=None, n=22, batch_size=2, gather=True),
}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def make(cfg: dict):
    """A fresh Accelerator, model, optimizer and prepared loader, as a user's script builds them."""
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=cfg.get("accumulate", 1))
    torch.manual_seed(SEED)
    n = cfg.get("n", 64)
    dataset = TensorDataset(torch.arange(n), torch.randn(n, 3))
    loader = shufflepoint.DataLoader(dataset, batch_size=cfg.get("batch_size", BS), seed=SEED,
                                     drop_last=cfg.get("drop_last", False),
                                     num_workers=cfg.get("num_workers", 0))
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader


def step(cfg: dict, accelerator, model, optimizer, batch) -> dict:
    ids, features = batch
    row: dict = {"ids": ids.tolist()}
    if cfg.get("accumulate"):
        with accelerator.accumulate(model):
            row["sync"] = accelerator.sync_gradients
            accelerator.backward(model(features).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
    if cfg.get("gather"):
        row["gathered"] = accelerator.gather_for_metrics(ids).tolist()
    row["end"] = accelerator.gradient_state.end_of_dataloader
    return row


def ckpt_dir(out: str, name: str) -> str:
    return os.path.join(out, name, "ckpt")


def run_save(name: str, cfg: dict, out: str) -> dict:
    objects = make(cfg)
    accelerator, model, optimizer, loader = objects
    reference = [[step(cfg, *objects[:3], batch) for batch in loader] for _ in range(EPOCHS)]
    record = {"reference": reference, "batches_per_epoch": len(loader), "epoch_after": loader.epoch}
    if cfg["save"] is None:
        return record
    objects = make(cfg)
    accelerator, model, optimizer, loader = objects
    epoch, k = cfg["save"]
    for _ in range(epoch):
        for batch in loader:
            step(cfg, *objects[:3], batch)
    if k is None:
        for batch in loader:
            step(cfg, *objects[:3], batch)
        accelerator.save_state(ckpt_dir(out, name))
    else:
        for index, batch in enumerate(loader):
            step(cfg, *objects[:3], batch)
            if index + 1 == k:
                accelerator.save_state(ckpt_dir(out, name))
                break
    record["saved_files"] = sorted(os.listdir(ckpt_dir(out, name)))
    return record


def run_resume(name: str, cfg: dict, out: str) -> dict:
    objects = make(cfg)
    accelerator, model, optimizer, loader = objects
    accelerator.load_state(ckpt_dir(out, name))
    loaded = {"epoch": loader.epoch, "cursor": loader.cursor}
    passes = []
    while loader.epoch < EPOCHS:  # the loader knows its epoch, also after a resume
        passes.append([step(cfg, *objects[:3], batch) for batch in loader])
    return {"passes": passes, "loaded": loaded}


def main() -> None:
    phase, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    for name in names:
        cfg = SCENARIOS[name]
        os.makedirs(os.path.join(out, name), exist_ok=True)
        record = run_save(name, cfg, out) if phase == "save" else run_resume(name, cfg, out)
        with open(os.path.join(out, name, f"{phase}_r{rank()}.json"), "w") as f:
            json.dump(record, f)


if __name__ == "__main__":
    main()
    end_worker()

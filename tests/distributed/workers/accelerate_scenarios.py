"""Worker for tests/distributed/test_accelerate_resume.py: one launch runs many scenarios.

    python -m torch.distributed.run --nproc_per_node=2 accelerate_scenarios.py PHASE OUT NAME...

PHASE is ``save`` (record the uninterrupted stream, then run again and checkpoint), ``resume``
(fresh processes: load the checkpoint and record what follows) or ``resume2`` (for chained
scenarios: the second resume). Each scenario writes OUT/NAME/<phase>_r<rank>.json. Nothing here
judges: the test compares the resumed stream to the recorded uninterrupted one.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset

import shufflepoint
from shufflepoint._tools.launch import end_worker

shufflepoint.patch_accelerate()

from accelerate import Accelerator, DataLoaderConfiguration  # noqa: E402

SEED, N, BS, EPOCHS = 1234, 64, 4, 3

# name -> settings. save=(epoch, k): checkpoint after k batches of that epoch, inside the loop;
# k=None: after the epoch's loop ended. how: "sd" loader.state_dict per rank; "acc"
# Accelerator.save_state/load_state; "skip": the examples/by_feature/checkpointing.py flow
# (non-stateful loader, load_state + skip_first_batches); "set_epoch_skip": #4071's loop
# (set_epoch(e) each epoch, skip_first_batches on the first resumed one, no checkpoint file).
SCENARIOS: dict[str, dict] = {
    "seed_plain": dict(save=(1, 3)),
    "seed_seedable": dict(save=(1, 3), seedable=True),
    "e0_seedable": dict(save=(0, 3), seedable=True),
    "e2_plain": dict(save=(2, 5)),
    "acc_plain": dict(save=(1, 3), how="acc"),
    "acc_seedable": dict(save=(1, 3), how="acc", seedable=True),
    "last_batch_plain": dict(save=(1, 8)),
    "last_batch_seedable": dict(save=(1, 8), seedable=True),
    "between_epochs_plain": dict(save=(1, None)),
    "between_epochs_acc_seedable": dict(save=(0, None), how="acc", seedable=True),
    "workers2_plain": dict(save=(1, 3), num_workers=2),
    "workers2_e0_seedable": dict(save=(0, 3), num_workers=2, seedable=True),
    "dispatch_plain": dict(save=(1, 3), dispatch=True),
    "dispatch_e0_seedable": dict(save=(0, 3), dispatch=True, seedable=True),
    "dispatch_acc_plain": dict(save=(1, 3), dispatch=True, how="acc"),
    "even_batches_n66": dict(save=(1, 5), n=66),
    "even_batches_n66_padded_last": dict(save=(0, 9), n=66, seedable=True),
    "set_epoch_skip_4071": dict(save=(1, 3), how="set_epoch_skip", seedable=True, stateful=False),
    "checkpointing_flow_plain": dict(save=(1, 3), how="skip", stateful=False),
    "checkpointing_flow_seedable": dict(save=(1, 3), how="skip", stateful=False, seedable=True),
    "checkpointing_flow_last_batch": dict(save=(1, 8), how="skip", stateful=False),
    "extra_rng_plain": dict(save=(1, 3), extra_rng=True),
    "extra_rng_acc": dict(save=(1, 3), how="acc", extra_rng=True),
    "chain_plain": dict(save=(1, 3), chain=2),
    "chain_acc_seedable": dict(save=(1, 2), how="acc", seedable=True, chain=3),
    "stock_seedable": dict(save=(1, 3), seedable=True, stock=True),
    "stock_acc_plain": dict(save=(1, 3), how="acc", stock=True),
    # run with one process
    "single_plain": dict(save=(1, 3)),
    "single_seedable": dict(save=(1, 3), seedable=True),
    "single_acc_plain": dict(save=(1, 3), how="acc"),
    "single_custom_sampler": dict(save=(1, 3), sampler="custom"),
}


class HiddenRandomSampler(Sampler[int]):
    """A user's sampler with randomness of its own, which no checkpoint can see."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())

    def __len__(self) -> int:
        return self.n


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def make(cfg: dict):
    """A fresh Accelerator and prepared loader, exactly as the user's script would build them."""
    stateful = cfg.get("stateful", True)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        use_stateful_dataloader=stateful, use_seedable_sampler=cfg.get("seedable", False),
        dispatch_batches=cfg.get("dispatch", None)))
    torch.manual_seed(SEED)
    n = cfg.get("n", N)
    dataset = TensorDataset(torch.arange(n))
    if cfg.get("sampler") == "custom":
        loader = DataLoader(dataset, batch_size=BS, sampler=HiddenRandomSampler(n),
                            num_workers=cfg.get("num_workers", 0))
    else:
        loader = DataLoader(dataset, batch_size=BS, shuffle=True, num_workers=cfg.get("num_workers", 0))
    return accelerator, accelerator.prepare(loader)


def ids(batch) -> list[int]:
    return batch[0].tolist()


def extra_rng(accelerator) -> None:
    """Randomness a real job spends between save and resume: an eval loader, model noise."""
    torch.randn(17)
    evaluation = accelerator.prepare(DataLoader(TensorDataset(torch.arange(40)), batch_size=4, shuffle=True))
    for _ in evaluation:
        torch.randperm(5)


def ckpt_dir(out: str, name: str, step: int) -> str:
    return os.path.join(out, name, f"ckpt{step}")


def save(accelerator, loader, cfg: dict, out: str, name: str, step: int) -> list[str]:
    if cfg.get("how", "sd") in ("acc", "skip"):
        accelerator.save_state(ckpt_dir(out, name, step))
        return []
    state = loader.state_dict()
    torch.save(state, os.path.join(out, name, f"sd{step}_r{rank()}.pt"))
    return sorted(state)


def load(accelerator, loader, cfg: dict, out: str, name: str, step: int) -> None:
    if cfg.get("how", "sd") in ("acc", "skip"):
        accelerator.load_state(ckpt_dir(out, name, step))
    else:
        loader.load_state_dict(torch.load(os.path.join(out, name, f"sd{step}_r{rank()}.pt"),
                                          weights_only=False))


def run_save(name: str, cfg: dict, out: str) -> dict:
    accelerator, loader = make(cfg)
    reference = [[ids(b) for b in loader] for _ in range(EPOCHS)]
    accelerator, loader = make(cfg)
    epoch, k = cfg["save"]
    for _ in range(epoch):
        for _ in loader:
            pass
    keys: list[str] = []
    if cfg.get("how") == "set_epoch_skip":
        pass  # #4071's loop keeps no loader checkpoint: the step count is the user's
    elif k is None:
        for _ in loader:
            pass
        keys = save(accelerator, loader, cfg, out, name, 1)
    else:
        for index, _ in enumerate(loader):
            if index + 1 == k:
                keys = save(accelerator, loader, cfg, out, name, 1)
                break
    if cfg.get("extra_rng"):
        extra_rng(accelerator)
    return {"reference": reference, "state_keys": keys}


def run_resume(name: str, cfg: dict, out: str, step: int) -> dict:
    accelerator, loader = make(cfg)
    if cfg.get("extra_rng"):
        extra_rng(accelerator)
    epoch, k = cfg["save"]
    per_epoch = len(loader)
    how = cfg.get("how", "sd")
    if how in ("skip", "set_epoch_skip"):
        if how == "skip":
            load(accelerator, loader, cfg, out, name, step)
        # examples/by_feature/checkpointing.py: the position is the user's step count.
        overall_step = epoch * per_epoch + (per_epoch if k is None else k)
        starting_epoch = overall_step // per_epoch
        resume_step = overall_step - starting_epoch * per_epoch
        passes = []
        for current in range(starting_epoch, EPOCHS):
            if how == "set_epoch_skip":
                loader.set_epoch(current)
            active = loader
            if current == starting_epoch:
                active = accelerator.skip_first_batches(loader, resume_step)
            passes.append([ids(b) for b in active])
        return {"passes": passes}
    load(accelerator, loader, cfg, out, name, step)
    if cfg.get("extra_rng"):
        torch.randn(3)
    chain = cfg.get("chain")
    passes = []
    if chain and step == 1:
        # resume -> checkpoint -> (new processes) resume, all inside the interrupted epoch
        got = []
        for batch in loader:
            got.append(ids(batch))
            if len(got) == chain:
                save(accelerator, loader, cfg, out, name, 2)
                break
        return {"passes": [got]}
    while True:
        passes.append([ids(b) for b in loader])
        if loader.iteration >= EPOCHS:
            break
    return {"passes": passes}


def main() -> None:
    phase, out, *names = sys.argv[1:]
    for name in names:
        cfg = SCENARIOS[name]
        os.makedirs(os.path.join(out, name), exist_ok=True)
        if cfg.get("stock"):
            shufflepoint.unpatch_accelerate()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", shufflepoint.ResumeWarning)
            if phase == "save":
                result = run_save(name, cfg, out)
            else:
                result = run_resume(name, cfg, out, 2 if phase == "resume2" else 1)
        result["warnings"] = [str(w.message) for w in caught if w.category is shufflepoint.ResumeWarning]
        if cfg.get("stock"):
            shufflepoint.patch_accelerate()
        with open(os.path.join(out, name, f"{phase}_r{rank()}.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
    end_worker()

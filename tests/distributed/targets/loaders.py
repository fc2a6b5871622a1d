"""Audit targets: each factory takes no arguments and is called in every launched process, after
torchrun set RANK / WORLD_SIZE / MASTER_ADDR. ``shufflepoint audit tests/distributed/targets/loaders.py:NAME``.

The Accelerate ones are the seed's setup: 64 samples, batch 4, shuffle=True, seed 1234.
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, TensorDataset

SEED, N, BATCH = 1234, 64, 4


def _accelerate_loader():
    from accelerate import Accelerator, DataLoaderConfiguration

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    torch.manual_seed(SEED)
    return accelerator.prepare(DataLoader(TensorDataset(torch.arange(N)), batch_size=BATCH, shuffle=True))


def stock_accelerate():
    """Stock Accelerate 1.13: the seed's bug (#4195), resumes at the right position in the wrong order."""
    return _accelerate_loader()


def patched_accelerate():
    """The same loader with shufflepoint.patch_accelerate() first."""
    import shufflepoint

    shufflepoint.patch_accelerate()
    return _accelerate_loader()


def torchdata_loader():
    """torchdata's StatefulDataLoader with a DistributedSampler (the audit calls set_epoch for it)."""
    from torch.utils.data.distributed import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = TensorDataset(torch.arange(N))
    sampler = DistributedSampler(dataset, num_replicas=int(os.environ["WORLD_SIZE"]),
                                 rank=int(os.environ["RANK"]), shuffle=True, seed=SEED)
    return StatefulDataLoader(dataset, batch_size=BATCH, sampler=sampler)


def shufflepoint_loader():
    """shufflepoint.DataLoader, 67 samples: the tail is padded on 2 and on 3 ranks."""
    import shufflepoint

    return shufflepoint.DataLoader(TensorDataset(torch.arange(67)), batch_size=BATCH, seed=SEED,
                                   rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def not_a_loader():
    """A factory that returns something without state_dict: a usage error."""
    return [1, 2, 3]

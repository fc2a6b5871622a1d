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


def _small_corpus() -> str:
    """200 JSONL shards of 1-3 rows ({"id": i}), made once per machine and published by a rename, so
    that the ranks of every launch find the same complete corpus."""
    import sys
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"shufflepoint-audit-corpus-{os.getuid()}-v1")
    if not os.path.isdir(folder):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        from corpus_files import jsonl_corpus

        building = tempfile.mkdtemp(prefix="shufflepoint-audit-corpus-")
        jsonl_corpus(building, 200, rows=(1, 3), seed=5)
        try:
            os.rename(building, folder)
        except OSError:  # another rank published it first
            import shutil

            shutil.rmtree(building, ignore_errors=True)
    return folder


def sharded_loader():
    """shufflepoint.DataLoader over shufflepoint.Shards: 200 JSONL shards, the blocks order."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(_small_corpus(), "part-*.jsonl"), progress=False)
    return shufflepoint.DataLoader(corpus, batch_size=BATCH, seed=SEED, shuffle_block=32,
                                   rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))

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


def sharded_loader_fixed_global_batch():
    """``sharded_loader`` at a global batch of 12 on any world size it divides by (2 x 6, 3 x 4, ...)."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(_small_corpus(), "part-*.jsonl"), progress=False)
    world_size = int(os.environ["WORLD_SIZE"])
    return shufflepoint.DataLoader(corpus, batch_size=12 // world_size, seed=SEED, shuffle_block=32,
                                   rank=int(os.environ["RANK"]), world_size=world_size)


class _RandomCrops(torch.utils.data.Dataset):
    """64 images of 3x16x16 (id i is filled with i), each read through a RandomResizedCrop-like crop
    and a random flip drawn from torch's *global* RNG, as torchvision v2 transforms draw."""

    def __len__(self):
        return N

    def __getitem__(self, index):
        image = torch.full((3, 16, 16), float(index)) + torch.linspace(0, 1, 16)
        size = int(torch.randint(6, 17, ()).item())
        top, left = torch.randint(0, 17 - size, (2,)).tolist()
        crop = image[:, top:top + size, left:left + size].unsqueeze(0)
        image = torch.nn.functional.interpolate(crop, size=(8, 8), mode="bilinear", align_corners=False)[0]
        return torch.tensor(index), image.flip(-1) if torch.rand(()) < 0.5 else image


def stock_augmented():
    """torchdata's StatefulDataLoader + DistributedSampler, 2 workers, random crops: the order resumes
    exactly, the augmentations do not (CONTENT_DIVERGED)."""
    from torch.utils.data.distributed import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = _RandomCrops()
    sampler = DistributedSampler(dataset, num_replicas=int(os.environ["WORLD_SIZE"]),
                                 rank=int(os.environ["RANK"]), shuffle=True, seed=SEED)
    return StatefulDataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=2)


def shufflepoint_augmented():
    """The same random crops through shufflepoint.DataLoader(seed_per_sample=True), 2 workers."""
    import shufflepoint

    return shufflepoint.DataLoader(_RandomCrops(), batch_size=BATCH, seed=SEED, num_workers=2, seed_per_sample=True,
                                   rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


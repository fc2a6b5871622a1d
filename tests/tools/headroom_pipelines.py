"""Synthetic pipelines for ``shufflepoint headroom``, each with one deliberately slow stage (``SLOW`` seconds a
batch), as TARGETs: ``factory(num_workers=N)`` returns a ``shufflepoint.DataLoader``."""

import time

import torch

import shufflepoint

SLOW, BATCH = 0.02, 4


class Samples(torch.utils.data.Dataset):
    def __init__(self, seconds=0.0):
        self.seconds = seconds

    def __len__(self):
        return 64

    def __getitem__(self, index):
        if self.seconds:
            time.sleep(self.seconds)
        return torch.tensor([index, index + 1])


def slow_transform(sample, rng):
    time.sleep(SLOW / BATCH)
    return sample


def slow_collate(samples):
    time.sleep(SLOW)
    return torch.stack(samples)


class SlowToMove:
    """A batch whose copy to the device is slow (as a large batch over PCIe would be)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def to(self, device, non_blocking=False):
        time.sleep(SLOW)
        return SlowToMove(self.tensor.to(device))


def read(num_workers):
    return shufflepoint.DataLoader(Samples(SLOW / BATCH), BATCH, num_workers=num_workers)


def transform(num_workers):
    return shufflepoint.DataLoader(Samples(), BATCH, num_workers=num_workers, transform=slow_transform)


def collate(num_workers):
    return shufflepoint.DataLoader(Samples(), BATCH, num_workers=num_workers, collate_fn=slow_collate)


def transfer(num_workers):
    return shufflepoint.DataLoader(Samples(), BATCH, num_workers=num_workers,
                                   collate_fn=lambda samples: SlowToMove(torch.stack(samples)))


def not_ours(num_workers):
    return torch.utils.data.DataLoader(Samples(), BATCH, num_workers=num_workers)

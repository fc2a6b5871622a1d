"""Ranks simulated in one process for the arithmetic: the same corpus and lockstep loops that several
test modules drive (a sharded corpus without files; every rank stepping together, with exclusions)."""

from collections import Counter

import numpy as np
import torch


class ShardRows(torch.utils.data.Dataset):
    """What the loader looks for in a sharded corpus: ``shard_rows`` and a ``fingerprint`` (the ``blocks``
    order, whose epoch order under ``spans`` depends on the epoch's first world size)."""

    def __init__(self, rows):
        self.shard_rows = np.asarray(rows, dtype=np.int64)
        self.fingerprint = "shards:test"

    def __len__(self):
        return int(self.shard_rows.sum())

    def __getitem__(self, index):
        return index


def lockstep(ranks, epochs, exclusions, *, step=0, stop=None, applied=None):
    """Every rank in lockstep, ``set_epoch`` each epoch; before global step t (batches per rank since
    the run began), ``exclusions[t]`` is excluded on every rank (and t appended to ``applied``).
    Returns [(step, epoch, batches per rank)] and the state at ``stop`` (or at the end)."""
    served, applied = [], applied if applied is not None else []
    for epoch in range(ranks[0].epoch, epochs):
        for loader in ranks:
            loader.set_epoch(epoch)
        its = [iter(loader) for loader in ranks]
        while True:
            if step in exclusions:
                for loader in ranks:
                    loader.exclude(exclusions[step])
                applied.append(step)
            if step == stop:
                return served, ranks[0].state_dict()
            batches = [next(it, None) for it in its]
            if batches[0] is None:
                assert all(b is None for b in batches)
                break
            served.append((step, epoch, [b.tolist() for b in batches]))
            step += 1
    return served, ranks[0].state_dict()


def stopped_and_resumed(make, epochs, exclusions, stop):
    """The same run stopped before global step ``stop`` and resumed from its state by new loaders
    (``make()`` builds every rank's), the exclusions after the stop applied by the resumed ones: what
    every rank received, to compare with the run read whole."""
    before, state = lockstep(make(), epochs, exclusions, stop=stop)
    fresh = make()
    for loader in fresh:
        loader.load_state_dict(state)
    after, _ = lockstep(fresh, epochs, {t: v for t, v in exclusions.items() if t > stop}, step=stop)
    return before + after


def check_served(served, n, world, exclusions, epochs):
    """No sample served once excluded; per epoch every sample not excluded by its end served, each once
    (apart from the tail padding, fewer than ``world`` repeats)."""
    excluded_at = {}
    for t in sorted(exclusions):
        for i in exclusions[t]:
            excluded_at.setdefault(i, t)
    for epoch in range(epochs):
        steps = [(t, b) for t, e, b in served if e == epoch]
        counts = Counter(i for _, batches in steps for batch in batches for i in batch)
        for t, batches in steps:
            for i in (i for batch in batches for i in batch):
                assert excluded_at.get(i, t + 1) > t, f"index {i} served at step {t}, excluded at {excluded_at[i]}"
        end = sum(1 for _, e, _ in served if e <= epoch)  # the step the next epoch starts at
        kept = {i for i in range(n) if excluded_at.get(i, end + 1) > end}
        assert kept <= set(counts), f"epoch {epoch}: never served {sorted(kept - set(counts))}"
        assert sum(counts.values()) - len(counts) < world  # repeats: the tail padding only

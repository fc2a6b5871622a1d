"""The loaders of the golden states (``write_states.py`` writes them with an older shufflepoint, and
``test_old_states.py`` loads them with today's): the same datasets, built the same way, in both."""

from __future__ import annotations

import os
from typing import Any

from corpus_files import jsonl_corpus

CASES: dict[str, dict[str, Any]] = {
    # a plain array in the default order, mid-epoch
    "array": {"written_by": ("v2", "v3"), "world_size": 2, "batch_size": 3, "save_after": 4, "next": 8},
    # a Shards corpus in the blocks order, its block left to the default (a resume adopts the state's)
    "blocks": {"written_by": ("v2", "v3"), "world_size": 2, "batch_size": 2, "save_after": 5, "next": 12},
    # a Mixture with a schedule, read on the grid of its first global batch (2 x 3 = 6)
    "schedule": {"written_by": ("v3",), "world_size": 2, "batch_size": 3, "save_after": 5, "next": 10},
}


def _rows(batch: Any) -> list[Any]:
    if isinstance(batch, dict):
        return [int(i) for i in batch["id"]]
    if hasattr(batch, "tolist"):
        return [int(i) for i in batch.tolist()]
    return list(batch)


def build(case: dict[str, Any], rank: int, corpus: str) -> Any:
    """Rank ``rank``'s loader of ``case``; a corpus is written under ``corpus``."""
    import shufflepoint

    world, batch = case["world_size"], case["batch_size"]
    if case is CASES["array"]:
        return shufflepoint.DataLoader(list(range(50)), batch, seed=7, rank=rank, world_size=world)
    if case is CASES["blocks"]:
        jsonl_corpus(corpus, 12, rows=(2, 6), seed=3)
        for name in os.listdir(corpus):  # a shard's version is its mtime: the same corpus in any folder
            os.utime(os.path.join(corpus, name), (1_700_000_000, 1_700_000_000))
        corpus_files = shufflepoint.Shards(corpus + "/*.jsonl")
        return shufflepoint.DataLoader(corpus_files, batch, seed=11, rank=rank, world_size=world)
    mixture = shufflepoint.Mixture([[f"a{i}" for i in range(40)], [f"b{i}" for i in range(40)]],
                                   samples_per_epoch=48, schedule=[(0, [1, 1]), (30, [1, 3])])
    return shufflepoint.DataLoader(mixture, batch, seed=5, rank=rank, world_size=world, collate_fn=list)


def take(iterator: Any, loader: Any, count: int) -> list[list[Any]]:
    """The next ``count`` batches of a live ``iterator`` of ``loader``, into the next epochs."""
    found = []
    while len(found) < count:
        for batch in iterator:
            found.append(_rows(batch))
            if len(found) == count:
                break
        else:
            iterator = iter(loader)
    return found

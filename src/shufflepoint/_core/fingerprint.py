"""A cheap, documented default identity for a dataset: its length and a hash of a few items.

``dataset_fingerprint="auto"`` reads at most 8 items (positions 0, n-1 and six evenly spaced
between), turns each into bytes (tensors and numpy arrays by dtype, shape and contents; lists,
tuples and dicts recursively; anything else by ``repr``) and hashes them with SHA-256. It catches a
dataset that grew, shrank or was reordered at the sampled points; it cannot see a change elsewhere.
Pass your own string (a dataset version, a manifest hash) when that matters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

SAMPLED_ITEMS = 8


def _feed(digest: Any, item: Any) -> None:
    import torch

    if isinstance(item, torch.Tensor):
        item = item.detach().cpu().numpy()
    if isinstance(item, np.ndarray):
        digest.update(f"{item.dtype}{item.shape}".encode())
        digest.update(np.ascontiguousarray(item).tobytes())
    elif isinstance(item, Mapping):
        for key in sorted(item, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, item[key])
    elif isinstance(item, (list, tuple)):
        digest.update(f"{type(item).__name__}{len(item)}".encode())
        for part in item:
            _feed(digest, part)
    else:
        digest.update(repr(item).encode())


def fingerprint(dataset: Any, n: int) -> str:
    digest = hashlib.sha256(f"n={n}".encode())
    if n:
        positions = sorted({round(i * (n - 1) / (SAMPLED_ITEMS - 1)) for i in range(SAMPLED_ITEMS)})
        for position in positions:
            _feed(digest, dataset[position])
    return f"auto:n={n}:{digest.hexdigest()[:16]}"


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


def recorded_int(found: object, key: str) -> int | None:
    """The positive integer a loader wrote into a dataset fingerprint as ``:key=N`` (``blocks``, a schedule's
    ``grid``), or None: how a resume reads the settings the run began with back from its state.

    >>> recorded_int("shards:0f3a:blocks=2048:mine", "blocks"), recorded_int("auto:n=3:ff", "grid")
    (2048, None)
    """
    marker = f":{key}="
    if not isinstance(found, str) or marker not in found:
        return None
    digits = found.rsplit(marker, 1)[1].split(":", 1)[0]
    return int(digits) if digits.isdigit() and 0 < int(digits) <= 2**62 else None

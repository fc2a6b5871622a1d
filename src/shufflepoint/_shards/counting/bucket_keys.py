"""A corpus's bucket keys read from a field of its samples once, and kept (``DataLoader(buckets="field")``).

A ``Shards`` corpus names its keys by a field (an aspect-ratio bucket written beside each image, a
resolution, a clip length). They are read once, every sample's field in batches, and written to
``buckets-<key>.npy`` in the corpus's cache folder beside its index, where ``key`` hashes the corpus
fingerprint (every shard's name, size, version and rows) and the field: a restarted job, or another rank
of the node, reads that file and no shard (several processes at once take a lock: one reads, the others
wait). A ``Shards`` with a ``transform``, or any other dataset, is read at every construction and kept
nowhere: nothing on disk names what its samples hold. As with token counts (``token_counts.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import torch

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.counting.token_counts import COUNT_BATCH, cacheable, read
from shufflepoint._shards.index import sidecar

VERSION = 1  # of the keys file; part of its key
_READ_AGAIN = "delete it to read the keys again"


def _key_of(sample: Any, field: str, index: int) -> int:
    """Sample ``index``'s key: its ``field``, a whole number >= 0; an error naming the sample and the field."""
    if not isinstance(sample, dict) or field not in sample:
        found = f"keys {sorted(map(str, sample))}" if isinstance(sample, dict) else f"a {type(sample).__name__}"
        raise ValueError(refusal(f"buckets: sample {index}", Plain(f"no field {field!r} ({found})"),
                                 f"a dict whose {field!r} holds the sample's bucket, an int in [0, 2**31)",
                                 "pass the name of the field that holds it, or buckets= as an array of keys"))
    value = sample[field]
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= int(value) < 2**31:
        return int(value)
    raise ValueError(refusal(f"buckets: sample {index}", Plain(f"{field!r} = {value!r}"[:80]),
                             "an int in [0, 2**31): the sample's bucket", "write each sample's bucket number into "
                             "that field, or pass buckets= as an array of keys"))


def read_keys(dataset: Any, field: str) -> np.ndarray:
    """Every sample's key, read in batches in this process."""
    n = len(dataset)
    keys = np.empty(n, np.int64)
    for first in range(0, n, COUNT_BATCH):
        indices = range(first, min(first + COUNT_BATCH, n))
        for index, sample in zip(indices, read(dataset, indices), strict=True):
            keys[index] = _key_of(sample, field, index)
    return keys


def keys_path(dataset: Any, field: str) -> str:
    """Where a ``Shards`` corpus keeps the keys of ``field``."""
    text = json.dumps({"corpus": dataset.fingerprint, "field": field, "version": VERSION}, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    return os.path.join(dataset.cache_dir, f"buckets-{key}.npy")


def _load(path: str, n: int) -> np.ndarray | None:
    try:
        found = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(refusal(path, Plain("unreadable bucket keys"), "a .npy file of keys", _READ_AGAIN,
                                 why=str(error))) from error
    if found.shape != (n,) or found.dtype != np.int32 or (found.size and int(found.min()) < 0):
        raise ValueError(refusal(path, Plain(f"keys of shape {found.shape} and dtype {found.dtype}"),
                                 f"({n},) int32 keys >= 0", _READ_AGAIN, why="the file is damaged"))
    return np.asarray(found, dtype=np.int64)


def keys_of_field(dataset: Any, field: str) -> np.ndarray:
    """The keys in ``field`` of every sample: kept in a ``Shards`` corpus's cache folder, else read here."""
    if not isinstance(field, str) or not field:
        raise TypeError(refusal("buckets", field, "a field's name (a non-empty str)", "pass buckets='<field>'"))
    if not cacheable(dataset):
        return read_keys(dataset, field)
    path = keys_path(dataset, field)
    return sidecar.kept_or_made(path, lambda kept: _load(kept, len(dataset)), lambda: read_keys(dataset, field),
                                lambda kept, found: sidecar.write_whole(
                                    kept, lambda f: np.save(f, found.astype(np.int32), allow_pickle=False)))

"""Small corpora for the decode-pool tests, written here: JPEG photos in WebDataset tars (Pillow only), token
windows in ``.bin`` shards, documents for ``Packed``, H.264 videos (PyAV, ``tests/video_files.py``); and the
comparison of two batches, pixels included."""

from __future__ import annotations

import io
import os
import sys
import tarfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from corpus_files import token_corpus  # noqa: E402


def photo_tars(folder: str, samples: int, per_shard: int, *, corrupt: int | None = None) -> str:
    """``samples`` JPEGs of 48-160 pixel sides (gradients with noise, so that they decode like photos) in tars;
    the sample ``corrupt`` (if given) has bytes that are no JPEG. Each sample: ``.jpg`` and ``.cls`` (its number)."""
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    for shard in range(-(-samples // per_shard)):
        with tarfile.open(os.path.join(folder, f"photos-{shard:05d}.tar"), "w") as tar:
            for number in range(shard * per_shard, min(samples, (shard + 1) * per_shard)):
                width, height = (int(v) for v in rng.integers(48, 160, 2))
                ramp = np.linspace(0, 255, width)[None, :, None] * np.linspace(0.3, 1, height)[:, None, None]
                pixels = np.clip(ramp + rng.normal(0, 20, (height, width, 3)), 0, 255).astype(np.uint8)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
                data = b"not a jpeg" if number == corrupt else buffer.getvalue()
                for suffix, payload in (("jpg", data), ("cls", str(number).encode())):
                    info = tarfile.TarInfo(f"{number:06d}.{suffix}")
                    info.size, info.mtime = len(payload), 0
                    tar.addfile(info, io.BytesIO(payload))
    return os.path.join(folder, "*.tar")


def tokens(folder: str, shards: int, seq_len: int) -> str:
    token_corpus(folder, shards, seq_len=seq_len)
    return os.path.join(folder, "*.bin")


def documents(count: int) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(3)
    return [{"input_ids": list(range(d * 100, d * 100 + int(rng.integers(1, 30))))} for d in range(count)]


def same(a, b) -> bool:
    """Equal batches: tensors and arrays element for element (dtype and shape too), the rest by ``==``."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def digest(batch) -> str:
    """A batch's bytes, hashed: tensors' and arrays' contents, shapes and dtypes, other values' reprs."""
    import hashlib

    h = hashlib.sha256()

    def feed(value):
        if isinstance(value, torch.Tensor):
            value = value.numpy()
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict):
            for key in sorted(value):
                h.update(str(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            for item in value:
                feed(item)
        else:
            h.update(repr(value).encode())

    feed(batch)
    return h.hexdigest()

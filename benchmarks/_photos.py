"""Real photographs as WebDataset shards: the sample photos scikit-image ships, cut to many sizes and shapes.

Not generated noise: a JPEG of noise decodes at another speed than a photograph (entropy coding), so
the images are crops of scikit-image's photographs (astronaut, coffee, chelsea, rocket, retina, ...), their
geometric-mean side drawn log-uniformly from a range (``SIZES``: 96-320, 256-640, 640-1400, or 96-1400
pixels) and their aspect from 1:3 to 3:1, re-encoded as JPEG (quality 90), with one PNG in
``png_every``. Each sample is ``{key}.jpg`` (or ``.png``), ``{key}.cls`` (its source photo's number) and
``{key}.txt`` (a caption). Deterministic: the same arguments write the same bytes. Used by
benchmarks/images.py, examples' tests and tests/media.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina",
          "colorwheel", "camera", "coins")
SIZES = {"small": (96, 320), "medium": (256, 640), "large": (640, 1400), "mixed": (96, 1400)}


def photos() -> list[np.ndarray]:
    """scikit-image's sample photographs as RGB uint8 arrays (grey ones stacked to three channels)."""
    import skimage.data

    found = []
    for name in PHOTOS:
        image = getattr(skimage.data, name)()
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        found.append(np.ascontiguousarray(image[..., :3]))
    return found


def _cut(image: np.ndarray, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A ``width x height`` piece of ``image``: a random crop of the right aspect, resized."""
    from PIL import Image

    source_h, source_w = image.shape[:2]
    aspect = width / height
    crop_w = min(source_w, int(source_h * aspect))
    crop_h = min(source_h, int(crop_w / aspect))
    crop_w = max(1, min(crop_w, int(crop_h * aspect)))
    left = int(rng.integers(0, source_w - crop_w + 1))
    top = int(rng.integers(0, source_h - crop_h + 1))
    piece = Image.fromarray(image[top:top + crop_h, left:left + crop_w])
    return np.asarray(piece.resize((width, height), Image.Resampling.BICUBIC))


def encoded(array: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    tar.addfile(info, io.BytesIO(data))


def write_shards(folder: str, samples: int, per_shard: int, *, sizes: str = "medium", seed: int = 0,
                 png_every: int = 0) -> list[str]:
    """``samples`` photos in tars of ``per_shard`` under ``folder`` (kept when already written)."""
    os.makedirs(folder, exist_ok=True)
    done = os.path.join(folder, f".done-{samples}-{per_shard}-{sizes}-{seed}-{png_every}")
    paths = [os.path.join(folder, f"photos-{s:05d}.tar") for s in range(-(-samples // per_shard))]
    if os.path.exists(done):
        return paths
    sources, rng = photos(), np.random.default_rng(seed)
    low, high = SIZES[sizes]
    for shard, path in enumerate(paths):
        with tarfile.open(path + ".tmp", "w") as tar:
            for index in range(shard * per_shard, min(samples, (shard + 1) * per_shard)):
                source = int(rng.integers(0, len(sources)))
                side = int(np.exp(rng.uniform(np.log(low), np.log(high))))  # log-uniform: as many small as large
                aspect = float(np.exp(rng.uniform(np.log(1 / 3), np.log(3))))
                width, height = max(16, int(side * np.sqrt(aspect))), max(16, int(side / np.sqrt(aspect)))
                image = _cut(sources[source], width, height, rng)
                png = png_every and index % png_every == png_every - 1
                _add(tar, f"{index:08d}.{'png' if png else 'jpg'}", encoded(image, "PNG" if png else "JPEG"))
                _add(tar, f"{index:08d}.cls", str(source).encode())
                _add(tar, f"{index:08d}.txt", f"photo {PHOTOS[source]} number {index}".encode())
        os.replace(path + ".tmp", path)
    open(done, "w").close()
    return paths

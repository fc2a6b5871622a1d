"""Image bytes -> an RGB array of ``size`` (width, height), the crop chosen from the header before a pixel is decoded.

Two CPU decoders behind one signature, ``decode(data, plan, size) -> (HWC uint8 array, Box)``, where
``plan(width, height) -> Box`` picks the crop (``crops``):

- ``pil``: Pillow. For a JPEG whose box spans at least twice the target, ``Image.draft`` makes libjpeg
  decode at 1/2, 1/4 or 1/8 of the size (DCT scaling: that much less work), then one ``resize`` with a box
  crops and resamples (bilinear, with Pillow's antialiasing support) in one pass. Every other format
  (PNG, WebP, GIF, ...) is decoded whole, then the same resize.
- ``simplejpeg``: libjpeg-turbo through simplejpeg, the same reduced decode (``min_width``/``min_height``),
  then Pillow's resize. A non-JPEG falls back to ``pil``.

Which is faster was measured (``benchmarks/images.py``; docs/multimodal.md has the numbers): ``auto``
takes simplejpeg when it is installed, else Pillow. The pixels of the two differ by a few levels (their
IDCT and colour conversion differ), so a run keeps one decoder across a resume to stay bit-exact.
"""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Callable

import numpy as np
from PIL import Image

from shufflepoint._media.crops import Box, reduction

Plan = Callable[[int, int], Box]
JPEG_MAGIC = b"\xff\xd8\xff"
DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)  # what a bad file raises


def is_jpeg(data: bytes | memoryview) -> bool:
    return bytes(data[:3]) == JPEG_MAGIC


def _resized(image: Image.Image, box: Box, sx: float, sy: float, size: tuple[int, int]) -> np.ndarray:
    """Crop ``box`` (in the full image's pixels; the image was decoded at ``sx`` x ``sy``), resize, mirror."""
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    out = image.resize(size, Image.Resampling.BILINEAR, box=box.scaled(sx, sy))
    if out.mode != "RGB":
        out = out.convert("RGB")
    if box.flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.array(out)  # a writable copy (torch.from_numpy warns on Pillow's read-only view)


def decode_pil(data: bytes, plan: Plan, size: tuple[int, int], draft: bool = True) -> tuple[np.ndarray, Box]:
    """Pillow, with a reduced JPEG decode when the box allows (``draft``)."""
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    box = plan(width, height)
    factor = reduction(box, size) if draft and image.format == "JPEG" else 1
    if factor > 1:
        image.draft("RGB", (math.ceil(width / factor), math.ceil(height / factor)))
    image.load()
    return _resized(image, box, image.size[0] / width, image.size[1] / height, size), box


def decode_simplejpeg(data: bytes, plan: Plan, size: tuple[int, int]) -> tuple[np.ndarray, Box]:
    """libjpeg-turbo via simplejpeg (a JPEG), else Pillow."""
    if not is_jpeg(data):
        return decode_pil(data, plan, size)
    import simplejpeg  # type: ignore[import-untyped]  # optional: ships no types

    height, width, _colour, _subsampling = simplejpeg.decode_jpeg_header(data)
    box = plan(width, height)
    factor = reduction(box, size)
    array = simplejpeg.decode_jpeg(data, colorspace="RGB", min_factor=float(factor),  # no other scales: slower
                                   min_height=math.ceil(height / factor), min_width=math.ceil(width / factor))
    image = Image.fromarray(array)
    return _resized(image, box, array.shape[1] / width, array.shape[0] / height, size), box


def header_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the header alone: what the device path plans with in a worker."""
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
    return int(width), int(height)


def has_simplejpeg() -> bool:
    return importlib.util.find_spec("simplejpeg") is not None


def cpu_decoder(name: str) -> Callable[[bytes, Plan, tuple[int, int]], tuple[np.ndarray, Box]]:
    """The decode function ``name`` stands for (``auto``: simplejpeg when installed, else Pillow)."""
    if name == "simplejpeg" or (name == "auto" and has_simplejpeg()):
        return decode_simplejpeg
    return decode_pil

"""Where to crop an image, from its size and the sample's generator: pure arithmetic, no pixels.

The box is chosen before a pixel is decoded, from the header's width and height alone, so that a JPEG can
then be decoded at 1/2, 1/4 or 1/8 of its size when the box, so reduced, still covers the target
(``reduction``), and so that the GPU path can plan in a worker and decode on the device.

A random resized crop (the ImageNet recipe) draws, in this order, from the sample's generator::

    up to 10 tries:  area  = uniform(scale) * width * height
                     ratio = exp(uniform(log ratio))
                     w, h  = round(sqrt(area * ratio)), round(sqrt(area / ratio))
                     if w <= width and h <= height: left, top = integers in [0, width - w], [0, height - h]
    else:            the centred box of the ratio range's nearest aspect (the whole image when it fits)
    flip:            uniform() < 0.5       (drawn whether or not the flip is wanted: the crop stays the
                                            same when flip is turned off)

Worked: a 600 x 400 image, ``scale=(1, 1)``, ``ratio=(1, 1)``: area 240,000, ``w = h = 490`` does not fit
(height 400); after ten tries the fallback is the centred square (100, 0, 400, 400).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shufflepoint._errors import refusal

TRIES = 10
MAX_REDUCTION = 8  # JPEG's DCT scaling: 1/2, 1/4, 1/8


@dataclass(frozen=True)
class Box:
    """A crop in the image's pixels: ``left, top, width, height`` (ints), and whether to mirror it."""

    left: int
    top: int
    width: int
    height: int
    flip: bool = False

    def scaled(self, sx: float, sy: float) -> tuple[float, float, float, float]:
        """The box as (left, upper, right, lower) floats on an image decoded at ``sx`` x ``sy`` of its size."""
        return (self.left * sx, self.top * sy, (self.left + self.width) * sx, (self.top + self.height) * sy)


def check_range(name: str, found: tuple[float, float], low: float, high: float) -> tuple[float, float]:
    """A (min, max) pair of floats with ``low < min <= max <= high``."""
    try:
        first, last = (float(v) for v in found)
    except (TypeError, ValueError):
        first = last = math.nan
    if not (low < first <= last <= high):
        raise ValueError(refusal(name, found, f"a pair (min, max) with {low} < min <= max <= {high}",
                                 f"pass e.g. {name}=(0.08, 1.0)" if name == "scale" else
                                 f"pass e.g. {name}=(3 / 4, 4 / 3)"))
    return first, last


def random_box(width: int, height: int, rng: np.random.Generator, scale: tuple[float, float],
               ratio: tuple[float, float]) -> Box:
    """The random resized crop of the module's docstring, then its flip draw."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(TRIES):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
            return Box(left, top, w, h, bool(rng.uniform() < 0.5))
    box = fallback_box(width, height, ratio)
    return Box(box.left, box.top, box.width, box.height, bool(rng.uniform() < 0.5))


def fallback_box(width: int, height: int, ratio: tuple[float, float]) -> Box:
    """The centred box whose aspect is the ratio range's nearest to the image's own."""
    aspect = width / height
    if aspect < ratio[0]:
        w, h = width, max(1, round(width / ratio[0]))
    elif aspect > ratio[1]:
        w, h = max(1, round(height * ratio[1])), height
    else:
        w, h = width, height
    return Box((width - w) // 2, (height - h) // 2, w, h)


def center_box(width: int, height: int, aspect: float = 1.0) -> Box:
    """The largest centred box of ``aspect`` (width / height; a square by default): an evaluation crop,
    the short side resized, the middle kept."""
    w, h = (max(1, min(width, round(height * aspect))), height) if width / height > aspect else \
        (width, max(1, min(height, round(width / aspect))))
    return Box((width - w) // 2, (height - h) // 2, w, h)


def reduction(box: Box, size: tuple[int, int]) -> int:
    """The largest of 1, 2, 4, 8 by which the image may be shrunk while decoding and the box still spans at
    least ``size`` (width, height) pixels (a JPEG decodes at that fraction for a fraction of the work)."""
    factor = 1
    while (factor * 2 <= MAX_REDUCTION and box.width >= size[0] * factor * 2
           and box.height >= size[1] * factor * 2):
        factor *= 2
    return factor

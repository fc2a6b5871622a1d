"""``shufflepoint.DecodeImage``: a sample's image bytes -> a uint8 CHW tensor, in the loader's workers.

A transform of ``(sample, rng)``, the signature of ``DataLoader(..., transform=)``, so the random resized
crop and the flip are drawn from the sample's own generator, keyed by (seed, epoch, index): the same
crop for the same sample in any worker, on any rank, after any resume (docs/augmentation.md). Called
with no generator (``Shards(..., transform=DecodeImage(crop="center"))``, an evaluation pass) it needs
none, and refuses ``crop="random"``.

    decode = shufflepoint.DecodeImage(size=224)                  # random resized crop + flip
    loader = shufflepoint.DataLoader(Shards("train-*.tar"), batch_size=256, seed=0, num_workers=8,
                                     transform=decode, pin_memory=True)
    for batch in loader:
        images = decode.to_device(batch, "cuda")                 # uint8 [256, 3, 224, 224] on the GPU
        images = images.float().div_(255)                        # float only on the device

Where the bytes are: a WebDataset sample's ``jpg``/``jpeg``/``png``/``webp`` field (the first present),
a Parquet binary column, or a Hugging Face image struct (``{"bytes": ..., "path": ...}``); ``field=``
names it. The result is the sample with that field replaced by ``image`` (``into=``); every other field
passes through (bytes collate into a list).

A sample whose image does not decode raises ``SampleError`` naming its key and field; the loader
re-raises it as a ``ShardError`` naming the shard and row. Nothing is skipped.

Words: docs/glossary.md (seed, epoch, index, resume).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import torch

from shufflepoint._errors import Plain, SampleError, refusal
from shufflepoint._media import crops
from shufflepoint._media.crops import Box

IMAGE_FIELDS = ("jpg", "jpeg", "png", "webp")
CROPS = ("random", "center")
DECODERS = ("auto", "pil", "simplejpeg", "nvjpeg")


def _imported(module: str) -> ModuleType:
    """A decoder module, imported when a ``DecodeImage`` is made: ``import shufflepoint`` needs no Pillow."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(refusal("DecodeImage", Plain(f"no {error.name}"), "Pillow installed",
                                  "pip install 'shufflepoint[images]'")) from error


def image_field(sample: Any, field: str | None) -> tuple[str | None, bytes]:
    """(the field's name, its bytes); ``sample`` itself when it is bytes (a column read alone)."""
    if isinstance(sample, (bytes, bytearray, memoryview)):
        return None, bytes(sample)
    if not isinstance(sample, Mapping):
        raise SampleError(refusal("DecodeImage sample", Plain(type(sample).__name__), "a dict of fields or "
                                  "bytes", "read the corpus with a reader that yields dicts (WebDataset, Parquet)"))
    names = (field,) if field is not None else IMAGE_FIELDS
    name = next((n for n in names if n in sample), None)
    if name is None:
        raise SampleError(refusal(f"sample {_key(sample)}", Plain(f"fields {sorted(map(str, sample))}"),
                                  f"an image field ({' or '.join(map(repr, names))})",
                                  "pass DecodeImage(field=...) naming the field that holds the image bytes"))
    value = sample[name]
    if isinstance(value, Mapping) and "bytes" in value:  # a Hugging Face Image feature
        value = value["bytes"]
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise SampleError(refusal(f"sample {_key(sample)} field {name!r}", Plain(type(value).__name__),
                                  "bytes of an encoded image", "point field= at the encoded image's bytes"))
    return name, bytes(value)


def _key(sample: Mapping[str, Any]) -> str:
    key = sample.get("__key__")
    return repr(key.decode() if isinstance(key, bytes) else key) if key is not None else "(no __key__)"


class DecodeImage:
    """Decode a sample's image, crop and resize it to ``size``, maybe mirror it: uint8, CHW.

    Args:
        size (int | tuple[int, int]): the output in pixels: an int for a square, or ``(height, width)`` (an
            aspect-ratio bucket's resolution, say; pass a ``ratio`` around its aspect). Required.
        crop (str): ``"random"`` (default): a random resized crop drawn from the sample's generator, the
            ImageNet recipe (``scale``, ``ratio``); ``"center"``: the largest centred box of the output's
            aspect, no randomness.
        scale (tuple[float, float]): the crop's share of the image's area, (min, max). Default (0.08, 1.0).
        ratio (tuple[float, float]): the crop's width / height, (min, max), drawn log-uniformly.
            Default (3/4, 4/3).
        flip (bool): mirror left-right with probability 1/2 (random crops only). Default True.
        field (str | None): the sample's field of image bytes. Default None: ``jpg``, ``jpeg``, ``png``,
            ``webp``, the first present.
        into (str): the output field. Default ``"image"``.
        decoder (str): ``"auto"`` (simplejpeg when installed, else Pillow), ``"pil"``, ``"simplejpeg"``, or
            ``"nvjpeg"``: workers only plan the crop; ``to_device`` decodes the batch on the GPU
            (torchvision's nvjpeg, imported only there). Default ``"auto"``.

    >>> decode = DecodeImage(size=224)                                       # doctest: +SKIP
    >>> loader = shufflepoint.DataLoader(corpus, batch_size=64, seed=0, transform=decode)  # doctest: +SKIP
    """

    def __init__(self, size: int | tuple[int, int], *, crop: str = "random", scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip: bool = True, field: str | None = None,
                 into: str = "image", decoder: str = "auto") -> None:
        height, width = _checked_size(size)
        for name, value, allowed in (("crop", crop, CROPS), ("decoder", decoder, DECODERS)):
            if value not in allowed:
                raise ValueError(refusal(name, value, f"one of {', '.join(map(repr, allowed))}",
                                         f"pass {name}={allowed[0]!r}"))
        decoders = _imported("shufflepoint._media.image_decoders")
        if decoder == "simplejpeg" and not decoders.has_simplejpeg():
            raise ValueError(refusal("decoder", decoder, "an installed decoder", "pip install simplejpeg, or "
                                     "pass decoder='auto'", why="simplejpeg is not installed here"))
        if not isinstance(flip, bool):
            raise ValueError(refusal("flip", flip, "a bool", "pass flip=True or False"))
        self.size = height if height == width else (height, width)
        self._out = (width, height)  # Pillow's order
        self.crop, self.flip, self.field, self.into, self.decoder = crop, flip, field, into, decoder
        self.scale = crops.check_range("scale", scale, 0.0, 1.0)
        self.ratio = crops.check_range("ratio", ratio, 0.0, float("inf"))
        self._decode = decoders.cpu_decoder(decoder)
        self._header_size, self._errors = decoders.header_size, decoders.DECODE_ERRORS

    def __repr__(self) -> str:
        return (f"DecodeImage(size={self.size}, crop={self.crop!r}, scale={self.scale}, ratio={self.ratio}, "
                f"flip={self.flip}, field={self.field!r}, decoder={self.decoder!r})")

    def plan(self, width: int, height: int, rng: np.random.Generator | None) -> Box:
        """The crop of an image of ``width x height``; random draws come from ``rng`` alone."""
        if self.crop == "center":
            return crops.center_box(width, height, self._out[0] / self._out[1])
        if rng is None:
            raise _no_rng()
        box = crops.random_box(width, height, rng, self.scale, self.ratio)
        return box if self.flip else Box(box.left, box.top, box.width, box.height)

    def __call__(self, sample: Any, rng: np.random.Generator | None = None) -> Any:
        if rng is None and self.crop != "center":  # a call without the generator, not a bad image: said up front
            raise _no_rng()
        name, data = image_field(sample, self.field)
        if self.decoder == "nvjpeg":
            planned = self._planned(sample, name, data, rng)
            return planned if name is None else _replaced(sample, name, self.into, planned)
        try:
            array, _box = self._decode(data, lambda w, h: self.plan(w, h, rng), self._out)
        except self._errors as error:
            raise _corrupt(sample, name, data, error) from error
        image = torch.from_numpy(array).permute(2, 0, 1)
        return image if name is None else _replaced(sample, name, self.into, image)

    def _planned(self, sample: Any, name: str | None, data: bytes, rng: np.random.Generator | None) -> Any:
        """The nvjpeg path's worker half: the bytes and the crop (left, top, width, height, flip)."""
        try:
            width, height = self._header_size(data)
        except self._errors as error:
            raise _corrupt(sample, name, data, error) from error
        box = self.plan(width, height, rng)
        return {"bytes": data, "crop": torch.tensor([box.left, box.top, box.width, box.height, int(box.flip)])}

    def to_device(self, batch: Any, device: torch.device | str, non_blocking: bool = True) -> torch.Tensor:
        """The batch's images as uint8 ``[B, 3, height, width]`` on ``device``: a copy of what the workers
        decoded, or (``decoder="nvjpeg"``) the batch decoded on the GPU from the bytes and crops they planned."""
        images = batch[self.into] if isinstance(batch, Mapping) else batch
        if self.decoder != "nvjpeg":
            copied: torch.Tensor = images.to(device, non_blocking=non_blocking)
            return copied
        device_decode = _imported("shufflepoint._media.device_decode")
        decoded: torch.Tensor = device_decode.decode_batch(images["bytes"], images["crop"], self._out,
                                                           torch.device(device))
        return decoded


class MissingGeneratorError(TypeError, ValueError):
    """A random crop called without the sample's generator: a call that is wrong whatever the image, so a
    ``TypeError`` (never taken for a bad sample by ``skip_bad_samples``), and a ``ValueError`` as it always was."""


def _no_rng() -> MissingGeneratorError:
    """The refusal of a random crop called without the generator, e.g. as ``Shards(transform=decode)``."""
    return MissingGeneratorError(refusal("DecodeImage rng", None, "the sample's generator for crop='random'",
                             "pass it as DataLoader(..., transform=decode), which calls decode(sample, rng), or use "
                             "crop='center' where no randomness is wanted (Shards(transform=) passes no generator)"))


def _checked_size(size: object) -> tuple[int, int]:
    """(height, width) of ``size``: an int for a square, or a (height, width) pair, each in [1, 16384]."""
    pair = (size, size) if not isinstance(size, (tuple, list)) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 16384
                                 for v in pair):
        raise ValueError(refusal("size", size, "an int in [1, 16384], or a (height, width) pair of them",
                                 "pass size=224, or size=(256, 384)"))
    return int(pair[0]), int(pair[1])


def _replaced(sample: Mapping[str, Any], name: str | None, into: str, value: Any) -> dict[str, Any]:
    out = {k: v for k, v in sample.items() if k != name}
    out[into] = value
    return out


def _corrupt(sample: Any, name: str | None, data: bytes, error: BaseException) -> SampleError:
    subject = f"sample {_key(sample)}" if isinstance(sample, Mapping) else "image bytes"
    where = f" field {name!r}" if name is not None else ""
    return SampleError(refusal(f"{subject}{where}", Plain(f"{len(data)} bytes that do not decode "
                                                           f"(starting {data[:8]!r})"),
                               "an encoded image (JPEG, PNG, WebP, ...)",
                               "replace the sample's image with a good copy (no sample is skipped in its place)",
                               why=f"{type(error).__name__}: {error}"))

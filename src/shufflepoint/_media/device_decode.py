"""The GPU half of ``DecodeImage(decoder="nvjpeg")``: a batch of JPEG bytes decoded by nvjpeg on the device.

Workers plan each crop from the header (``crops``) and hand over the bytes; here, in the training
process, ``torchvision.io.decode_jpeg(device=...)`` decodes the whole batch on the GPU, each image is
cropped, resized (bilinear, antialiased, rounded back to uint8) and mirrored there. torchvision is
imported only when this runs: the package imports without it, and on a machine whose torchvision does
not import beside its torch (a CPU torch with the registry's CUDA torchvision) the error says so.

A non-JPEG (PNG, WebP) in the batch is decoded on the CPU with Pillow and the same crop, then copied up.
The pixels differ from the CPU decoders' by a few levels (another IDCT, another resize): a run keeps one
decoder across a resume to stay bit-exact.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from shufflepoint._errors import refusal
from shufflepoint._media.crops import Box
from shufflepoint._media.image_decoders import is_jpeg


def _decode_jpeg() -> Any:
    try:
        from torchvision.io import decode_jpeg  # type: ignore[import-not-found]  # optional: the GPU path
    except (ImportError, OSError, RuntimeError) as error:
        why = f"{type(error).__name__}: {error}"  # torchvision's own words: a missing CUDA library, an ABI
        raise RuntimeError(refusal("decoder", "nvjpeg", "torchvision built for this torch, with CUDA",
                                   "install the torchvision that matches your torch, or use decoder='auto'",
                                   why=why)) from error
    return decode_jpeg


def _box(crop: torch.Tensor) -> Box:
    left, top, width, height, flip = (int(v) for v in crop.tolist())
    return Box(left, top, width, height, bool(flip))


def _finish(image: torch.Tensor, box: Box, size: tuple[int, int]) -> torch.Tensor:
    """Crop ``box`` from a CHW uint8 image on the device, resize to ``size`` (width, height), mirror: uint8."""
    piece = image[:, box.top:box.top + box.height, box.left:box.left + box.width].unsqueeze(0).float()
    resized = torch.nn.functional.interpolate(piece, size=(size[1], size[0]), mode="bilinear", antialias=True,
                                              align_corners=False)
    out = resized.squeeze(0).round_().clamp_(0, 255).to(torch.uint8)
    return out.flip(-1) if box.flip else out


def _cpu_image(data: bytes, box: Box, size: tuple[int, int]) -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    out = rgb.resize(size, Image.Resampling.BILINEAR, box=box.scaled(1.0, 1.0))
    if box.flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.array(out)).permute(2, 0, 1)


def decode_batch(blobs: Sequence[bytes], planned: torch.Tensor, size: tuple[int, int],
                 device: torch.device) -> torch.Tensor:
    """uint8 ``[B, 3, height, width]`` on ``device`` from the batch's bytes and its planned crops ``[B, 5]``."""
    if device.type != "cuda":
        raise ValueError(refusal("device", str(device), "a CUDA device for decoder='nvjpeg'",
                                 "pass a CUDA device, or use decoder='auto' (CPU decoding in the workers)"))
    decode_jpeg = _decode_jpeg()
    jpegs = [i for i, data in enumerate(blobs) if is_jpeg(data)]
    encoded = [torch.frombuffer(bytearray(blobs[i]), dtype=torch.uint8) for i in jpegs]
    decoded = decode_jpeg(encoded, device=device, mode=_rgb_mode()) if encoded else []
    out = torch.empty((len(blobs), 3, size[1], size[0]), dtype=torch.uint8, device=device)
    for i, image in zip(jpegs, decoded, strict=True):
        out[i] = _finish(image, _box(planned[i]), size)
    for i in sorted(set(range(len(blobs))) - set(jpegs)):
        out[i] = _cpu_image(blobs[i], _box(planned[i]), size).to(device, non_blocking=True)
    return out


def _rgb_mode() -> Any:
    from torchvision.io import ImageReadMode

    return ImageReadMode.RGB

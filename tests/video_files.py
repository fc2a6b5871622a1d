"""Short real videos for the tests, encoded here with PyAV (H.264 in MP4 by default), each frame showing
its own number and its video's number as black and white stripes that survive lossy compression."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

WIDTH, HEIGHT, BITS = 64, 48, 8  # 8 stripes of 8 pixels: numbers up to 255


def frame_image(video: int, frame: int) -> np.ndarray:
    """RGB (H, W, 3): the top half's stripes are the frame number's bits, the bottom half's the video's."""
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    stripe = WIDTH // BITS
    for bit in range(BITS):
        columns = slice(bit * stripe, (bit + 1) * stripe)
        image[: HEIGHT // 2, columns] = 255 * ((frame >> bit) & 1)
        image[HEIGHT // 2:, columns] = 255 * ((video >> bit) & 1)
    return image


def read_numbers(frames) -> list[tuple[int, int]]:
    """(video, frame) shown by each frame of a uint8 (T, 3, H, W) tensor or array."""
    frames = np.asarray(frames)
    stripe = frames.shape[-1] // BITS
    found = []
    for image in frames:
        gray = image.astype(np.float64).mean(axis=0)  # (H, W)
        top = [gray[: HEIGHT // 2, b * stripe:(b + 1) * stripe].mean() > 128 for b in range(BITS)]
        bottom = [gray[HEIGHT // 2:, b * stripe:(b + 1) * stripe].mean() > 128 for b in range(BITS)]
        found.append((sum(int(v) << b for b, v in enumerate(bottom)), sum(int(v) << b for b, v in enumerate(top))))
    return found


def encode(path: str, video: int, frames: int, rate: int | Fraction = 25, codec: str = "libx264",
           gop: int = 12, bframes: int = 0) -> str:
    """Write ``frames`` numbered frames to ``path`` (the container from its extension); ``bframes`` > 0
    reorders them (decode order is not presentation order, as in most H.264 a camera or ffmpeg writes)."""
    import av

    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.gop_size = gop
        if codec == "libx264":
            stream.options = {"preset": "ultrafast", "crf": "18"} if not bframes else {"preset": "fast",
                                                                                        "bf": str(bframes)}
        for number in range(frames):
            image = av.VideoFrame.from_ndarray(frame_image(video, number), format="rgb24")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def videos(folder: str, lengths: list[int], **kwargs) -> list[str]:
    """One MP4 per length, video v of ``lengths[v]`` frames, named so that a glob sorts them in order."""
    os.makedirs(folder, exist_ok=True)
    return [encode(os.path.join(folder, f"clip-{v:03d}.mp4"), v, n, **kwargs) for v, n in enumerate(lengths)]

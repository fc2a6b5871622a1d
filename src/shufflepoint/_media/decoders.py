"""Reading videos: a container's frame count and rate from its metadata, and chosen frames as uint8 tensors.

Two decoders, the first that imports: torchcodec (``VideoDecoder``: frames by index, straight to a tensor)
and PyAV (its wheels carry FFmpeg). torchcodec's wheel carries no FFmpeg: it loads the system's
``libavcodec`` (FFmpeg 4-7), and where there is none (this project's CI machine) importing it fails with an
``OSError``, so PyAV is the one that runs there. ``SHUFFLEPOINT_VIDEO_DECODER=pyav|torchcodec`` picks one.

Frames are numbered by their timestamps, ``round((pts - start) * time_base * rate)``, and frame ``k`` is the
one shown at ``k / rate``: exactly frame ``k`` at a constant frame rate (every MP4 a camera or ffmpeg writes
at a fixed rate), the frame still on screen at that time at a variable one.
A clip is decoded from the keyframe before its first frame to its last frame, never the whole video. PyAV
keeps FFmpeg's default threading: frame threads (``thread_type="AUTO"``) cost 3.5 ms more per clip of a
small video here (4.9 against 1.4 ms), and the loader's workers are the parallelism.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from shufflepoint._errors import Plain, refusal

_INSTALL = "pip install 'shufflepoint[video]' (PyAV), or torchcodec with FFmpeg's libraries"
DECODERS = ("torchcodec", "pyav")


@dataclass(frozen=True)
class Probe:
    """What a container says of its first video stream: source frames and their rate (an exact fraction)."""

    frames: int
    rate: Fraction


def _pyav() -> Any:
    try:
        import av
    except ImportError as error:
        raise ImportError(refusal("decoder 'pyav'", Plain("no PyAV installed"), "PyAV (the av package)", _INSTALL,
                                  why=str(error))) from None
    return av


def _torchcodec() -> Any:
    try:  # its wheel loads the system's FFmpeg: OSError or RuntimeError where it is missing or too new
        from torchcodec.decoders import VideoDecoder
    except (ImportError, OSError, RuntimeError) as error:
        raise ImportError(refusal("decoder 'torchcodec'", Plain(f"not importable ({type(error).__name__})"),
                                  "torchcodec and FFmpeg 4-7's libraries", _INSTALL, why=str(error)[:300])) from None
    return VideoDecoder


def pick(name: str | None = None) -> str:
    """The decoder to use: ``name``, else ``$SHUFFLEPOINT_VIDEO_DECODER``, else torchcodec where it imports,
    else PyAV; an ImportError saying what to install when neither does."""
    name = name or os.environ.get("SHUFFLEPOINT_VIDEO_DECODER") or None
    if name is not None:
        if name not in DECODERS:
            raise ValueError(refusal("decoder", name, f"one of {DECODERS} or None", "pass decoder='pyav', "
                                     "'torchcodec', or None to take the first that imports"))
        (_torchcodec if name == "torchcodec" else _pyav)()
        return name
    for candidate, load in (("torchcodec", _torchcodec), ("pyav", _pyav)):
        try:
            load()
        except ImportError:
            continue
        return candidate
    raise ImportError(refusal("shufflepoint.VideoClips", Plain("neither torchcodec nor PyAV importable"),
                              "a video decoder", _INSTALL))


def _bad(path: str, what: str, error: BaseException | None = None) -> ValueError:
    return ValueError(refusal(f"video {path!r}", Plain(what), "a readable video with a video stream",
                              "replace or re-encode the file, or leave it out of the list",
                              why=None if error is None else f"{type(error).__name__}: {error}"[:300]))


def _open_pyav(source: Any, path: str) -> tuple[Any, Any]:
    av = _pyav()
    try:
        container = av.open(source, "r")
    except (av.error.FFmpegError, OSError, ValueError) as error:
        raise _bad(path, "a file FFmpeg cannot open", error) from error
    if not container.streams.video:
        container.close()
        raise _bad(path, "no video stream")
    return container, container.streams.video[0]


def probe(source: Any, path: str, decoder: str) -> Probe:
    """The frame count and rate from the container's metadata; where the container states no count (some
    WebM, MKV, raw streams), its packets counted (a demux, no decode). An error naming the file when neither
    gives frames, or the file is no video. ``decoder`` only says which library reads the header."""
    if decoder == "torchcodec":
        try:
            metadata = _torchcodec()(source, seek_mode="approximate").metadata
        except (RuntimeError, ValueError) as error:
            raise _bad(path, "a file torchcodec cannot open", error) from error
        frames, fps = metadata.num_frames, metadata.average_fps
        if frames and fps:
            return Probe(int(frames), Fraction(str(fps)).limit_denominator(1001 * 1000))
    container, stream = _open_pyav(source, path)
    try:
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        frames = int(stream.frames or 0)
        if not frames:
            av = _pyav()
            try:
                frames = sum(1 for packet in container.demux(stream) if packet.size)
            except av.error.FFmpegError as error:
                raise _bad(path, "a stream that cannot be read to its end", error) from error
    finally:
        container.close()
    if not frames:
        raise _bad(path, "no frame count: the container states none and holds no video packet")
    if not rate or rate <= 0:
        raise _bad(path, "no frame rate in the container")
    return Probe(frames, Fraction(rate))


def _rgb_pyav(frame: Any) -> np.ndarray:
    array: np.ndarray = frame.to_ndarray(format="rgb24")
    return array


def decode_pyav(source: Any, path: str, wanted: np.ndarray, rate: Fraction) -> torch.Tensor:
    """Source frames ``wanted`` (ascending, maybe repeated) as uint8 (T, 3, H, W): seek to the keyframe
    before the first, decode to the last, keep the frames whose timestamp numbers them as wanted."""
    av = _pyav()
    container, stream = _open_pyav(source, path)
    needed = set(int(f) for f in wanted)
    last, found = int(wanted[-1]), {}
    try:
        time_base, start = Fraction(stream.time_base), stream.start_time or 0
        first_pts = start + int(Fraction(int(wanted[0])) / rate / time_base)
        container.seek(first_pts, stream=stream, backward=True, any_frame=False)
        found = _collect(container.decode(stream), needed, last, lambda pts: round((pts - start) * time_base * rate))
    except av.error.FFmpegError as error:
        raise _bad(path, f"frames {int(wanted[0])}..{last} cannot be decoded", error) from error
    finally:
        container.close()
    return _stacked(path, wanted, found)


def _collect(frames: Any, needed: set[int], last: int, number: Callable[[int], int]) -> dict[int, np.ndarray]:
    """Each wanted frame number -> the frame shown at its time: the last decoded frame numbered at or before it
    (the frame itself at a constant rate; at a variable rate the one still on screen). Stops at the first
    frame numbered at or past the last wanted; numbers the stream never reaches are left out."""
    pending, found, k = sorted(needed), {}, 0
    shown: Any = None  # the latest decoded frame, and its RGB array once asked for
    shown_rgb: np.ndarray | None = None
    for frame in frames:
        if frame.pts is None:
            continue
        index = number(frame.pts)
        while k < len(pending) and pending[k] < index:
            if shown is not None:
                shown_rgb = _rgb_pyav(shown) if shown_rgb is None else shown_rgb
                found[pending[k]] = shown_rgb
            k += 1
        shown, shown_rgb = frame, None
        if index >= last:
            shown_rgb = _rgb_pyav(frame)
            found.update((wanted, shown_rgb) for wanted in pending[k:])
            break
    return found


def _stacked(path: str, wanted: np.ndarray, found: dict[int, np.ndarray]) -> torch.Tensor:
    missing = sorted(set(int(f) for f in wanted) - found.keys())
    if missing:
        raise _bad(path, f"frames {missing[:5]}{'...' if len(missing) > 5 else ''} not in the stream (the "
                         "container's frame count or rate overstates it, or the file is cut short)")
    frames = np.stack([found[int(f)] for f in wanted])  # (T, H, W, 3)
    return torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()


def decode_torchcodec(source: Any, path: str, wanted: np.ndarray) -> torch.Tensor:
    """Source frames ``wanted`` as uint8 (T, 3, H, W), by torchcodec's indexed access."""
    try:
        decoder = _torchcodec()(source, seek_mode="approximate", dimension_order="NCHW")
        batch = decoder.get_frames_at(indices=[int(f) for f in wanted])
    except (RuntimeError, ValueError, IndexError) as error:
        raise _bad(path, f"frames {int(wanted[0])}..{int(wanted[-1])} cannot be decoded", error) from error
    frames: torch.Tensor = batch.data
    return frames.contiguous()


def decode(decoder: str, source: Any, path: str, wanted: np.ndarray, rate: Fraction) -> torch.Tensor:
    """Frames ``wanted`` of one video with the chosen decoder, uint8 (T, 3, H, W)."""
    if decoder == "torchcodec":
        return decode_torchcodec(source, path, wanted)
    return decode_pyav(source, path, wanted, rate)

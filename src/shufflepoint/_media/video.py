"""``shufflepoint.VideoClips``: a map-style dataset of fixed-length clips cut from video files.

Clip ``i`` is arithmetic over the videos' frame counts (``clips.py``), which are read once from the
containers' headers and kept in the cache folder (``frame_counts.py``); ``clips[i]`` decodes only that
clip's frames (``decoders.py``), in whichever process asks: a DataLoader worker. It is a plain map-style
dataset, so ``shufflepoint.DataLoader`` deals its order, exact and elastic like any other, and its
``fingerprint`` (paths, sizes, frame counts, the clip parameters) joins the state: a resume over other
videos, or clips cut another way, is refused.

Words: docs/glossary.md (clip, fingerprint, state, resume).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from shufflepoint._errors import refusal
from shufflepoint._media import decoders, frame_counts
from shufflepoint._media.clips import ClipTable, checked_count, checked_fps
from shufflepoint._shards.index import sidecar
from shufflepoint._shards.storage.storage import Storage, is_remote

FINGERPRINT_VERSION = 1


class VideoClips(torch.utils.data.Dataset[Any]):
    """Clips of ``frames_per_clip`` frames from video files, each a uint8 tensor (T, C, H, W)::

        clips = shufflepoint.VideoClips("videos/*.mp4", frames_per_clip=16, stride=8, fps=8)
        loader = shufflepoint.DataLoader(clips, batch_size=4, num_workers=4, seed=0)
        for batch in loader:        # uint8 (4, 16, 3, H, W), the same clips after a resume on any world size
            ...

    Clip ``k`` of a video starts at its (resampled) frame ``k * stride``; clips run video after video
    (``_media/clips.py`` has the arithmetic and a worked example). ``len(clips)`` is the number of clips;
    ``locate(i)`` says which video and which source frames clip ``i`` shows (and ``loader.which(step,
    locate=True)`` for a whole step).

    Args:
        videos: paths, fsspec URLs, a glob (sorted) or a ``.txt`` manifest, as ``shufflepoint.Shards`` takes
            them. A remote video is downloaded whole into the cache folder the first time it is read.
        frames_per_clip: frames per clip (T). Default 16.
        stride: (resampled) frames between the starts of two clips of a video; default ``frames_per_clip``
            (clips side by side). Less overlaps them.
        fps: resample every video to this frame rate first (frame ``j`` is the frame shown at ``j / fps``
            seconds), or None to keep every source frame.
        transform: ``fn(frames)`` applied to each clip's uint8 (T, C, H, W) tensor (for per-sample randomness
            that survives a resume use ``DataLoader(transform=fn(sample, rng))``).
        cache_dir: where the frame counts (and downloaded videos) are kept; default ``$SHUFFLEPOINT_CACHE``,
            else ``~/.cache/shufflepoint``.
        decoder: ``"torchcodec"`` or ``"pyav"``; None takes the first that imports (torchcodec, then PyAV).
        storage_options: passed to fsspec for remote videos.
        progress: a progress bar while more than 100 headers are read.
    """

    def __init__(self, videos: str | Sequence[str], frames_per_clip: int = 16, *, stride: int | None = None,
                 fps: float | None = None, transform: Callable[[torch.Tensor], Any] | None = None,
                 cache_dir: str | None = None, decoder: str | None = None,
                 storage_options: dict[str, Any] | None = None, progress: bool = True) -> None:
        frames_per_clip = checked_count("frames_per_clip", frames_per_clip)
        stride = frames_per_clip if stride is None else checked_count("stride", stride)
        rate = checked_fps(fps)
        if transform is not None and not callable(transform):
            raise TypeError(refusal("transform", transform, "a callable fn(frames) or None",
                                    "pass a function of the clip's uint8 (T, C, H, W) tensor"))
        self._decoder = decoders.pick(decoder)
        self._storage = Storage(storage_options)
        self._urls = self._storage.expand(videos)
        if not self._urls:
            raise ValueError(refusal("videos", videos, "at least one video file", "check the path or glob"))
        infos = [self._storage.info(url) for url in self._urls]
        self._sizes = [info.size for info in infos]
        self._versions = [info.version for info in infos]
        self._cache_dir = cache_dir or sidecar.default_cache_dir()
        kept = frame_counts.kept_path(self._cache_dir, self._urls, infos)
        counted = frame_counts.load_or_probe(kept, self._local, self._urls, self._decoder, progress)
        self._table = ClipTable(counted.frames, counted.rate_num, counted.rate_den, frames_per_clip, stride, rate)
        self._starts = self._table.starts
        self._transform = transform
        if int(self._starts[-1]) == 0:
            raise ValueError(refusal("frames_per_clip", frames_per_clip, f"at most the longest video's frames "
                                     f"({int(self._table.resampled.max())} after resampling)",
                                     "pass fewer frames_per_clip, a lower fps, or longer videos",
                                     why="no video is long enough for one clip"))

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def frames(self) -> np.ndarray:
        """Source frames per video, as the containers state them (int64)."""
        found: np.ndarray = self._table.frames.copy()
        return found

    @property
    def clips_per_video(self) -> np.ndarray:
        """Clips each video holds (int64; 0 for a video shorter than a clip)."""
        return self._table.clips

    @property
    def videos(self) -> list[str]:
        """The videos' paths or URLs, in clip order."""
        return list(self._urls)

    @property
    def fingerprint(self) -> str:
        """The corpus and its cut: every video's path, size and frame count and rate, and the clip
        parameters, hashed. A state saved over other videos or other clips is refused on load."""
        table = self._table
        text = json.dumps({"videos": [[u, s] for u, s in zip(self._urls, self._sizes, strict=True)],
                           "frames": table.frames.tolist(), "rates": [table.rate_num.tolist(), table.rate_den.tolist()],
                           "frames_per_clip": table.frames_per_clip, "stride": table.stride,
                           "fps": None if table.fps is None else str(table.fps), "version": FINGERPRINT_VERSION},
                          sort_keys=True)
        return "videoclips:" + hashlib.sha256(text.encode()).hexdigest()[:32]

    def _clip(self, index: int) -> tuple[int, int]:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(refusal("index", index, "an int clip index", "index clips with an int"))
        index = int(index)
        if index < 0:
            index += len(self)
        videos, firsts = self._table.locate(np.array([index]), self._starts)
        return int(videos[0]), int(firsts[0])

    def locate(self, index: int) -> dict[str, Any]:
        """Where clip ``index`` comes from: its video (number and path) and the source frames it shows."""
        video, first = self._clip(index)
        wanted = self._table.source_frames(video, first)
        return {"index": int(index), "video": video, "path": self._urls[video], "frames": wanted.tolist()}

    def __getitem__(self, index: int) -> Any:
        video, first = self._clip(index)
        wanted = self._table.source_frames(video, first)
        rate = Fraction(int(self._table.rate_num[video]), int(self._table.rate_den[video]))
        frames = decoders.decode(self._decoder, self._local(video), self._urls[video], wanted, rate)
        return frames if self._transform is None else self._transform(frames)

    def _local(self, video: int) -> str:
        """A local path to read video ``video`` from: the file itself, or the object downloaded once into the
        cache folder (checked against the size and version it was listed with)."""
        url, size, version = self._urls[video], self._sizes[video], self._versions[video]
        if not is_remote(url):
            return self._storage.local_path(url, size, version)
        key = hashlib.sha256(json.dumps([url, size, version]).encode()).hexdigest()[:24]
        path = os.path.join(self._cache_dir, "videos", key + os.path.splitext(url.rsplit("/", 1)[-1])[1])
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{path}.{os.getpid()}.part"
            self._storage.fetch(url, partial, size, version)
            os.replace(partial, path)
        return path

    def __repr__(self) -> str:
        table = self._table
        fps = "" if table.fps is None else f", fps={table.fps}"
        return (f"shufflepoint.VideoClips({len(self)} clips of {table.frames_per_clip} frames from "
                f"{len(self._urls)} videos, stride={table.stride}{fps}, decoder={self._decoder!r})")


"""Every video's frame count and rate, read once from container metadata and kept in the cache folder.

A ``VideoClips`` needs each video's frames and rate to number its clips. They come from the container's
header (an MP4's sample table), not a decode; a container that states no count has its packets counted
(a demux). What was read is written to ``videos-<key>.json`` in the cache folder (``cache_dir``, else
``$SHUFFLEPOINT_CACHE``, else ``~/.cache/shufflepoint``), where ``key`` hashes every video's path, size and
version (mtime_ns for a local file, the ETag or generation for an object) and this file's format version:
the next process (a restart, another rank or worker on the node) reads that file and opens no video.
A video rewritten in place changes its version, so its counts are read again. Several processes reading
the same list at once take a lock: one reads the headers, the others the file it wrote.

Words: docs/glossary.md (clip, node cache).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._media import decoders
from shufflepoint._shards.index import sidecar
from shufflepoint._shards.storage.storage import ObjectInfo

VERSION = 1  # of the kept file; part of its key


@dataclass(frozen=True)
class Counted:
    """Per video: source frames and their rate ``rate_num / rate_den``; each an int64 array."""

    frames: np.ndarray
    rate_num: np.ndarray
    rate_den: np.ndarray

    def to_json(self) -> dict[str, list[int]]:
        return {"frames": self.frames.tolist(), "rate_num": self.rate_num.tolist(), "rate_den": self.rate_den.tolist()}

    @classmethod
    def of(cls, probes: Sequence[decoders.Probe]) -> Counted:
        return cls(np.array([p.frames for p in probes], dtype=np.int64),
                   np.array([p.rate.numerator for p in probes], dtype=np.int64),
                   np.array([p.rate.denominator for p in probes], dtype=np.int64))


def kept_path(cache_dir: str | None, urls: Sequence[str], infos: Sequence[ObjectInfo]) -> str:
    """Where the counts of exactly these videos (paths, sizes, versions) are kept."""
    text = json.dumps({"videos": [[url, info.size, info.version] for url, info in zip(urls, infos, strict=True)],
                       "version": VERSION}, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    return os.path.join(cache_dir or sidecar.default_cache_dir(), f"videos-{key}.json")


def load(path: str, videos: int) -> Counted | None:
    """The kept counts, or None when there are none; an error naming a damaged file."""
    try:
        with open(path) as f:
            value = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(refusal(path, Plain("unreadable frame counts"), "a JSON file of frame counts",
                                 "delete it to read the videos' headers again", why=str(error))) from error
    try:
        found = Counted(*(np.asarray(value[key], dtype=np.int64) for key in ("frames", "rate_num", "rate_den")))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(refusal(path, Plain("frame counts of another shape"), "frames, rate_num, rate_den lists",
                                 "delete it to read the videos' headers again", why=str(error))) from error
    if any(a.shape != (videos,) for a in (found.frames, found.rate_num, found.rate_den)) \
            or (found.frames < 0).any() or (found.rate_num <= 0).any() or (found.rate_den <= 0).any():
        raise ValueError(refusal(path, Plain("frame counts that do not fit the videos"),
                                 f"{videos} counts >= 0 and rates > 0", "delete it to read the videos' headers again",
                                 why="the file is damaged"))
    return found


def load_or_probe(path: str, source: Callable[[int], str], names: Sequence[str], decoder: str,
                  progress: bool) -> Counted:
    """Every video's count: read from ``path``, else from the headers (and kept there). ``source(v)`` is a
    local path to read video ``v`` from (a remote one downloaded), asked only when the headers are read."""
    return sidecar.kept_or_made(path, lambda kept: load(kept, len(names)),
                                lambda: _probe_all(source, names, decoder, progress),
                                lambda kept, found: sidecar.write_json(kept, found.to_json()))


def _probe_all(source: Callable[[int], str], names: Sequence[str], decoder: str, progress: bool) -> Counted:
    bar = None
    if progress and len(names) > 100:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(names), desc="shufflepoint: reading video headers", unit="video", disable=None)
        except ImportError:
            bar = None
    probes = []
    for video, name in enumerate(names):
        probes.append(decoders.probe(source(video), name, decoder))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return Counted.of(probes)


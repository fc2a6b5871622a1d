"""Clip ``i`` of a set of videos -> (video, the source frames it shows), by arithmetic.

Vocabulary: a video has ``frames`` source frames at ``rate`` frames per second (an exact fraction, as the
container states it). With ``fps`` (optional) the video is *resampled*: its resampled frame ``j`` is the
source frame shown at time ``j / fps``, ``floor(j * rate / fps)``, and it has ``ceil(frames * fps / rate)``
resampled frames (every time ``j / fps`` before the video's end, ``frames / rate``). Without ``fps``
resampled and source frames are the same. A *clip* is ``frames_per_clip`` consecutive resampled frames;
clip ``k`` of a video starts at resampled frame ``k * stride``; a video of ``m`` resampled frames holds
``(m - frames_per_clip) // stride + 1`` clips (none when ``m < frames_per_clip``). Clips are numbered video
after video.

Worked, with 3 videos of 10, 3 and 7 frames at 25 fps, ``frames_per_clip=4``, ``stride=3``, no ``fps``: the
videos hold 3, 0 and 2 clips, prefix sums [0, 3, 3, 5], so ``len = 5``; clip 4 is the video whose prefix sums
bracket it (binary search: video 2, its clip 4 - 3 = 1), frames [3, 4, 5, 6] of video 2. With ``fps=12.5``
(half the rate) the videos have 5, 2 and 4 resampled frames (7 / 2 rounded up), 1, 0 and 1 clips: source
frames [0, 2, 4, 6] of videos 0 and 2
(``tests/media/test_clips.py`` pins these values).

Per lookup: O(log videos) (``searchsorted`` over the prefix sums), vectorised over many clips at once; the
table is O(videos), computed once from the counts, never O(clips) or O(frames).

Words: docs/glossary.md (clip).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from shufflepoint._errors import Plain, refusal


def checked_fps(fps: object) -> Fraction | None:
    """The resampled frame rate as an exact fraction (a float read as its decimal text), or None."""
    if fps is None:
        return None
    if isinstance(fps, bool) or not isinstance(fps, (int, float, Fraction, np.integer, np.floating)):
        raise TypeError(refusal("fps", fps, "a frame rate > 0 (int, float or Fraction) or None",
                                "pass fps=8 (frames per second after resampling), or leave it out"))
    if not np.isfinite(float(fps)) or fps <= 0:
        raise ValueError(refusal("fps", fps, "a frame rate > 0", "pass a positive frames-per-second, or leave it "
                                 "out to keep every source frame"))
    return Fraction(str(fps)) if isinstance(fps, (float, np.floating)) else Fraction(fps)  # type: ignore[arg-type]


def checked_count(field: str, value: object) -> int:
    """A positive count of frames (``frames_per_clip``, ``stride``): the argument named when it is not."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(refusal(field, value, "an int >= 1", f"pass {field} as a number of frames"))
    if int(value) <= 0:
        raise ValueError(refusal(field, value, "an int >= 1", f"pass {field} >= 1 (a number of frames)"))
    return int(value)


@dataclass(frozen=True)
class ClipTable:
    """Every video's frame count and rate (``rate_num / rate_den`` frames per second), and the clips cut from
    them: ``clips[v]`` per video and their prefix sums ``starts`` (videos + 1 int64s)."""

    frames: np.ndarray  # int64 per video: source frames
    rate_num: np.ndarray  # int64 per video
    rate_den: np.ndarray  # int64 per video
    frames_per_clip: int
    stride: int
    fps: Fraction | None

    def __post_init__(self) -> None:
        if self.frames.size and int(self.frames.min()) < 0:
            raise ValueError(refusal("frames", Plain(f"a count of {int(self.frames.min())}"), "counts >= 0",
                                     "pass frame counts of the videos"))
        if (self.rate_num <= 0).any() or (self.rate_den <= 0).any():
            raise ValueError(refusal("rate", Plain("a frame rate <= 0"), "rates > 0",
                                     "pass each video's frame rate as a positive fraction"))

    @property
    def resampled(self) -> np.ndarray:
        """Frames per video after resampling to ``fps`` (the source counts without ``fps``)."""
        if self.fps is None:
            return self.frames
        # ceil(frames * fps / rate) = -floor(-frames * fps_num * rate_den / (fps_den * rate_num)), exactly
        found: np.ndarray = -((-self.frames * self.fps.numerator * self.rate_den)
                              // (self.fps.denominator * self.rate_num))
        return found

    @property
    def clips(self) -> np.ndarray:
        """Clips per video: ``(m - frames_per_clip) // stride + 1``, or 0 where ``m < frames_per_clip``."""
        resampled = self.resampled
        found: np.ndarray = np.where(resampled >= self.frames_per_clip,
                                     (resampled - self.frames_per_clip) // self.stride + 1, 0)
        return found.astype(np.int64)

    @property
    def starts(self) -> np.ndarray:
        """Where each video's clips start in the clip numbering, and the total: videos + 1 int64s."""
        return np.concatenate(([0], np.cumsum(self.clips))).astype(np.int64)

    def locate(self, clips: np.ndarray, starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(video, first resampled frame) of each clip, by binary search over the prefix sums."""
        starts = self.starts if starts is None else starts
        clips = np.asarray(clips, dtype=np.int64)
        total = int(starts[-1])
        if clips.size and (int(clips.min()) < 0 or int(clips.max()) >= total):
            raise IndexError(refusal("clip", Plain(f"{int(clips.min())}..{int(clips.max())}"), f"each in [0, {total})",
                                     "pass a clip index below len(clips)"))
        videos = np.searchsorted(starts, clips, side="right") - 1
        return videos, (clips - starts[videos]) * self.stride

    def source_frames(self, video: int, first: int) -> np.ndarray:
        """The source frames of the clip starting at resampled frame ``first`` of ``video``, in order."""
        resampled = first + np.arange(self.frames_per_clip, dtype=np.int64)
        if self.fps is None:
            return resampled
        # floor(j * rate / fps) = floor(j * rate_num * fps_den / (rate_den * fps_num))
        return (resampled * int(self.rate_num[video]) * self.fps.denominator) // (
            int(self.rate_den[video]) * self.fps.numerator)

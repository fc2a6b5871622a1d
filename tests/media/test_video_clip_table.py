"""Clip i -> (video, frames): the worked example of ``_media/clips.py``, and its arithmetic against a brute
force enumeration of every clip for any frame counts, rates, clip lengths, strides and resampled rates."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._media.clips import ClipTable, checked_count, checked_fps


def table(frames, frames_per_clip, stride, fps=None, rates=None):
    rates = rates or [Fraction(25)] * len(frames)
    return ClipTable(np.array(frames, dtype=np.int64), np.array([r.numerator for r in rates], dtype=np.int64),
                     np.array([r.denominator for r in rates], dtype=np.int64), frames_per_clip, stride,
                     checked_fps(fps))


def test_the_worked_example():
    clips = table([10, 3, 7], 4, 3)
    assert clips.clips.tolist() == [3, 0, 2] and clips.starts.tolist() == [0, 3, 3, 5]
    videos, firsts = clips.locate(np.arange(5))
    assert videos.tolist() == [0, 0, 0, 2, 2] and firsts.tolist() == [0, 3, 6, 0, 3]
    assert clips.source_frames(2, 3).tolist() == [3, 4, 5, 6]
    half = table([10, 3, 7], 4, 3, fps=12.5)
    assert half.resampled.tolist() == [5, 2, 4] and half.clips.tolist() == [1, 0, 1]
    assert half.source_frames(0, 0).tolist() == half.source_frames(2, 0).tolist() == [0, 2, 4, 6]


def brute_force(frames, rates, frames_per_clip, stride, fps):
    """Every clip as (video, source frames), by walking each video's resampled frames one by one."""
    found = []
    for video, (count, rate) in enumerate(zip(frames, rates, strict=True)):
        resampled = []
        j = 0
        while True:  # resampled frame j shows the source frame at time j / fps, if the video has it
            source = j if fps is None else int(Fraction(j) * rate / fps)  # floor
            if fps is not None and Fraction(j) / fps >= Fraction(count) / rate:
                break
            if fps is None and j >= count:
                break
            resampled.append(source)
            j += 1
        for first in range(0, len(resampled) - frames_per_clip + 1, stride):
            found.append((video, resampled[first:first + frames_per_clip]))
    return found


RATES = st.sampled_from([Fraction(25), Fraction(30000, 1001), Fraction(24), Fraction(60), Fraction(15, 2)])


@settings(max_examples=150, deadline=None)
@given(frames=st.lists(st.integers(0, 80), min_size=1, max_size=8), rates=st.data(),
       frames_per_clip=st.integers(1, 12), stride=st.integers(1, 10),
       fps=st.one_of(st.none(), st.sampled_from([1, 7.5, 8, 12.5, 24, 29.97, 50, 120])))
def test_every_clip_is_the_brute_force_clip(frames, rates, frames_per_clip, stride, fps):
    video_rates = [rates.draw(RATES) for _ in frames]
    clips = table(frames, frames_per_clip, stride, fps, video_rates)
    expected = brute_force(frames, video_rates, frames_per_clip, stride, checked_fps(fps))
    assert int(clips.starts[-1]) == len(expected)
    videos, firsts = clips.locate(np.arange(len(expected)))
    got = [(int(v), clips.source_frames(int(v), int(f)).tolist()) for v, f in zip(videos, firsts, strict=True)]
    assert got == expected
    for video, shown in got:
        assert all(0 <= f < frames[video] for f in shown) and shown == sorted(shown)


def test_a_clip_outside_the_table_is_refused_by_index():
    with pytest.raises(IndexError, match=r"clip: found 5\.\.5\n  expected: each in \[0, 5\)"):
        table([10, 3, 7], 4, 3).locate(np.array([5]))


@pytest.mark.parametrize(("field", "value", "error"), [
    ("frames_per_clip", 0, ValueError), ("frames_per_clip", -2, ValueError), ("stride", 0, ValueError),
    ("stride", True, TypeError), ("frames_per_clip", 2.0, TypeError)])
def test_counts_below_one_are_refused_by_name(field, value, error):
    with pytest.raises(error, match=rf"^{field}: found {value!r}\n  expected: an int >= 1"):
        checked_count(field, value)


@pytest.mark.parametrize(("fps", "error"), [(0, ValueError), (-8, ValueError), ("8", TypeError),
                                            (float("inf"), ValueError), (True, TypeError)])
def test_a_bad_fps_is_refused_by_name(fps, error):
    with pytest.raises(error, match=r"^fps: found"):
        checked_fps(fps)


def test_an_fps_float_is_read_as_its_decimal():
    assert checked_fps(29.97) == Fraction(2997, 100) and checked_fps(8) == 8 and checked_fps(None) is None

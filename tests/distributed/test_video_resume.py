"""``shufflepoint.VideoClips`` under ``shufflepoint.DataLoader(shuffle=True)`` with 2 workers per rank, in
real, fresh processes on Gloo: 2 ranks stopped mid-epoch resume on 2 ranks exactly, batch for batch, and on 3
ranks (1 worker each) with every clip of the interrupted epoch once. A clip is recorded by the numbers its
decoded frames show (tests/video_files.py), so the check covers what was decoded, not only the indices."""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_shards_resume import LAUNCH_TIMEOUT, WORKER, check_elastic, check_same_world, flat, read

from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from video_files import videos  # noqa: E402

pytest.importorskip("av")
pytestmark = pytest.mark.timeout(600)
LENGTHS = [20 + 3 * v for v in range(12)]  # 12 videos of 20..53 frames


def scenario(name, corpus, save_at, **kwargs):
    return {"name": name, "corpus": corpus, "batch_size": 4, "seed": 29, "epochs": 2, "save_at": save_at,
            "num_workers": 2, **kwargs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("video"))
    videos(os.path.join(out, "videos"), LENGTHS)
    corpus = {"kind": "video", "sources": os.path.join(out, "videos", "*.mp4"), "frames_per_clip": 4, "stride": 3,
              "fps": 12.5, "cache_dir": os.path.join(out, "cache")}
    saved = scenario("video", corpus, [0, 5])

    def go(mode, scenarios, nproc):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT).check()

    go("save", [saved], 2)
    go("resume", [dict(saved, source="video", saved_world=2)], 2)
    go("resume", [dict(saved, name="video_to_three", source="video", saved_world=2, num_workers=1)], 3)
    for kind in ("ref", "before"):  # the three ranks resumed the two ranks' run
        for rank in range(2):
            named = (os.path.join(out, f"{name}.{kind}.r{rank}.json") for name in ("video", "video_to_three"))
            os.link(*named)
    return out, corpus


def expected_clips(corpus):
    """Every clip of the corpus as the worker records it: its video and its source frames (fps halves 25)."""
    found = []
    for video, frames in enumerate(LENGTHS):
        resampled = -(-frames // 2)
        for first in range(0, resampled - corpus["frames_per_clip"] + 1, corpus["stride"]):
            found.append(f"{video}:" + ",".join(str(2 * j) for j in range(first, first + corpus["frames_per_clip"])))
    return found


def test_two_ranks_with_workers_resume_clip_for_clip(runs):
    out, corpus = runs
    check_same_world(out, "video", 2)
    reference = read(out, "video.ref", 2)
    epoch, clips = [clip for rank in reference for clip in flat(rank["0"])], expected_clips(corpus)
    assert len(clips) == 66 and set(epoch) == set(clips) and 0 <= len(epoch) - len(clips) < 2  # tail padding


def test_three_ranks_finish_the_epoch_two_started_each_clip_once(runs):
    out, corpus = runs
    check_elastic(out, "video_to_three", 2, 3, expected_clips(corpus))

"""``Packed`` rows over a JSONL corpus on disk, in real, fresh processes: 2 ranks resume exactly,
row for row, also after a SIGKILL; 2 -> 3 ranks (with 2 workers) serve every row of the interrupted
epoch once. A corpus in the local S3 server: 2 ranks (2 workers each) SIGKILLed while reading it
mid-epoch, 3 fresh ranks finish the epoch, every row once, each row's tokens those of a reference
computed in this process. The S3 case rides in the disk case's launches (a launch costs 10-15 s), and so does
``shufflepoint.VideoClips`` (``DataLoader(shuffle=True)``, 2 workers per rank): 2 ranks stopped mid-epoch
resume on 2 ranks clip for clip and on 3 ranks (1 worker each) with every clip of the epoch once; a clip is
recorded by the numbers its decoded frames show (tests/video_files.py), so the pixels are checked too."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter

import numpy as np
import pytest
from test_shards_resume import LAUNCH_TIMEOUT, WORKER, check_elastic, check_same_world, flat, read

import shufflepoint
from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_documents  # noqa: E402
from video_files import videos  # noqa: E402

pytestmark = pytest.mark.timeout(900)
SEQ_LEN, EOS = 16, 10**9
VIDEO_LENGTHS = [20 + 3 * v for v in range(12)]  # 12 H.264 videos of 20..53 frames
VIDEO_CLIPS = {"frames_per_clip": 4, "stride": 3, "fps": 12.5}  # 66 clips


def scenario(name, corpus, save_at, **kwargs):
    return {"name": name, "corpus": corpus, "batch_size": 8, "seed": 23, "epochs": 2, "save_at": save_at,
            "shuffle_block": 64, **kwargs}


def reference_rows(folder, seed, shuffle_block, world_size):
    """Epoch 0's rows, in stream order, from the local copy of the corpus, in this process, laid along the spans
    deal's stretches of the run's first world (``packed_layout``)."""
    shards = shufflepoint.Shards(os.path.join(folder, "part-*"), progress=False)
    packed = shufflepoint.Packed(shards, SEQ_LEN, eos=EOS, progress=False)
    indices = packed.epoch_order(seed, 0, shuffle_block, stretches=world_size).take(np.arange(len(packed)))
    return ["-".join(map(str, row["input_ids"].tolist())) for row in packed.__getitems__(indices.tolist())]


def in_s3(s3_server, out):
    """A bucket of 40 JSONL shards, the Packed scenario reading it, its reference rows and tokens."""
    local, bucket = os.path.join(out, "s3-docs"), "packed-" + uuid.uuid4().hex[:8]
    tokens = jsonl_documents(local, 40, seed=1)
    s3_server.reset()
    s3_server.upload(bucket, local, prefix="docs/")
    shards = {"kind": "shards", "sources": f"s3://{bucket}/docs/part-*", "storage_options": s3_server.storage_options,
              "cache_dir": os.path.join(out, "s3-cache")}
    s3 = scenario("packed_s3", {"kind": "packed", "source": shards, "seq_len": SEQ_LEN, "eos": EOS}, None,
                  epochs=1, num_workers=2, kill=True, reference=False)
    rows = reference_rows(local, s3["seed"], s3["shuffle_block"], 2)  # two ranks start it
    # Save where the 3 new ranks split what remains evenly: no tail padding, so "each row once" is exact.
    half, global_batch = len(rows) // (2 * s3["batch_size"]) // 2, 2 * s3["batch_size"]
    s3["save_at"] = [0, next(k for k in range(half, half + 3) if (len(rows) - global_batch * k) % 3 == 0)]
    return s3, rows, tokens


def video_scenario(out):
    """12 H.264 videos resampled to 12.5 fps, clips of 4 frames every 3: 66 clips, shuffled, 2 workers."""
    videos(os.path.join(out, "videos"), VIDEO_LENGTHS)
    corpus = {"kind": "video", "sources": os.path.join(out, "videos", "*.mp4"), **VIDEO_CLIPS,
              "cache_dir": os.path.join(out, "video-cache")}
    return {"name": "video", "corpus": corpus, "batch_size": 4, "seed": 29, "epochs": 2, "save_at": [0, 5],
            "num_workers": 2}


def expected_clips():
    """Every clip as the worker records it, "video:frame,frame,...": its source frames (12.5 fps halves 25)."""
    found, length, stride = [], VIDEO_CLIPS["frames_per_clip"], VIDEO_CLIPS["stride"]
    for video, frames in enumerate(VIDEO_LENGTHS):
        for first in range(0, -(-frames // 2) - length + 1, stride):
            found.append(f"{video}:" + ",".join(str(2 * j) for j in range(first, first + length)))
    return found


@pytest.fixture(scope="module")
def runs(s3_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("packed"))
    tokens = jsonl_documents(os.path.join(out, "docs"), 200)
    shards = {"kind": "shards", "sources": os.path.join(out, "docs", "part-*"), "cache_dir": os.path.join(out, "c")}
    corpus = {"kind": "packed", "source": shards, "seq_len": SEQ_LEN, "eos": EOS}
    same, elastic = scenario("packed", corpus, [1, 10]), scenario("packed_to_three", corpus, [1, 25])
    s3, s3_rows, s3_tokens = in_s3(s3_server, out)

    def go(mode, scenarios, nproc):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT).check()

    killed = scenario("packed_killed", corpus, [0, 30], num_workers=2)
    video = video_scenario(out)
    # Every 2-rank save in one launch (a launch fewer); the last, from the bucket, then reads on (2 workers
    # each) until the launcher SIGKILLs every process mid-epoch.
    stopped = launch([WORKER, "save", out, json.dumps([same, elastic, video, killed, s3])], 2, timeout=LAUNCH_TIMEOUT,
                     kill_when=os.path.join(out, "packed_s3.saved"))
    if not stopped.killed:
        stopped.check()  # a save before the kill failed: raises with the workers' stderr
    assert stopped.killed, "the kill scenario was supposed to be SIGKILLed"
    go("resume", [dict(same, source="packed", saved_world=2), dict(killed, source="packed_killed", saved_world=2),
                  dict(video, source="video", saved_world=2)], 2)
    go("resume", [dict(elastic, source="packed_to_three", saved_world=2, num_workers=2),
                  dict(s3, source="packed_s3", saved_world=2, num_workers=0, kill=False),
                  dict(video, name="video_to_three", source="video", saved_world=2, num_workers=1)], 3)
    for kind in ("ref", "before"):  # the three ranks resumed the two ranks' video run
        for rank in range(2):
            os.link(*(os.path.join(out, f"{name}.{kind}.r{rank}.json") for name in ("video", "video_to_three")))
    return out, tokens, (s3, s3_rows, s3_tokens, s3_server.faults.requests)


def test_same_world_size_resumes_row_for_row(runs):
    out, *_ = runs
    check_same_world(out, "packed", 2)


def test_sigkill_after_a_checkpoint_loses_and_repeats_no_row(runs):
    out, *_ = runs
    check_same_world(out, "packed_killed", 2)


def test_three_ranks_finish_the_epoch_two_started_each_row_once(runs):
    out, tokens, _ = runs
    check_elastic(out, "packed_to_three", 2, 3)
    befores, resumed = read(out, "packed_to_three.before", 2), read(out, "packed_to_three.resumed", 3)
    rows = set(flat(befores[0]["1"]) + flat(befores[1]["1"]) + [i for r in range(3) for i in flat(resumed[r]["1"])])
    served = Counter(int(t) for row in rows for t in row.split("-") if int(t) != EOS)
    assert all(len(row.split("-")) == SEQ_LEN for row in rows)
    assert max(served.values()) == 1 and set(served) <= set(tokens)  # no token twice, none invented
    eos_count = sum(row.split("-").count(str(EOS)) for row in rows)
    assert len(rows) * SEQ_LEN == len(served) + eos_count
    assert len(tokens) - len(served) < SEQ_LEN  # the dropped tail: fewer than SEQ_LEN tokens of the epoch


def test_three_ranks_finish_from_s3_what_two_killed_ranks_started_each_row_once(runs):
    out, _, (s3, reference, tokens, requests) = runs
    assert requests >= 40  # the bucket was read over HTTP, at least a request per shard (87 seen)
    befores, resumed = read(out, "packed_s3.before", 2), read(out, "packed_s3.resumed", 3)
    assert [len(flat(before["0"])) for before in befores] == [s3["batch_size"] * s3["save_at"][1]] * 2
    assert all(list(r) == ["0"] and flat(r["0"]) for r in resumed)  # each new rank finished epoch 0, only it
    served = [row for before in befores for row in flat(before["0"])] + [row for r in resumed for row in flat(r["0"])]
    assert Counter(served) == Counter(reference)  # every row of the epoch once, its tokens the reference's
    corpus_tokens = Counter(int(t) for row in served for t in row.split("-") if int(t) != EOS)
    assert max(corpus_tokens.values()) == 1 and len(tokens) - len(corpus_tokens) < SEQ_LEN  # only the tail dropped


def test_video_clips_with_workers_resume_clip_for_clip(runs):
    out, *_ = runs
    check_same_world(out, "video", 2)
    epoch = [clip for rank in read(out, "video.ref", 2) for clip in flat(rank["0"])]
    clips = expected_clips()
    assert len(clips) == 66 and set(epoch) == set(clips) and 0 <= len(epoch) - len(clips) < 2  # tail padding


def test_video_clips_on_three_ranks_finish_the_epoch_two_started_each_clip_once(runs):
    out, *_ = runs
    check_elastic(out, "video_to_three", 2, 3, expected_clips())

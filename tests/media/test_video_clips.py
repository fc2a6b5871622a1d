"""``shufflepoint.VideoClips`` over short H.264/MP4 (and MPEG-4, MKV) videos encoded here: every clip's
frames are the ones its arithmetic names (each frame shows its own number), the counts are kept and a
fresh process reads no header, the fingerprint guards a resume, and bad input is refused by name."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

import shufflepoint
from shufflepoint import StateError
from shufflepoint._media import decoders

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from video_files import encode, read_numbers, videos  # noqa: E402

pytest.importorskip("av")
LENGTHS = [40, 3, 30, 17]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("videos"))
    videos(root, LENGTHS)
    return root


def clips_of(folder, tmp_path, **kwargs):
    return shufflepoint.VideoClips(os.path.join(folder, "*.mp4"), cache_dir=str(tmp_path / "cache"), **kwargs)


@pytest.mark.parametrize(("kwargs", "count"), [({"frames_per_clip": 4, "stride": 3}, 13 + 0 + 9 + 5),
                                              ({"frames_per_clip": 5, "stride": 2, "fps": 12.5}, 8 + 0 + 6 + 3),
                                              ({"frames_per_clip": 8}, 5 + 0 + 3 + 2)])
def test_every_clip_shows_the_frames_its_arithmetic_names(folder, tmp_path, kwargs, count):
    clips = clips_of(folder, tmp_path, **kwargs)
    assert len(clips) == count and clips.frames.tolist() == LENGTHS
    for i in range(len(clips)):
        frames, where = clips[i], clips.locate(i)
        assert frames.dtype == torch.uint8 and frames.shape == (kwargs["frames_per_clip"], 3, 48, 64)
        assert read_numbers(frames) == [(where["video"], f) for f in where["frames"]], i
    if "fps" in kwargs:  # every other source frame
        assert clips.locate(0)["frames"] == [0, 2, 4, 6, 8]


def test_mpeg4_at_a_fractional_rate_b_frames_and_a_container_without_a_frame_count(tmp_path):
    mpeg4 = encode(str(tmp_path / "a.mp4"), 7, 20, rate=Fraction(30000, 1001), codec="mpeg4")
    mkv = encode(str(tmp_path / "b.mkv"), 9, 11)  # Matroska states no frame count: the packets are counted
    reordered = encode(str(tmp_path / "c.mp4"), 5, 40, gop=10, bframes=3)
    assert decoders.probe(mkv, mkv, "pyav").frames == 11
    clips = shufflepoint.VideoClips([mpeg4, mkv, reordered], frames_per_clip=5, stride=5,
                                    cache_dir=str(tmp_path / "c"))
    assert clips.frames.tolist() == [20, 11, 40] and len(clips) == 4 + 2 + 8
    assert read_numbers(clips[5]) == [(9, f) for f in range(5, 10)]
    assert read_numbers(clips[3]) == [(7, f) for f in range(15, 20)]
    for i in range(6, 14):  # B-frames: each clip still shows its frames, in order
        assert read_numbers(clips[i]) == [(5, f) for f in clips.locate(i)["frames"]]


def test_the_counts_are_kept_and_a_fresh_process_opens_no_header(folder, tmp_path):
    first = clips_of(folder, tmp_path, frames_per_clip=4)
    kept = [name for name in os.listdir(tmp_path / "cache") if name.startswith("videos-")]
    assert len(kept) == 1
    script = f"""
import shufflepoint
from shufflepoint._media import decoders
def refused(*args):
    raise AssertionError("a header was read")
decoders.probe = refused
clips = shufflepoint.VideoClips({os.path.join(folder, '*.mp4')!r}, frames_per_clip=4,
                                cache_dir={str(tmp_path / 'cache')!r})
print(len(clips), clips.fingerprint)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [str(len(first)), first.fingerprint]


def test_the_fingerprint_names_the_videos_and_the_cut(folder, tmp_path):
    base = clips_of(folder, tmp_path, frames_per_clip=4)
    assert base.fingerprint == clips_of(folder, tmp_path, frames_per_clip=4).fingerprint
    others = [clips_of(folder, tmp_path, frames_per_clip=5), clips_of(folder, tmp_path, frames_per_clip=4, stride=2),
              clips_of(folder, tmp_path, frames_per_clip=4, fps=10),
              shufflepoint.VideoClips(sorted(os.path.join(folder, f) for f in os.listdir(folder))[:3],
                                      frames_per_clip=4, cache_dir=str(tmp_path / "cache"))]
    assert len({base.fingerprint, *(o.fingerprint for o in others)}) == 5


def test_a_state_over_other_videos_is_refused(folder, tmp_path):
    loader = shufflepoint.DataLoader(clips_of(folder, tmp_path, frames_per_clip=4), batch_size=2, seed=3)
    next(iter(loader))
    state = json.loads(json.dumps(loader.state_dict()))
    reordered = sorted(os.path.join(folder, f) for f in os.listdir(folder))[::-1]
    same_length = shufflepoint.VideoClips(reordered, frames_per_clip=4, cache_dir=str(tmp_path / "cache"))
    assert len(same_length) == len(loader.dataset)
    with pytest.raises(StateError, match="dataset_fingerprint"):
        shufflepoint.DataLoader(same_length, batch_size=2, seed=3).load_state_dict(state)


def test_workers_serve_every_clip_once_in_the_loaders_order(folder, tmp_path):
    clips = clips_of(folder, tmp_path, frames_per_clip=4, stride=4)
    loader = shufflepoint.DataLoader(clips, batch_size=3, seed=5, num_workers=2)
    batches = list(loader)
    assert all(b.dtype == torch.uint8 and b.shape[1:] == (4, 3, 48, 64) for b in batches)
    served = [read_numbers(clip)[0] for b in batches for clip in b]
    expected = [(clips.locate(i)["video"], clips.locate(i)["frames"][0]) for i in loader.which(0)[0]]
    assert served[:3] == expected
    located = loader.which(0, locate=True)[0]
    assert [(where["video"], where["frames"][0]) for where in located] == expected
    assert all(where["path"].endswith(f"clip-{where['video']:03d}.mp4") for where in located)
    assert sorted(served) == sorted((clips.locate(i)["video"], clips.locate(i)["frames"][0]) for i in range(len(clips)))


def test_bad_arguments_are_refused_by_name(folder, tmp_path):
    with pytest.raises(ValueError, match=r"^frames_per_clip: found 0"):
        clips_of(folder, tmp_path, frames_per_clip=0)
    with pytest.raises(ValueError, match=r"^stride: found -1"):
        clips_of(folder, tmp_path, stride=-1)
    with pytest.raises(ValueError, match=r"^frames_per_clip: found 41\n.*at most the longest video's frames \(40"):
        clips_of(folder, tmp_path, frames_per_clip=41)
    with pytest.raises(ValueError, match=r"^decoder: found 'ffmpeg'"):
        clips_of(folder, tmp_path, decoder="ffmpeg")
    with pytest.raises(TypeError, match=r"^transform: found 3"):
        clips_of(folder, tmp_path, transform=3)


def test_a_corrupt_or_cut_video_is_refused_naming_the_file(folder, tmp_path):
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match=r"^video '.*corrupt\.mp4': found a file FFmpeg cannot open"):
        shufflepoint.VideoClips([str(corrupt)], frames_per_clip=2, cache_dir=str(tmp_path / "c"))
    whole = pathlib.Path(folder, "clip-000.mp4").read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole[: len(whole) // 2])  # the header (at the end of this MP4) is gone
    with pytest.raises(ValueError, match=r"^video '.*cut\.mp4': found "):
        shufflepoint.VideoClips([str(cut)], frames_per_clip=2, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"^video '.*silent\.mkv': found no frame count"):
        shufflepoint.VideoClips([silent_video(str(tmp_path / "silent.mkv"))], frames_per_clip=2,
                                cache_dir=str(tmp_path / "c"))


def silent_video(path):
    """A Matroska file with a video stream that holds no packet (and some audio): no count, none to count."""
    import av

    with av.open(path, "w") as container:
        video = container.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = container.add_stream("pcm_s16le", rate=8000)
        audio.layout = "mono"
        sound = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        sound.sample_rate = 8000
        for packet in [*audio.encode(sound), *audio.encode()]:
            container.mux(packet)
    return path


def test_a_video_rewritten_after_its_count_was_kept_is_named(tmp_path):
    path = encode(str(tmp_path / "v.mp4"), 1, 12)
    clips = shufflepoint.VideoClips([path], frames_per_clip=4, cache_dir=str(tmp_path / "c"))
    encode(path, 1, 30)
    with pytest.raises(OSError, match="v.mp4"):
        clips[0]


def test_the_decoder_falls_back_to_pyav_when_torchcodec_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchcodec", None)  # importing it now raises ImportError
    monkeypatch.delenv("SHUFFLEPOINT_VIDEO_DECODER", raising=False)
    assert decoders.pick() == "pyav"
    with pytest.raises(ImportError, match=r"^decoder 'torchcodec': found not importable"):
        decoders.pick("torchcodec")


def test_frames_the_header_promises_but_the_stream_lacks_are_named(tmp_path):
    path = encode(str(tmp_path / "short.mp4"), 2, 12)
    shufflepoint.VideoClips([path], frames_per_clip=4, cache_dir=str(tmp_path / "c"))
    (kept,) = [tmp_path / "c" / name for name in os.listdir(tmp_path / "c") if name.startswith("videos-")]
    counts = json.loads(kept.read_text())
    kept.write_text(json.dumps(dict(counts, frames=[20])))  # a header that overstates the video
    clips = shufflepoint.VideoClips([path], frames_per_clip=4, cache_dir=str(tmp_path / "c"))
    assert len(clips) == 5 and read_numbers(clips[2]) == [(2, f) for f in range(8, 12)]
    with pytest.raises(ValueError, match=r"^video '.*short\.mp4': found frames \[12, 13, 14, 15\] not in the "):
        clips[3]


def test_videos_in_object_storage_are_read_once_into_the_cache(s3_server, tmp_path):
    local = str(tmp_path / "local")
    videos(local, [9, 14])
    s3_server.reset()
    s3_server.upload("videos-bucket", local, prefix="v/")
    clips = shufflepoint.VideoClips("s3://videos-bucket/v/*.mp4", frames_per_clip=3, stride=3,
                                    storage_options=s3_server.storage_options, cache_dir=str(tmp_path / "c"))
    assert clips.frames.tolist() == [9, 14] and len(clips) == 3 + 4
    assert [read_numbers(clips[i])[0] for i in range(len(clips))] == [(0, 0), (0, 3), (0, 6), (1, 0), (1, 3),
                                                                       (1, 6), (1, 9)]
    assert clips.videos[0].startswith("s3://") and len(os.listdir(tmp_path / "c" / "videos")) == 2
    shutil.rmtree(tmp_path / "c" / "videos")
    again = shufflepoint.VideoClips("s3://videos-bucket/v/*.mp4", frames_per_clip=3, stride=3,
                                    storage_options=s3_server.storage_options, cache_dir=str(tmp_path / "c"))
    assert again.fingerprint == clips.fingerprint and not os.path.exists(tmp_path / "c" / "videos")  # counts kept
    assert read_numbers(again[4])[0] == (1, 3) and len(os.listdir(tmp_path / "c" / "videos")) == 1


def test_at_a_variable_frame_rate_frame_k_is_the_one_on_screen_at_k_over_the_rate(tmp_path):
    import av

    from video_files import frame_image

    times = [0, 40, 80, 120, 280, 320, 360, 400, 440, 480, 520, 560]  # ms: 160 ms without a frame after frame 3
    path = str(tmp_path / "vfr.mkv")
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        for ordinal, time in enumerate(times):
            image = av.VideoFrame.from_ndarray(frame_image(0, ordinal), format="rgb24")
            image.pts, image.time_base = time, Fraction(1, 1000)
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    clips = shufflepoint.VideoClips([path], frames_per_clip=4, stride=2, cache_dir=str(tmp_path / "c"))
    shown = [[ordinal for _, ordinal in read_numbers(clips[i])] for i in range(len(clips))]
    # frame k is due at 40k ms: the frame on screen then is the last one that started at or before it
    assert shown == [[max(j for j, t in enumerate(times) if t <= 40 * k) for k in clips.locate(i)["frames"]]
                     for i in range(len(clips))]
    assert shown[1] == [2, 3, 3, 3]

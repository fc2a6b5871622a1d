"""Decoded, augmented images survive a resume in a fresh process with workers (``DecodeImage`` as the
loader's ``transform``), and a corrupt image inside a shard stops the loader with its shard, row and key.

An uninterrupted epoch read in the test's own process, without workers, is the reference; a process with 2
workers stops mid-epoch after saving the loader's state; a fresh one with 3 workers resumes from it. Every
batch after the stop must hold the reference's keys with bit-identical crops and flips."""

import hashlib
import json
import os
import subprocess
import sys
import tarfile

import pytest

pytest.importorskip("PIL", reason="the images extra is not installed")
pytest.importorskip("skimage", reason="scikit-image (the test photos) is not installed")

import shufflepoint  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import _photos  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "workers", "images_worker.py")


def run(tmp_path, record, *extra):
    command = [sys.executable, WORKER, "--data", str(tmp_path / "photos"), "--cache", str(tmp_path / "cache"),
               "--record", str(tmp_path / record), "--checkpoint", str(tmp_path / "state.pt"), *extra]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert finished.returncode == 0, finished.stderr[-3000:]
    with open(tmp_path / record) as f:
        return [json.loads(line) for line in f]


def reference(tmp_path):
    """The worker's records of one uninterrupted epoch, read here without workers (no process to start)."""
    corpus = shufflepoint.Shards(str(tmp_path / "photos" / "*.tar"), cache_dir=str(tmp_path / "cache"),
                                 progress=False)
    loader = shufflepoint.DataLoader(corpus, batch_size=4, seed=5, transform=shufflepoint.DecodeImage(size=40))
    return [{"epoch": 0, "keys": batch["__key__"],
             "images": [hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16] for image in batch["image"]]}
            for batch in loader]


def test_augmented_images_resume_exactly_in_a_fresh_process_with_other_workers(tmp_path):
    _photos.write_shards(str(tmp_path / "photos"), 24, 6, sizes="small", png_every=5)
    whole = reference(tmp_path)
    assert len(whole) == 6 and len({d for batch in whole for d in batch["images"]}) == 24  # every crop its own
    before = run(tmp_path, "parts", "--stop-after", "4")
    after = run(tmp_path, "parts", "--load", "--num-workers", "3")[len(before):]
    assert before + after == whole


def test_a_corrupt_image_inside_a_shard_names_the_shard_row_and_key(tmp_path):
    folder = tmp_path / "photos"
    paths = _photos.write_shards(str(folder), 8, 4, sizes="small")
    with tarfile.open(paths[1]) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(paths[1], "w") as tar:
        for member, data in members:
            if member.name == "00000006.jpg":
                data = data[: len(data) // 3]  # cut short: the decoder fails mid-scan
            member.size = len(data)
            tar.addfile(member, __import__("io").BytesIO(data))
    corpus = shufflepoint.Shards(str(folder / "*.tar"), cache_dir=str(tmp_path / "cache"), progress=False)
    loader = shufflepoint.DataLoader(corpus, batch_size=4, seed=0, num_workers=2,
                                     transform=shufflepoint.DecodeImage(32))
    with pytest.raises(Exception, match=rf"shard {paths[1]}: row 2 \(dataset index 6\): sample '00000006' "
                                        r"field 'jpg': found \d+ bytes that do not decode") as raised:
        for _batch in loader:
            pass
    assert isinstance(raised.value, (shufflepoint.ShardError, RuntimeError))  # torch re-raises in the loop
    evaluation = shufflepoint.Shards(str(folder / "*.tar"), cache_dir=str(tmp_path / "cache"), progress=False,
                                     transform=shufflepoint.DecodeImage(32, crop="center"))
    with pytest.raises(shufflepoint.ShardError, match=r"row 2 \(dataset index 6\): sample '00000006'"):
        evaluation[6]

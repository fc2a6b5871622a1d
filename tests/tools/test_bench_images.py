"""``make bench-images`` (benchmarks/images.py) and the ViT half of ``make bench-gpu`` (benchmarks/gpu_images.py)
on a machine without a GPU: the "no GPU" exit, the peers' crop, the report's ratios, and (make test-examples)
a shufflepoint child on a small corpus and the ViT feed as a CPU dry run. No figure is measured here."""

import json
import os
import sys

import numpy as np
import pytest

pytest.importorskip("PIL", reason="the images extra is not installed")
pytest.importorskip("skimage", reason="scikit-image (the test photos) is not installed")

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)

import gpu_images  # noqa: E402
import images  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402


def test_without_a_gpu_the_vit_feed_says_so_and_exits_0(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert gpu_images.main([]) == 0
    assert capsys.readouterr().out.startswith("no GPU")
    with pytest.raises(SystemExit):
        gpu_images.parse(["--device", "cpu"])  # a full-size run on the CPU is refused


def test_the_peers_crop_is_the_same_arithmetic_on_a_pil_image() -> None:
    image = Image.fromarray(np.arange(60 * 90 * 3, dtype=np.uint8).reshape(60, 90, 3))
    out = images.peer_crop(image, np.random.default_rng(0), 24)
    assert out.dtype == torch.uint8 and out.shape == (3, 24, 24)


def test_the_report_gives_ratios_to_the_best_peer_and_says_why_a_peer_did_not_run() -> None:
    row = {"images_per_s": 100.0, "first_batch_s": 1.0, "after_first_per_s": 110.0, "cpu_ms_per_image": 10.0}
    results = {"samples": 10, "size": 8, "batch": 2, "workers": 2, "load_before": [1], "load_after": [1],
               "decoders": {"pil": 1.0},
               "loaders": {"shufflepoint": dict(row, images_per_s=150.0), "webdataset": row,
                           "energon": dict(row, images_per_s=120.0), "litdata": {"error": "not installed"}}}
    text = images.report(results)
    line = {name: text.split(name)[1].split("\n")[0] for name in ("shufflepoint", "webdataset", "energon")}
    assert "1.25x" in line["shufflepoint"] and "0.83x" in line["webdataset"] and "1.00x" in line["energon"]
    assert "could not run: not installed" in text


@pytest.mark.examples
def test_a_shufflepoint_child_and_the_vit_dry_run(tmp_path, capsys) -> None:
    args = images.parse(["--samples", "64", "--batch", "8", "--size", "32", "--cache", str(tmp_path)])
    images._photos.write_shards(os.path.join(args.cache, "photos"), 64, 16)
    args.child = "shufflepoint"
    assert images.run_child(args)["images"] == 64
    assert gpu_images.main(["--device", "cpu", "--tiny", "--cache", str(tmp_path / "gpu"),
                            "--out", str(tmp_path / "out.json")]) == 0
    with open(tmp_path / "out.json") as f:
        assert "synthetic" in json.load(f)

"""``DecodeImage`` (``_media/images.py``, ``_media/image_decoders.py``): what it makes of a sample, how close to
Pillow's own reference its pixels are, and how it refuses a sample that is not an image."""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest
import torch

Image = pytest.importorskip("PIL.Image", reason="the images extra is not installed")
pytest.importorskip("skimage", reason="scikit-image (the test photos) is not installed")

import shufflepoint  # noqa: E402
from shufflepoint._media import image_decoders as decoders  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import _photos  # noqa: E402

DECODERS = ["pil"] + (["simplejpeg"] if decoders.has_simplejpeg() else [])


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return _photos.photos()[1]  # coffee, 400 x 600


def reference(array: np.ndarray, box: tuple[int, int, int, int], size: int, flip: bool) -> np.ndarray:
    """Pillow on the whole decoded image: crop, bilinear resize, mirror."""
    image = Image.fromarray(array).resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.asarray(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else image)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("size", [64, 224])
def test_a_centre_crop_is_close_to_pillow_s_reference(photo, decoder, size) -> None:
    data = _photos.encoded(photo, "JPEG")
    decoded = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    out = shufflepoint.DecodeImage(size, crop="center", decoder=decoder)({"__key__": "k", "jpg": data})
    image = out["image"]
    assert image.dtype == torch.uint8 and image.shape == (3, size, size)
    expected = reference(decoded, (100, 0, 500, 400), size, False)
    difference = np.abs(image.permute(1, 2, 0).numpy().astype(int) - expected.astype(int))
    # a reduced JPEG decode (1/2 at size 64 from a 400-pixel box) averages in the DCT: a few levels apart
    assert difference.mean() < (3.0 if size == 64 else 1.0) and np.percentile(difference, 99) < 24


def test_a_png_decodes_exactly_as_pillow_does(photo) -> None:
    data = _photos.encoded(photo[:300, :200], "PNG")
    decode = shufflepoint.DecodeImage(96, scale=(0.3, 0.6))
    rng = np.random.default_rng(7)
    box = decode.plan(200, 300, np.random.default_rng(7))
    out = decode({"png": data, "cls": b"3"}, rng)
    assert out["cls"] == b"3" and "png" not in out
    expected = reference(photo[:300, :200], (box.left, box.top, box.left + box.width, box.top + box.height), 96,
                         box.flip)
    assert np.array_equal(out["image"].permute(1, 2, 0).numpy(), expected)


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_random_crop_is_a_function_of_the_sample_s_generator(photo, decoder) -> None:
    sample = {"jpg": _photos.encoded(photo, "JPEG")}
    decode = shufflepoint.DecodeImage(48, decoder=decoder)
    first = decode(sample, shufflepoint.sample_rng(3, 0, 11))["image"]
    assert torch.equal(first, decode(sample, shufflepoint.sample_rng(3, 0, 11))["image"])
    others = [decode(sample, shufflepoint.sample_rng(3, epoch, 11))["image"] for epoch in range(1, 6)]
    assert all(not torch.equal(first, other) for other in others)


def test_grey_rgba_and_a_hugging_face_struct_come_out_rgb(photo) -> None:
    grey = _photos.encoded(photo[..., 0], "JPEG")
    rgba = _photos.encoded(np.dstack([photo, np.full(photo.shape[:2], 255, np.uint8)]), "PNG")
    decode = shufflepoint.DecodeImage(32, crop="center", field="image")
    for data in (grey, rgba):
        out = decode({"image": {"bytes": data, "path": "x"}})
        assert out["image"].shape == (3, 32, 32)
    assert decode.plan(10, 10, None).width == 10
    assert shufflepoint.DecodeImage(32, crop="center")(grey).shape == (3, 32, 32)  # a column's bytes alone


def test_a_corrupt_image_is_a_sample_error_naming_its_key_and_field(photo) -> None:
    data = _photos.encoded(photo, "JPEG")
    for bad in (data[:200], b"not an image at all"):
        with pytest.raises(shufflepoint.SampleError, match=r"sample '0042' field 'jpg': found \d+ bytes that do "
                                                           r"not decode(.|\n)*fix: replace the sample's image"):
            shufflepoint.DecodeImage(32)({"__key__": "0042", "jpg": bad}, np.random.default_rng(0))
    with pytest.raises(shufflepoint.SampleError, match=r"sample '7': found fields \['__key__', 'txt'\]\n"
                                                       r"  expected: an image field \('jpg' or 'jpeg'"):
        shufflepoint.DecodeImage(32)({"__key__": "7", "txt": b"a caption"}, np.random.default_rng(0))


def test_a_random_crop_without_a_generator_is_refused(photo) -> None:
    with pytest.raises(ValueError, match=r"DecodeImage rng: found None\n  expected: the sample's generator"):
        shufflepoint.DecodeImage(32)({"jpg": _photos.encoded(photo, "JPEG")})
    with pytest.raises(TypeError, match=r"DecodeImage rng: found None"):  # not "bytes that do not decode"
        shufflepoint.DecodeImage(32)({"jpg": _photos.encoded(photo, "JPEG")[:40]})


@pytest.mark.parametrize("arguments,match", [
    ({"size": 0}, r"size: found 0"), ({"size": True}, r"size: found True"), ({"size": (8,)}, r"size: found \(8,\)"),
    ({"size": (8, 0)}, r"size: found \(8, 0\)\n  expected: an int in \[1, 16384\], or a \(height, width\) pair"),
    ({"size": 8, "crop": "left"}, r"crop: found 'left'\n  expected: one of 'random', 'center'"),
    ({"size": 8, "decoder": "cv2"}, r"decoder: found 'cv2'"), ({"size": 8, "flip": 1}, r"flip: found 1"),
    ({"size": 8, "scale": (0.5, 2.0)}, r"scale: found \(0.5, 2.0\)"),
])
def test_bad_arguments_are_refused_naming_them(arguments, match) -> None:
    with pytest.raises(ValueError, match=match):
        shufflepoint.DecodeImage(**arguments)


def test_the_gpu_path_plans_in_the_worker_and_needs_a_cuda_device(photo) -> None:
    decode = shufflepoint.DecodeImage(32, decoder="nvjpeg")
    data = _photos.encoded(photo, "JPEG")
    out = decode({"__key__": "a", "jpg": data}, shufflepoint.sample_rng(0, 0, 1))
    box = shufflepoint.DecodeImage(32).plan(600, 400, shufflepoint.sample_rng(0, 0, 1))
    assert out["image"]["bytes"] == data
    assert out["image"]["crop"].tolist() == [box.left, box.top, box.width, box.height, int(box.flip)]
    assert decode(data, shufflepoint.sample_rng(0, 0, 1))["crop"].tolist() == out["image"]["crop"].tolist()
    batch = torch.utils.data.default_collate([out, out])
    with pytest.raises(ValueError, match=r"device: found 'cpu'\n  expected: a CUDA device"):
        decode.to_device(batch, "cpu")


def test_to_device_moves_cpu_decoded_batches_unchanged(photo) -> None:
    decode = shufflepoint.DecodeImage(16, crop="center")
    batch = torch.utils.data.default_collate([decode({"jpg": _photos.encoded(photo, "JPEG")})] * 3)
    moved = decode.to_device(batch, "cpu")
    assert moved.dtype == torch.uint8 and moved.shape == (3, 3, 16, 16) and torch.equal(moved, batch["image"])


def test_a_parquet_binary_column_decodes_through_the_loader(photo, tmp_path) -> None:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    blobs = [_photos.encoded(photo[i * 20:i * 20 + 200, i * 30:i * 30 + 300], "JPEG") for i in range(6)]
    table = pyarrow.table({"image": pyarrow.array(blobs, pyarrow.binary()), "caption": [f"c{i}" for i in range(6)]})
    pq.write_table(table, tmp_path / "part-0.parquet", row_group_size=4)
    corpus = shufflepoint.Shards(str(tmp_path / "*.parquet"), cache_dir=str(tmp_path / "cache"), progress=False)
    decode = shufflepoint.DecodeImage(24, field="image")
    loader = shufflepoint.DataLoader(corpus, batch_size=3, seed=1, transform=decode)
    batches = list(loader)
    assert [b["image"].shape for b in batches] == [(3, 3, 24, 24)] * 2
    assert sorted(c for b in batches for c in b["caption"]) == [f"c{i}" for i in range(6)]
    again = list(shufflepoint.DataLoader(corpus, batch_size=3, seed=1, transform=decode))
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(batches, again, strict=True))


def test_the_gpu_half_s_crop_and_resize_match_pillow_on_the_cpu(photo) -> None:
    """``device_decode`` crops, resizes (antialiased bilinear) and mirrors a decoded CHW image wherever it
    lies; run here on the CPU, it must land within a few levels of Pillow's resize of the same box."""
    from shufflepoint._media import device_decode
    from shufflepoint._media.crops import Box

    image = torch.from_numpy(photo).permute(2, 0, 1)
    for box in (Box(100, 0, 400, 400, False), Box(37, 51, 301, 217, True), Box(0, 0, 600, 400, True)):
        out = device_decode._finish(image, box, (96, 96))
        expected = reference(photo, (box.left, box.top, box.left + box.width, box.top + box.height), 96, box.flip)
        difference = np.abs(out.permute(1, 2, 0).numpy().astype(int) - expected.astype(int))
        assert out.dtype == torch.uint8 and difference.mean() < 1.5 and difference.max() <= 40, (box, difference.mean())
    png = _photos.encoded(photo, "PNG")
    box = Box(10, 20, 200, 100, True)
    assert torch.equal(device_decode._cpu_image(png, box, (32, 32)).permute(1, 2, 0),
                       torch.from_numpy(reference(photo, (10, 20, 210, 120), 32, True).copy()))


def test_a_height_and_width_give_that_shape_and_a_centre_crop_of_that_aspect(photo) -> None:
    """An aspect-ratio bucket's resolution: (height, width), centre crops of its aspect, random crops too."""
    data = _photos.encoded(photo, "PNG")  # 400 x 600: no reduced JPEG decode, so Pillow is the reference
    decode = shufflepoint.DecodeImage((48, 96), crop="center")
    out = decode({"png": data})["image"]
    assert out.shape == (3, 48, 96) and decode.size == (48, 96)
    box = decode.plan(600, 400, None)
    assert (box.left, box.top, box.width, box.height) == (0, 50, 600, 300)
    expected = np.asarray(Image.fromarray(photo).resize((96, 48), Image.Resampling.BILINEAR, box=(0, 50, 600, 350)))
    assert np.array_equal(out.permute(1, 2, 0).numpy(), expected)
    tall = shufflepoint.DecodeImage((64, 32), ratio=(0.4, 0.6))({"png": data}, np.random.default_rng(2))["image"]
    assert tall.shape == (3, 64, 32)


class BucketShapes:
    """One ``DecodeImage`` per aspect-ratio bucket, picked by the sample's key: every batch one shape."""

    def __init__(self, keys, shapes) -> None:
        self.decoders = {k: shufflepoint.DecodeImage(shape, ratio=(0.9 * shape[1] / shape[0], 1.1 * shape[1] /
                                                                   shape[0])) for k, shape in shapes.items()}
        self.keys = keys

    def __call__(self, sample, rng):
        return self.decoders[self.keys[int(sample["__key__"])]](sample, rng)


def test_aspect_ratio_buckets_give_every_batch_one_shape(tmp_path) -> None:
    """``buckets=keys`` from the headers (wide, square, tall), a ``DecodeImage((h, w))`` per bucket."""
    paths = _photos.write_shards(str(tmp_path / "photos"), 40, 10, sizes="small")
    corpus = shufflepoint.Shards(str(tmp_path / "photos" / "*.tar"), cache_dir=str(tmp_path / "cache"),
                                 progress=False)
    sizes = [decoders.header_size(corpus[i]["jpg"]) for i in range(len(corpus))]
    keys = [0 if w > 1.25 * h else 2 if h > 1.25 * w else 1 for w, h in sizes]
    shapes = {0: (24, 40), 1: (32, 32), 2: (40, 24)}
    loader = shufflepoint.DataLoader(corpus, batch_size=3, seed=4, buckets=keys,
                                     transform=BucketShapes(keys, shapes))
    seen = 0
    for batch in loader:
        bucket = {keys[int(k)] for k in batch["__key__"]}
        assert len(bucket) == 1 and batch["image"].shape[2:] == shapes[bucket.pop()]
        seen += len(batch["__key__"])
    assert len(paths) == 4 and 40 <= seen <= 40 + 3 * (3 - 1)  # drop_last=False: every sample, each bucket's last
    # batch filled with samples of its own bucket (fewer than B each)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_webdataset_batch_decoded_in_threads_is_the_batch_decoded_one_image_after_another(tmp_path, workers) -> None:
    """``decode_threads`` with a ``Shards`` (a batch read in one call): ``DecodeImage`` runs in the worker's
    threads, and the batches (keys and pixels) are those of decode_threads=0 and 1, also across a resume."""
    _photos.write_shards(str(tmp_path / "photos"), 24, 6, sizes="small")
    corpus = shufflepoint.Shards(str(tmp_path / "photos" / "*.tar"), cache_dir=str(tmp_path / "cache"),
                                 progress=False)
    decode = shufflepoint.DecodeImage(32)

    def run(threads, state=None, count=None):
        loader = shufflepoint.DataLoader(corpus, batch_size=4, seed=3, transform=decode, num_workers=workers,
                                         decode_threads=threads)
        if state is not None:
            loader.load_state_dict(state)
        batches = []
        for batch in loader:
            batches.append((list(batch["__key__"]), batch["image"]))
            if len(batches) == count:
                break
        return batches, loader.state_dict()

    def same(one, other):
        return len(one) == len(other) and all(a[0] == b[0] and torch.equal(a[1], b[1])
                                              for a, b in zip(one, other, strict=True))

    plain, _ = run(0)
    assert same(run(1)[0], plain) and same(run(3)[0], plain)
    first, state = run(4, count=2)
    assert same(first + run(2, state)[0], plain)

"""make bench-images: decoded, augmented photos per second, shufflepoint against the loaders image teams use.

    python benchmarks/images.py [--samples 2000] [--size 224] [--batch 32] [--workers 2] [--repeats 2]

The corpus: ``--samples`` crops of scikit-image's photographs (``--sizes mixed``: sides 96-1400 pixels drawn
log-uniformly; ``medium`` 256-640; aspects 1:3 to 3:1, JPEG quality 90; ``_photos.py``) in WebDataset tars
of 100, written once into ``.bench-cache/images/<sizes>-<samples>``.
Every loader does the same work per image: decode, a random resized crop to ``--size`` (scale 0.08-1,
aspect 3/4-4/3, bilinear), a random flip, a uint8 CHW tensor, batches of ``--batch`` from ``--workers``
DataLoader workers. torchvision does not import beside this machine's CPU torch, so the peers crop with
Pillow (``crop`` + ``resize``, what torchvision's RandomResizedCrop does to a PIL image), on the image their
own pipeline decoded:

- shufflepoint: ``Shards`` + ``DataLoader(transform=DecodeImage(size))``: the crop planned from the header,
  the JPEG decoded reduced when the crop allows (simplejpeg, and Pillow's ``draft`` as a second row), exact
  resume on (it is always on);
- webdataset 1.0.2: ``WebDataset(shardshuffle) .shuffle(100) .decode("pil") .map(crop) .batched`` in a
  ``WebLoader``; it has no resume;
- Megatron-Energon 7.4.1: ``energon prepare`` on a copy of the same tars, ``get_train_dataset`` with a
  ``TaskEncoder`` whose decoder gives PIL images, ``get_savable_loader`` (its resumable loader);
- LitData 0.2.76: the same JPEG bytes written by ``litdata.optimize`` into its chunks (it reads no tars),
  ``StreamingDataset`` decoding with Pillow, ``StreamingDataLoader`` (resumable).

Each loader runs in its own fresh process (peers from ``.venv-peers/``, installed by ``make bench-images``
with ``--no-deps`` so that torch stays the CPU 2.13.0), one epoch, shuffle buffers of 100 samples where a
peer has one; the rate is the whole epoch's, from building the loader to its last batch (a buffer filled
with decoded samples before the first batch is work of the epoch). ``--repeats`` rounds, interleaved, the
best kept (the machine is shared).
A decoder table times the decode + crop alone in one process. Results: a table, and JSON in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _photos  # noqa: E402

PEERS = os.path.join(ROOT, ".venv-peers")
LOADERS = ("shufflepoint", "shufflepoint-pil", "shufflepoint-transform", "webdataset", "energon", "litdata")
PEER_PATHS = {"energon": os.path.join(PEERS, "energon"), "litdata": os.path.join(PEERS, "litdata")}
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sizes", choices=sorted(_photos.SIZES), default="mixed",
                        help="the photos' sides: small 96-320, medium 256-640, large 640-1400, mixed 96-1400")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--cache", default=os.path.join(ROOT, ".bench-cache", "images"))  # then /<sizes>-<samples>
    parser.add_argument("--out", default=None, help="JSON results (default: benchmarks/results/images-<sizes>.json, "
                        "and the table beside it as .md)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None:  # a child is handed the corpus's own folder
        args.cache = os.path.join(args.cache, f"{args.sizes}-{args.samples}")
    return args


# -- the peers' crop: Pillow on the image their pipeline decoded ---------------------------------------------
def peer_crop(image: Any, rng: Any, size: int) -> Any:
    """A random resized crop and flip of a PIL image, as torchvision's RandomResizedCrop does to one."""
    import numpy as np
    import torch
    from PIL import Image

    from shufflepoint._media import crops

    box = crops.random_box(image.width, image.height, rng, SCALE, RATIO)
    image = image.convert("RGB") if image.mode != "RGB" else image
    out = image.resize((size, size), Image.Resampling.BILINEAR,
                       box=(box.left, box.top, box.left + box.width, box.top + box.height))
    if box.flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.array(out)).permute(2, 0, 1)


# -- one loader per child process ---------------------------------------------------------------------------
def shufflepoint_batches(args: argparse.Namespace, decoder: str) -> Any:
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(args.cache, "photos", "*.tar"), cache_dir=os.path.join(args.cache,
                                 "index"), progress=False)
    decode = shufflepoint.DecodeImage(args.size, decoder=decoder)
    loader = shufflepoint.DataLoader(corpus, batch_size=args.batch, seed=0, num_workers=args.workers,
                                     transform=decode, drop_last=True)
    return (batch["image"] for batch in loader)


class UserCrop:
    """A user's own ``transform`` of ``(sample, rng)``: the peers' decode (``PIL.Image.open``), crop and flip."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, sample: dict[str, Any], rng: Any) -> Any:
        import io

        from PIL import Image

        return peer_crop(Image.open(io.BytesIO(sample["jpg"])), rng, self.size)


def shufflepoint_transform_batches(args: argparse.Namespace) -> Any:
    """shufflepoint with a user's transform: the same PIL decode, crop and flip as the peers (``UserCrop``)."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(args.cache, "photos", "*.tar"), cache_dir=os.path.join(args.cache,
                                 "index"), progress=False)
    loader = shufflepoint.DataLoader(corpus, batch_size=args.batch, seed=0, num_workers=args.workers,
                                     transform=UserCrop(args.size), drop_last=True)
    return iter(loader)


def webdataset_batches(args: argparse.Namespace) -> Any:
    import numpy as np
    import torch
    import webdataset as wds

    urls = sorted(os.path.join(args.cache, "photos", f) for f in os.listdir(os.path.join(args.cache, "photos"))
                  if f.endswith(".tar"))
    rng = np.random.default_rng()  # webdataset's workers draw from process-local randomness: no resume

    def crop(sample: dict[str, Any]) -> Any:
        return peer_crop(sample["jpg"], rng, args.size)

    pipeline = (wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=wds.split_by_node, empty_check=False)
                .shuffle(100).decode("pil").map(crop).batched(args.batch, collation_fn=torch.stack, partial=False))
    loader = wds.WebLoader(pipeline, batch_size=None, num_workers=args.workers)
    return iter(loader)


def energon_batches(args: argparse.Namespace) -> Any:
    import dataclasses

    import numpy as np
    import torch
    from megatron.energon import DefaultTaskEncoder, ImageSample, WorkerConfig, get_savable_loader, get_train_dataset
    from megatron.energon.flavors.webdataset.sample_decoder import SampleDecoder

    rng = np.random.default_rng()
    size = args.size

    class Crops(DefaultTaskEncoder[ImageSample, ImageSample, Any, Any]):
        decoder = SampleDecoder(image_decode="pil")

        def encode_sample(self, sample: ImageSample) -> ImageSample:
            return dataclasses.replace(sample, image=peer_crop(sample.image, rng, size))

        def batch(self, samples: list[ImageSample]) -> Any:
            return torch.stack([s.image for s in samples])

        def encode_batch(self, batch: Any) -> Any:
            return batch

    config = WorkerConfig(rank=0, world_size=1, num_workers=args.workers)
    dataset = get_train_dataset(os.path.join(args.cache, "energon"), batch_size=args.batch, worker_config=config,
                                shuffle_buffer_size=100, max_samples_per_sequence=100, task_encoder=Crops(),
                                repeat=False)
    return iter(get_savable_loader(dataset, worker_config=config))


def litdata_batches(args: argparse.Namespace) -> Any:
    import io

    import numpy as np
    from litdata import StreamingDataLoader, StreamingDataset
    from PIL import Image

    size = args.size

    class Photos(StreamingDataset):  # type: ignore[misc]
        rng = np.random.default_rng()

        def __getitem__(self, index: Any) -> Any:
            data = super().__getitem__(index)["jpg"]
            return peer_crop(Image.open(io.BytesIO(data)), self.rng, size)

    dataset = Photos(f"local:{os.path.join(args.cache, 'litdata')}", shuffle=True, drop_last=True, seed=0)
    return iter(StreamingDataLoader(dataset, batch_size=args.batch, num_workers=args.workers, drop_last=True))


def cpu_seconds() -> float:
    """CPU seconds of this process and its live children (the loader's workers), user + system."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return float(total)


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """One epoch of one loader: images over the whole epoch, from building the loader (workers started,
    shuffle buffers filled) to its last batch; the rate after the first batch beside it. A peer that fills a
    buffer of decoded samples before its first batch has done part of the epoch's work by then. CPU time
    (this process and its workers, read after each batch, while the workers live) says what an image costs
    whatever else the machine runs."""
    import torch

    cpu_start, started = cpu_seconds(), time.perf_counter()
    name = args.child
    batches = {"shufflepoint": lambda: shufflepoint_batches(args, "auto"),
               "shufflepoint-pil": lambda: shufflepoint_batches(args, "pil"),
               "shufflepoint-transform": lambda: shufflepoint_transform_batches(args),
               "webdataset": lambda: webdataset_batches(args), "energon": lambda: energon_batches(args),
               "litdata": lambda: litdata_batches(args)}[name]()
    first = next(batches)
    assert first.dtype == torch.uint8 and tuple(first.shape) == (args.batch, 3, args.size, args.size), first.shape
    after_first = time.perf_counter()
    images, cpu_end = 0, cpu_seconds()
    for batch in batches:
        images += batch.shape[0]
        cpu_end = cpu_seconds()
    ended = time.perf_counter()
    total = images + first.shape[0]
    return {"loader": name, "images": total, "first_batch_s": after_first - started,
            "images_per_s": total / (ended - started), "after_first_per_s": images / (ended - after_first),
            "cpu_ms_per_image": (cpu_end - cpu_start) * 1e3 / total}


# -- corpus preparation -----------------------------------------------------------------------------------
def _litdata_sample(path_and_key: tuple[str, str]) -> dict[str, Any]:
    import tarfile

    path, key = path_and_key
    with tarfile.open(path) as tar:
        return {"jpg": tar.extractfile(f"{key}.jpg").read()}  # type: ignore[union-attr]


def prepare(args: argparse.Namespace) -> None:
    """The tars once; energon's index on a copy of them; LitData's chunks of the same JPEG bytes."""
    import shutil
    import tarfile

    photos = os.path.join(args.cache, "photos")
    paths = _photos.write_shards(photos, args.samples, 100, sizes=args.sizes)
    energon = os.path.join(args.cache, "energon")
    if not os.path.exists(os.path.join(energon, ".nv-meta", "dataset.yaml")) and os.path.isdir(PEER_PATHS["energon"]):
        shutil.rmtree(energon, ignore_errors=True)
        shutil.copytree(photos, energon, ignore=shutil.ignore_patterns(".done-*"))
        subprocess.run([sys.executable, "-m", "megatron.energon.cli.main", "prepare", ".", "--non-interactive",
                        "--split-ratio", "1,0,0", "--sample-type", "ImageSample", "--field-map",
                        '{"image": "jpg"}', "--num-workers", "2", "--no-progress"], cwd=energon, check=True,
                       env=_env("energon"), capture_output=True)
    litdata = os.path.join(args.cache, "litdata")
    if not os.path.exists(os.path.join(litdata, "index.json")) and os.path.isdir(PEER_PATHS["litdata"]):
        keys = []
        for path in paths:
            with tarfile.open(path) as tar:
                keys += [(path, m.name[:-4]) for m in tar.getmembers() if m.name.endswith(".jpg")]
        code = (f"import sys, json; sys.path.insert(0, {HERE!r}); import images; from litdata import optimize; "
                "optimize(fn=images._litdata_sample, inputs=[tuple(k) for k in json.load(sys.stdin)], "
                f"output_dir={litdata!r}, chunk_bytes='64MB', num_workers=1, verbose=False)")
        subprocess.run([sys.executable, "-c", code], input=json.dumps(keys), text=True, check=True,
                       env=_env("litdata"), capture_output=True)


def _env(loader: str) -> dict[str, str]:
    paths = [os.path.join(ROOT, "src")] + ([PEER_PATHS[loader]] if loader in PEER_PATHS else [])
    return os.environ | {"PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(":")}


def measure(args: argparse.Namespace, loader: str) -> dict[str, Any]:
    if loader in PEER_PATHS and not os.path.isdir(PEER_PATHS[loader]):
        return {"loader": loader, "error": f"not installed in {PEER_PATHS[loader]} (make bench-images installs it)"}
    command = [sys.executable, os.path.abspath(__file__), "--child", loader, "--samples", str(args.samples),
               "--size", str(args.size), "--batch", str(args.batch), "--workers", str(args.workers),
               "--cache", args.cache]
    finished = subprocess.run(command, capture_output=True, text=True, env=_env(loader), timeout=900)
    if finished.returncode != 0:
        return {"loader": loader, "error": finished.stderr.strip().splitlines()[-1][:300]}
    return dict(json.loads(finished.stdout.strip().splitlines()[-1]))


def decoder_table(args: argparse.Namespace, count: int = 150, rounds: int = 3) -> dict[str, float]:
    """CPU ms per image of decode + crop + flip in this process, each decoder on the same first images, in
    interleaved rounds, the best round kept (CPU time, so a busy machine inflates it less than wall time)."""
    import numpy as np

    import shufflepoint
    from shufflepoint._media import image_decoders as decoders

    corpus = shufflepoint.Shards(os.path.join(args.cache, "photos", "*.tar"),
                                 cache_dir=os.path.join(args.cache, "index"), progress=False)
    samples = [corpus[i] for i in range(min(count, len(corpus)))]
    full = shufflepoint.DecodeImage(args.size, decoder="pil")
    full._decode = lambda data, plan, size: decoders.decode_pil(data, plan, size, draft=False)
    contenders = {"pil (full decode)": full, "pil + draft": shufflepoint.DecodeImage(args.size, decoder="pil")}
    if decoders.has_simplejpeg():
        contenders["simplejpeg (reduced)"] = shufflepoint.DecodeImage(args.size, decoder="simplejpeg")
    table: dict[str, float] = {}
    for _ in range(rounds):
        for name, decode in contenders.items():
            started = time.process_time()
            for index, sample in enumerate(samples):
                decode(sample, np.random.default_rng(index))
            spent = (time.process_time() - started) / len(samples) * 1e3
            table[name] = min(table.get(name, spent), spent)
    return table


def report(results: dict[str, Any]) -> str:
    rows = results["loaders"]
    peers = [r["images_per_s"] for name, r in rows.items() if name in ("webdataset", "energon", "litdata")
             and "images_per_s" in r]
    best_peer = max(peers) if peers else None
    peer_cpu = [r["cpu_ms_per_image"] for name, r in rows.items() if name in ("webdataset", "energon", "litdata")
                and "cpu_ms_per_image" in r]
    best_cpu = min(peer_cpu) if peer_cpu else None
    lines = [f"{results['samples']} photos ({results.get('sizes', '?')} sizes), crop to {results['size']}, "
             f"batch {results['batch']}, "
             f"{results['workers']} workers; load average before {results['load_before']}, after "
             f"{results['load_after']}",
             f"{'loader':<22} {'images/s':>9} {'vs best peer':>13} {'first batch s':>14} {'after first/s':>14}"
             f" {'CPU ms/image':>13} {'vs best peer':>13}  resume"]
    resume = {"shufflepoint": "exact", "shufflepoint-pil": "exact", "shufflepoint-transform": "exact",
              "webdataset": "none", "energon": "savable",
              "litdata": "StreamingDataLoader"}
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"{name:<22} {'-':>9} {'-':>13} {'-':>14}  could not run: {row['error']}")
            continue
        ratio = f"{row['images_per_s'] / best_peer:.2f}x" if best_peer else "-"
        cpu_ratio = f"{best_cpu / row['cpu_ms_per_image']:.2f}x" if best_cpu else "-"
        lines.append(f"{name[:22]:<22} {row['images_per_s']:>9.1f} {ratio:>13} {row['first_batch_s']:>14.2f} "
                     f"{row['after_first_per_s']:>14.1f} {row['cpu_ms_per_image']:>13.2f} {cpu_ratio:>13}  "
                     f"{resume[name]}")
    lines.append("decode + crop alone, one process, CPU ms per image: " + ", ".join(
        f"{k} {v:.2f}" for k, v in results["decoders"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child is not None:
        print(json.dumps(run_child(args)))
        return 0
    prepare(args)
    results: dict[str, Any] = {"samples": args.samples, "sizes": args.sizes, "size": args.size, "batch": args.batch,
                               "workers": args.workers, "load_before": [round(x, 2) for x in os.getloadavg()]}
    rounds: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for loader in args.loaders.split(","):
            rounds.setdefault(loader, []).append(measure(args, loader))
    results["loaders"] = {name: max(runs, key=lambda r: r.get("images_per_s", -1.0)) for name, runs in rounds.items()}
    results["rounds"] = rounds
    results["decoders"] = decoder_table(args)
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    table = report(results)
    print(table)
    out = args.out or os.path.join(HERE, "results", f"images-{args.sizes}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(f"make bench-images (benchmarks/images.py --sizes {args.sizes} --samples {args.samples})\n\n```\n"
                f"{table}\n```\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

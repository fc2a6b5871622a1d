"""make bench-gpu, the image half: does ``DecodeImage`` keep a GPU training a small ViT fed? (issue 34.5)

    python benchmarks/gpu_images.py [--device auto|cuda|cpu] [--tiny] [--workers 4,8,12] [--steps N]

Where CUDA is absent, ``--device auto`` (the default) prints "no GPU" and exits 0: nothing is measured.
On a GPU: a ViT-S/16 written in plain torch (patch embedding, 12 pre-norm encoder layers of width 384, 6
heads, bf16 autocast, sdpa) trains on 224 x 224 crops of scikit-image's photographs (``_photos.py``, written
once as WebDataset tars into ``--cache``), side by side in one run:

1. **synthetic**: the timed steps on batches already on the GPU (uint8, the same images): no data path;
2. **cpu decode** at each ``--workers``: ``DataLoader(Shards, transform=DecodeImage(224), pin_memory=True)``,
   ``decode.to_device(batch, "cuda")`` (uint8 until the device, non_blocking), ``float()/255`` there;
3. **nvjpeg** (when torchvision with CUDA imports beside the torch here): ``DecodeImage(decoder="nvjpeg")``,
   crops planned in the workers, the batch decoded on the GPU inside ``to_device``.

Data wait = time in ``next(loader)`` + ``to_device`` as a share of the step; the target is <= 1%. ``--device cpu
--tiny`` runs the same code at toy sizes on the CPU (a dry run for the tests; its numbers say nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _photos  # noqa: E402

WAIT_TARGET = 0.01


@dataclasses.dataclass(frozen=True)
class Setup:
    size: int = 224
    patch: int = 16
    width: int = 384
    depth: int = 12
    heads: int = 6
    batch: int = 256
    samples: int = 8192
    workers: tuple[int, ...] = (4, 8, 12)
    warmup: int = 5
    steps: int = 30


TINY = Setup(size=32, patch=8, width=32, depth=2, heads=2, batch=8, samples=64, workers=(0,), warmup=1, steps=3)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (a CPU dry run of the same code)")
    parser.add_argument("--workers", default=None, help="comma-separated num_workers")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--cache", default=os.path.join(os.path.dirname(HERE), ".bench-cache", "gpu-images"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.device == "cpu" and not args.tiny:
        parser.error("--device cpu needs --tiny: a ViT-S on 224-pixel batches of 256 is a GPU job")
    return args


def vit(setup: Setup) -> Any:
    """A ViT in plain torch: conv patches, a class token, learned positions, pre-norm encoder, linear head."""
    import torch

    class ViT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            patches = (setup.size // setup.patch) ** 2
            self.embed = torch.nn.Conv2d(3, setup.width, setup.patch, stride=setup.patch)
            self.cls = torch.nn.Parameter(torch.zeros(1, 1, setup.width))
            self.position = torch.nn.Parameter(torch.randn(1, patches + 1, setup.width) * 0.02)
            layer = torch.nn.TransformerEncoderLayer(setup.width, setup.heads, 4 * setup.width, dropout=0.0,
                                                     activation="gelu", batch_first=True, norm_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, setup.depth, enable_nested_tensor=False)
            self.norm, self.head = torch.nn.LayerNorm(setup.width), torch.nn.Linear(setup.width, len(_photos.PHOTOS))

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            tokens = self.embed(images).flatten(2).transpose(1, 2)
            tokens = torch.cat([self.cls.expand(len(tokens), -1, -1), tokens], dim=1) + self.position
            return self.head(self.norm(self.encoder(tokens)[:, 0]))

    return ViT()


def loader(folder: str, cache: str, setup: Setup, workers: int, decoder: str) -> tuple[Any, Any]:
    import shufflepoint

    decode = shufflepoint.DecodeImage(setup.size, decoder=decoder)
    corpus = shufflepoint.Shards(os.path.join(folder, "*.tar"), cache_dir=cache, progress=False)
    batches = shufflepoint.DataLoader(corpus, batch_size=setup.batch, seed=0, num_workers=workers, transform=decode,
                                      pin_memory=True, drop_last=True, persistent_workers=workers > 0)
    return decode, batches


def forever(batches: Any) -> Any:
    while True:
        yield from batches


def timed(model: Any, optimizer: Any, feed: Any, setup: Setup, device: Any) -> dict[str, float]:
    """Warmup, then ``steps`` timed steps; per step the wait for data (next + to_device) and the whole step."""
    import torch

    waits, steps = [], []
    for index in range(setup.warmup + setup.steps):
        before = time.perf_counter()
        images, labels = feed()
        fed = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(images.float().div_(255)), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        done = time.perf_counter()
        if index >= setup.warmup:
            waits.append(fed - before)
            steps.append(done - before)
    return {"step_s": sum(steps) / len(steps), "wait_s": sum(waits) / len(waits), "wait_share": sum(waits) / sum(steps)}


def feeder(decode: Any, batches: Any, device: Any) -> Any:
    stream = forever(batches)

    def feed() -> tuple[Any, Any]:
        batch = next(stream)
        labels = batch["cls"]
        labels = [int(c) for c in labels] if isinstance(labels, list) else labels
        import torch

        return decode.to_device(batch, device), torch.as_tensor(labels).to(device, non_blocking=True)

    return feed


def measure(setup: Setup, folder: str, cache: str, device_name: str) -> dict[str, Any]:
    import torch

    device = torch.device(device_name)
    model = vit(setup).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    decode, batches = loader(folder, cache, setup, 0, "auto")
    stream, resident = forever(batches), []
    for _ in range(setup.warmup + setup.steps):
        batch = next(stream)
        resident.append((decode.to_device(batch, device), torch.as_tensor([int(c) for c in batch["cls"]]).to(device)))
    replay = iter(resident)
    results: dict[str, Any] = {"synthetic": timed(model, optimizer, lambda: next(replay), setup, device)}
    decoders = ["auto"] + (["nvjpeg"] if device.type == "cuda" and _nvjpeg_imports() else [])
    for decoder in decoders:
        for workers in setup.workers:
            decode, batches = loader(folder, cache, setup, workers, decoder)
            results[f"{decoder} workers={workers}"] = timed(model, optimizer, feeder(decode, batches, device), setup,
                                                            device)
    base = results["synthetic"]["step_s"]
    for name, row in results.items():
        row["step_vs_synthetic"] = row["step_s"] / base
        row["meets_target"] = name == "synthetic" or row["wait_share"] <= WAIT_TARGET
    results["parameters"] = sum(p.numel() for p in model.parameters())
    results["nvjpeg"] = "measured" if "nvjpeg" in decoders else "torchvision with CUDA does not import here"
    return results


def _nvjpeg_imports() -> bool:
    try:
        from torchvision.io import decode_jpeg  # noqa: F401
    except Exception:  # a CPU torch beside a CUDA torchvision raises more than ImportError
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False here")
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else None)
    if device is None:
        print("no GPU: torch.cuda.is_available() is False here, so the ViT image feed measured nothing "
              "(`python benchmarks/gpu_images.py --device cpu --tiny` is a dry run)")
        return 0
    setup = TINY if args.tiny else Setup()
    if args.workers is not None:
        setup = dataclasses.replace(setup, workers=tuple(int(w) for w in args.workers.split(",")))
    if args.steps is not None:
        setup = dataclasses.replace(setup, steps=args.steps)
    folder = os.path.join(args.cache, "tiny" if args.tiny else "full")
    _photos.write_shards(os.path.join(folder, "photos"), setup.samples, 128, sizes="medium")
    results = measure(setup, os.path.join(folder, "photos"), os.path.join(folder, "index"), device)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    for name, row in results.items():
        if isinstance(row, dict):
            print(f"{name:<22} step {row['step_s'] * 1e3:8.1f} ms  x{row['step_vs_synthetic']:.3f}  wait "
                  f"{row['wait_share'] * 100:6.2f}%  {'ok' if row['meets_target'] else 'MISSED'}")
    print(f"{results['parameters'] / 1e6:.1f}M parameters; nvjpeg: {results['nvjpeg']}; load {results['load_average']}")
    out = args.out or os.path.join(HERE, "results", f"gpu_images{'-tiny' if args.tiny else ''}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

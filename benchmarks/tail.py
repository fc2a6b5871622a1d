"""A slow sample does not stall the rest (issue 34.4; ``make bench-tail``, ~1.5 min): the training loop's
data wait with long-tailed sample costs, today's loader against what keeps the order exact and waits less.

Each sample costs ``--base`` ms, and a ``--slow-share`` of them (chosen by a hash of the index, so every
configuration sees the same slow samples) ``--slow`` ms: a decode whose cost varies 10-20x (a long clip, a
large image). The cost is a sleep, a decoder waiting on I/O or on cores this shared 2-CPU machine does not
have; the CPU-bound variant (``--cpu``) spins instead, and a real-video variant (``--videos``) decodes clips
of small and large H.264 videos with ``shufflepoint.VideoClips``. The loop "trains" ``--step`` ms per batch
(a sleep, as a GPU step leaves the CPU free) and times each ``next(batch)``: the data wait. Reported per
configuration, over the batches after the first ``--warmup`` (worker start-up is not the tail's), the
median over ``--rounds`` interleaved rounds of: the mean and p99 wait per batch, the share of the loop's
time spent waiting, and whether the batches came in the loader's order (``exact``: batch k holds
``loader.which(k)``, for clips by the numbers their first frames show).

Configurations: ``shufflepoint.DataLoader`` with 2 workers and torch's ``prefetch_factor`` 2 (today's
default) and 8; with ``decode_threads=4`` (each worker decodes a batch's samples in 4 threads, in order);
both; and torch's own ``DataLoader(in_order=False)`` for reference (it yields batches as workers finish:
less wait, not the loader's order, so no exact resume).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(1, str(HERE.parents[1] / "tests"))  # video_files: numbered frames

import shufflepoint  # noqa: E402


class LongTailed(torch.utils.data.Dataset[Any]):
    """Sample ``i`` is ``i`` after ``base`` ms of work, or ``slow`` ms for a hashed ``share`` of the indices."""

    def __init__(self, n: int, base: float, slow: float, share: float, cpu: bool) -> None:
        self.n, self.base, self.slow, self.share, self.cpu = n, base / 1e3, slow / 1e3, share, cpu

    def __len__(self) -> int:
        return self.n

    def is_slow(self, index: int) -> bool:
        digest = hashlib.blake2b(index.to_bytes(8, "little"), digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2**64 < self.share

    def __getitem__(self, index: int) -> int:
        seconds = self.slow if self.is_slow(index) else self.base
        if self.cpu:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(seconds)
        return index


def index_of(batch: Any, dataset: Any) -> list[Any]:
    """What a batch holds, comparable with ``which``: its indices, or for clips what their first frames show."""
    if isinstance(dataset, shufflepoint.VideoClips):
        import video_files

        return [video_files.read_numbers(clip[:1])[0] for clip in batch]
    return [int(i) for i in batch.tolist()]


def expected_of(indices: list[int], dataset: Any) -> list[Any]:
    if isinstance(dataset, shufflepoint.VideoClips):
        return [(dataset.locate(i)["video"], dataset.locate(i)["frames"][0]) for i in indices]
    return indices


def run(loader: Any, step: float, warmup: int, batches: int) -> dict[str, Any]:
    waits, received = [], []
    iterator = iter(loader)
    start = None
    for k in range(batches + warmup):
        before = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            break
        waited = time.perf_counter() - before
        if k == warmup:
            start = before
        if k >= warmup:
            waits.append(waited)
        received.append(batch)
        time.sleep(step / 1e3)
    total = time.perf_counter() - (start or time.perf_counter())
    waits_ms = np.array(waits) * 1e3
    return {"mean_wait_ms": float(waits_ms.mean()), "p99_wait_ms": float(np.percentile(waits_ms, 99)),
            "max_wait_ms": float(waits_ms.max()), "wait_share": float(waits_ms.sum() / 1e3 / total),
            "batches": len(waits), "received": received}


def exact(loader: Any, received: list[Any], dataset: Any) -> bool:
    """Whether batch k held ``loader.which(k)`` for every k (torch's own loader: no exact order to check)."""
    if not isinstance(loader, shufflepoint.DataLoader):
        return False
    return all(index_of(batch, dataset) == expected_of(loader.which(k)[loader.rank], dataset)
               for k, batch in enumerate(received))


def configurations(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    found = [("shufflepoint, prefetch_factor=2 (today)", {"prefetch_factor": 2}),
             ("shufflepoint, prefetch_factor=8", {"prefetch_factor": 8}),
             ("shufflepoint, decode_threads=4", {"prefetch_factor": 2, "decode_threads": 4}),
             ("shufflepoint, decode_threads=4, prefetch_factor=4", {"prefetch_factor": 4, "decode_threads": 4}),
             ("torch in_order=False (not exact)", {"prefetch_factor": 2, "torch_out_of_order": True})]
    wanted = None if args.only is None else args.only.split("|")
    return [(name, options) for name, options in found if wanted is None or any(w == name or w in name
                                                                                 for w in wanted)]


def make_loader(dataset: Any, args: argparse.Namespace, options: dict[str, Any]) -> Any:
    options = dict(options)
    if options.pop("torch_out_of_order", False):
        sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                                           num_workers=args.workers, in_order=False, **options)
    return shufflepoint.DataLoader(dataset, batch_size=args.batch_size, seed=0, num_workers=args.workers, **options)


def make_dataset(args: argparse.Namespace) -> Any:
    if args.videos:
        return video_corpus(args)
    return LongTailed(args.batch_size * (args.batches + args.warmup) * 2, args.base, args.slow, args.slow_share,
                      args.cpu)


def video_corpus(args: argparse.Namespace) -> Any:
    """Clips of 8 frames from 24 small (64x48) and 2 large (640x480) H.264 videos: a large clip decodes ~30x
    slower. The frames show their video's and their own number (tests/video_files.py), and are pooled to 64x48."""
    import av

    import video_files

    folder = HERE.parents[1] / "out" / "tail-videos"  # made once, ignored by git
    if not folder.exists():
        folder.mkdir(parents=True)
        for v in range(26):
            large = v % 13 == 12
            with av.open(str(folder / f"v{v:02d}.mp4"), "w") as container:
                stream = container.add_stream("libx264", rate=25)
                (stream.width, stream.height), stream.pix_fmt = (640, 480) if large else (64, 48), "yuv420p"
                stream.options = {"preset": "ultrafast"}
                rng = np.random.default_rng(v)
                for number in range(96):
                    image = video_files.frame_image(v, number)
                    if large:
                        image = np.kron(image, np.ones((10, 10, 1), np.uint8)) ^ rng.integers(0, 32, (480, 640, 3),
                                                                                             dtype=np.uint8)
                    for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                        container.mux(packet)
                for packet in stream.encode():
                    container.mux(packet)
    shrink = torch.nn.functional.adaptive_avg_pool2d
    return shufflepoint.VideoClips(str(folder / "*.mp4"), frames_per_clip=8, stride=2, cache_dir=str(folder / "cache"),
                                   transform=lambda frames: shrink(frames.float(), (48, 64)).to(torch.uint8),
                                   progress=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=float, default=2.0, help="ms per ordinary sample")
    parser.add_argument("--slow", type=float, default=40.0, help="ms per slow sample")
    parser.add_argument("--slow-share", type=float, default=0.03)
    parser.add_argument("--step", type=float, default=16.0, help="ms the loop trains per batch")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="each configuration this many times, interleaved")
    parser.add_argument("--cpu", action="store_true", help="spin instead of sleeping")
    parser.add_argument("--videos", action="store_true", help="decode real clips (VideoClips)")
    parser.add_argument("--only", default=None, help="run the configurations whose name contains this")
    parser.add_argument("--out", default=str(HERE.parent / "results"))
    args = parser.parse_args()
    dataset = make_dataset(args)
    found: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):  # interleaved: the machine's other load falls on every configuration alike
        for name, options in configurations(args):
            loader = make_loader(dataset, args, options)
            measured = run(loader, args.step, args.warmup, args.batches)
            measured["exact"] = exact(loader, measured.pop("received"), dataset)
            found.setdefault(name, []).append(measured)
            print(json.dumps({"round": round_, "configuration": name, **measured}), flush=True)
    report(args, [summary(name, runs) for name, runs in found.items()])


def summary(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over rounds of each measure, and the spread of the mean wait."""
    means = [r["mean_wait_ms"] for r in runs]
    return {"configuration": name, **{key: float(np.median([r[key] for r in runs]))
                                      for key in ("mean_wait_ms", "p99_wait_ms", "max_wait_ms", "wait_share")},
            "spread": (min(means), max(means)), "exact": all(r["exact"] for r in runs)}


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    load = os.getloadavg()[0]
    kind = "videos" if args.videos else ("cpu" if args.cpu else "sleep")
    lines = [f"workload: {kind}; batch {args.batch_size}, {args.workers} workers, step {args.step} ms; "
             + ("" if args.videos else f"sample {args.base} ms, {args.slow_share:.0%} at {args.slow} ms; ")
             + f"{args.batches} batches after {args.warmup}, median of {args.rounds} interleaved rounds; "
             f"load {load:.1f}; {platform.node()}", "",
             "| configuration | mean wait / batch (rounds' range) | p99 wait | max wait | share of time waiting | "
             "exact order |", "|---|---|---|---|---|---|"]
    base = rows[0]["mean_wait_ms"] if rows else 0
    for row in rows:
        ratio = f" ({row['mean_wait_ms'] / base:.2f}x)" if base else ""
        low, high = row["spread"]
        lines.append(f"| {row['configuration']} | {row['mean_wait_ms']:.2f} ms{ratio} ({low:.2f}-{high:.2f}) | "
                     f"{row['p99_wait_ms']:.1f} ms | "
                     f"{row['max_wait_ms']:.1f} ms | {row['wait_share']:.1%} | {row['exact']} |")
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"tail-{kind}.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()

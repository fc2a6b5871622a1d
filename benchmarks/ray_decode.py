"""make bench-ray: decoding photos on Ray actors, shufflepoint's RayDataLoader against Ray Data, same decode.

    python benchmarks/ray_decode.py [--samples 2000] [--sizes mixed] [--batch 32] [--actors 1,2] [--out ...]

The corpus: ``make bench-images``'s photos (``.bench-cache/images/<sizes>-<samples>/photos``, WebDataset tars of
100 written by ``_photos.py``; ``make bench-ray`` writes them first with the main venv, which has scikit-image).
Both systems do the same work per image: ``shufflepoint.DecodeImage(224)`` (the crop planned from the header, a
reduced JPEG decode, a random resized crop and flip, uint8 CHW), in ``k`` Ray actors of 1 CPU each, batches of
``--batch`` handed to one trainer loop in this process:

- shufflepoint: ``RayDataLoader(Shards(tars), transform=DecodeImage(224), decode_actors=k)``: exact order, keyed
  randomness, a batch per actor call;
- Ray Data 2.60: ``read_webdataset(tars, decoder=None, shuffle=FileShuffleConfig(seed))``, ``map_batches`` of a
  class doing the same ``DecodeImage`` per row (``concurrency=k``, ``num_cpus=1``: k actors), then
  ``iter_torch_batches``.

Each configuration runs in its own fresh process with its own local Ray (``num_cpus = k + 1``: Ray Data's read
tasks need a CPU beside its map actors; ours leave it idle), two epochs: the first starts the actors (cold), the
second is timed (warm). CPU-seconds: user + system time of this process and all its descendants (the raylet,
its workers and actors: ``/proc``, sampled every 0.2 s) over the warm epoch. Then, in the shufflepoint process,
the object-store hop of one batch (an actor returns a ready batch; ``ray.get`` in the loop), and in each, a kill
and a resume: the first ``--kill-at`` batches (of 40) taken, the consumer dropped (its actors killed), a new one
resumed (ours: from the state; Ray Data: the same pipeline again, either from the epoch's start or skipping the
batches already taken, the two ways it offers without Anyscale's checkpointing), and the epoch's samples
duplicated and lost counted by key.
Results: a table, and JSON in ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEED, SIZE = 0, 224
KILL_BATCH = 40  # the kill-and-resume runs' batch: 2,000 photos are 50 of them, no tail to pad or drop


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sizes", default="mixed")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--actors", default="1,2", help="pool sizes to measure, comma-separated")
    parser.add_argument("--kill-at", type=int, default=20, help="batches taken before the kill")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "ray_decode.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # system:actors, run in this process
    args = parser.parse_args(argv)
    args.photos = os.path.join(ROOT, ".bench-cache", "images", f"{args.sizes}-{args.samples}", "photos")
    return args


# -- CPU time of a process tree ------------------------------------------------------------------------------
def tree_ticks(root: int) -> dict[int, int]:
    """User + system clock ticks of ``root`` and each live descendant (from /proc: Ray's raylet and workers)."""
    parents, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        parents[int(name)], ticks[int(name)] = int(fields[1]), int(fields[11]) + int(fields[12])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = {}, [root]
    while stack:
        pid = stack.pop()
        found[pid] = ticks.get(pid, 0)
        stack.extend(children.get(pid, []))
    return found


class TreeCpu:
    """CPU-seconds of a process tree over a window, sampled every 0.2 s: a process born in the window counts
    from 0, one that ends in it (Ray Data ends its map actors with each execution) up to its last sample."""

    def __init__(self) -> None:
        import threading

        self._first = tree_ticks(os.getpid())
        self._last = dict(self._first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self._last.update(tree_ticks(os.getpid()))
        self._own = time.thread_time()  # this thread's reading of /proc, taken out of the count

    def seconds(self) -> float:
        self._stop.set()
        self._thread.join()
        self._last.update(tree_ticks(os.getpid()))
        used = sum(ticks - self._first.get(pid, 0) for pid, ticks in self._last.items())
        return used / os.sysconf("SC_CLK_TCK") - self._own


def timed_epoch(batches: Any) -> dict[str, float]:
    wall, cpu = time.perf_counter(), TreeCpu()
    images = sum(len(batch["image"]) for batch in batches)
    wall, seconds = time.perf_counter() - wall, cpu.seconds()
    return {"images": images, "wall_s": wall, "cpu_s": seconds, "images_per_s": images / wall,
            "images_per_cpu_s": images / seconds}


def keys_of(batches: Any, limit: int | None = None) -> list[int]:
    """The samples' keys, as ints, of the first ``limit`` batches (never pulling one more: the loader counts
    a batch as received when it hands it over)."""
    return [int(k) for batch in itertools.islice(batches, limit) for k in batch["__key__"]]


def counted(first: list[int], second: list[int], samples: int) -> dict[str, int]:
    """Duplicated: samples served twice in the epoch (first run's committed batches, then the resumed run);
    lost: samples never served."""
    every = first + second
    return {"duplicated": len(every) - len(set(every)), "lost": samples - len(set(every))}


# -- shufflepoint ----------------------------------------------------------------------------------------------
def ours(args: argparse.Namespace, actors: int) -> dict[str, Any]:
    import ray
    import torch

    import shufflepoint
    from shufflepoint.integrations.ray import RayDataLoader

    corpus = shufflepoint.Shards(os.path.join(args.photos, "*.tar"), cache_dir=os.path.join(args.photos, "..",
                                 "index"), progress=False)
    kwargs = dict(batch_size=args.batch, seed=SEED, transform=shufflepoint.DecodeImage(SIZE), drop_last=True)
    loader = RayDataLoader(corpus, decode_actors=actors, **kwargs)
    cold = time.perf_counter()
    sum(1 for _ in loader)
    result: dict[str, Any] = {"cold_s": time.perf_counter() - cold, "warm": timed_epoch(loader)}
    result["waited_s"] = loader.pool.stats.waited_s
    loader.pool.close()  # its CPUs, for the next pools

    # a kill and a resume: the first kill_at batches, the loader and its actors gone, a new one from the state
    kwargs_kill = dict(kwargs, batch_size=KILL_BATCH, drop_last=False)  # 2,000 = 50 x 40: no tail
    first = RayDataLoader(corpus, decode_actors=actors, **kwargs_kill)
    taken = keys_of(first, args.kill_at)
    state = first.state_dict()
    first.pool.close()
    del first
    resumed = RayDataLoader(corpus, decode_actors=actors, **kwargs_kill)
    resumed.load_state_dict(state)
    result["kill_resume"] = counted(taken, keys_of(resumed), args.samples)
    resumed.pool.close()

    @ray.remote(num_cpus=1)
    class Ready:  # the object-store hop alone: an actor hands back a batch it already holds
        def __init__(self, batch: Any) -> None:
            self.batch = batch

        def get(self) -> Any:
            return self.batch

    batch = next(iter(shufflepoint.DataLoader(corpus, **kwargs)))
    actor = Ready.remote(batch)
    ray.get(actor.get.remote())
    started, rounds = time.perf_counter(), 30
    for _ in range(rounds):
        got = ray.get(actor.get.remote())
    result["hop_ms_per_batch"] = 1000 * (time.perf_counter() - started) / rounds
    result["batch_mb"] = got["image"].numel() / 1e6
    assert torch.equal(got["image"], batch["image"])
    return result


# -- Ray Data ----------------------------------------------------------------------------------------------
class _Decode:
    """Ray Data's map_batches class: the same DecodeImage per row, with a generator per sample."""

    def __init__(self) -> None:
        import shufflepoint

        self.decode = shufflepoint.DecodeImage(SIZE)

    def __call__(self, rows: dict[str, Any]) -> dict[str, Any]:
        import zlib

        import numpy as np

        images = [self.decode({"__key__": key, "jpg": bytes(data)},
                              np.random.default_rng(zlib.crc32(str(key).encode())))["image"].numpy()
                  for key, data in zip(rows["__key__"], rows["jpg"], strict=True)]
        return {"__key__": np.asarray([int(k) for k in rows["__key__"]]), "image": np.stack(images)}


def ray_data(args: argparse.Namespace, actors: int) -> dict[str, Any]:
    import ray.data
    from ray.data.datasource import FileShuffleConfig

    tars = sorted(os.path.join(args.photos, f) for f in os.listdir(args.photos) if f.endswith(".tar"))

    def pipeline(batch: int = args.batch, drop_last: bool = True) -> Any:
        dataset = ray.data.read_webdataset(tars, decoder=None, suffixes=["jpg"], shuffle=FileShuffleConfig(seed=SEED))
        dataset = dataset.map_batches(_Decode, batch_size=batch, concurrency=actors, num_cpus=1)
        return dataset.iter_torch_batches(batch_size=batch, drop_last=drop_last)

    ray.data.DataContext.get_current().enable_progress_bars = False
    cold = time.perf_counter()
    sum(1 for _ in pipeline())
    result: dict[str, Any] = {"cold_s": time.perf_counter() - cold, "warm": timed_epoch(pipeline())}
    taken = keys_of(pipeline(KILL_BATCH, False), args.kill_at)
    result["kill_resume_restart_epoch"] = counted(taken, keys_of(pipeline(KILL_BATCH, False)), args.samples)
    rest = keys_of(pipeline(KILL_BATCH, False))[args.kill_at * KILL_BATCH:]  # the batches already taken skipped
    result["kill_resume_skip_taken"] = counted(taken, rest, args.samples)
    return result


def child(args: argparse.Namespace) -> None:
    import ray

    system, actors = args.child.split(":")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ray.init(num_cpus=int(actors) + 1, include_dashboard=False, log_to_driver=False)
    try:
        found = (ours if system == "shufflepoint" else ray_data)(args, int(actors))
    finally:
        ray.shutdown()
    print("RESULT " + json.dumps(found))


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    """The same decode in this process, no Ray: the per-core rate the pools are measured against."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(args.photos, "*.tar"), cache_dir=os.path.join(args.photos, "..",
                                 "index"), progress=False)
    loader = shufflepoint.DataLoader(corpus, batch_size=args.batch, seed=SEED, transform=shufflepoint.DecodeImage(SIZE),
                                     drop_last=True)
    sum(1 for _ in loader)  # cold, as the pools' first epoch
    return {"warm": timed_epoch(loader)}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.child:
        return child(args)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not os.path.isdir(args.photos):
        raise SystemExit(f"{args.photos}: no photos; run `make bench-ray` (it writes them with the main venv)")
    results: dict[str, Any] = {"samples": args.samples, "sizes": args.sizes, "batch": args.batch,
                               "in_process": in_process(args), "runs": {}}
    for actors in [int(a) for a in args.actors.split(",")]:
        for system in ("shufflepoint", "ray-data"):
            done = subprocess.run([sys.executable, __file__, "--child", f"{system}:{actors}", "--samples",
                                   str(args.samples), "--sizes", args.sizes, "--batch", str(args.batch),
                                   "--kill-at", str(args.kill_at)], capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not lines:
                raise SystemExit(f"{system} with {actors} actors failed:\n{done.stderr[-4000:]}")
            results["runs"][f"{system}:{actors}"] = json.loads(lines[-1][len("RESULT "):])
            print(system, actors, json.dumps(results["runs"][f"{system}:{actors}"]), flush=True)
    results["load"] = os.getloadavg()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(f"# make bench-ray ({time.strftime('%Y-%m-%d')}, 2 cores, shared: load average "
                f"{results['load'][0]:.1f} at the end)\n\n{table(results)}\n")
    print(table(results))


def table(results: dict[str, Any]) -> str:
    rows = ["| system | actors | warm images/s | images per CPU-s | cold epoch s | kill + resume: duplicated / lost |",
            "|---|---|---|---|---|---|"]
    base = results["in_process"]["warm"]
    rows.append(f"| in process (no Ray) | 0 | {base['images_per_s']:.0f} | {base['images_per_cpu_s']:.0f} | - | - |")
    for name, run in results["runs"].items():
        system, actors = name.split(":")
        warm = run["warm"]
        if system == "shufflepoint":
            kill = f"{run['kill_resume']['duplicated']} / {run['kill_resume']['lost']} (from the state)"
        else:
            restart, skip = run["kill_resume_restart_epoch"], run["kill_resume_skip_taken"]
            kill = (f"{restart['duplicated']} / {restart['lost']} (epoch restarted); "
                    f"{skip['duplicated']} / {skip['lost']} (taken batches skipped)")
        rows.append(f"| {system} | {actors} | {warm['images_per_s']:.0f} | {warm['images_per_cpu_s']:.0f} | "
                    f"{run['cold_s']:.1f} | {kill} |")
    hop = [run for name, run in results["runs"].items() if name.startswith("shufflepoint")]
    if hop:
        rows.append(f"\nobject-store hop: {hop[0]['hop_ms_per_batch']:.1f} ms per batch of {hop[0]['batch_mb']:.1f} MB")
    return "\n".join(rows)


if __name__ == "__main__":
    main()

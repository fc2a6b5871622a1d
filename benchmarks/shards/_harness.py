"""What every loader's child process shares: the measurements, the sampler of RSS and cache bytes, JSON out.

A child runs one measurement of one loader and prints one JSON record on its last stdout line.
It imports only the standard library, numpy, psutil and torch, so it runs in every peer's venv.
An adapter (one per loader) supplies:

    make(args, state=None) -> (loader, seconds spent loading the state)   # builds dataset + loader
    state_at(args, cursor) -> a state dict of that loader, ``cursor`` samples into the epoch (rank's count)
    ids(batch) -> numpy int64 sample ids of a batch
    prepare(args) (optional) -> None: imports, done before anything is timed
    choices(args) (optional) -> {what: how}: the adapter's settings, written beside the figures
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def decode_ids(tokens: Any) -> np.ndarray:
    """Sample ids from a batch of token windows (positions 1 and 2 hold the id, see corpus.py)."""
    array = np.asarray(tokens).astype(np.int64)
    return (array[:, 1] << 16) | array[:, 2]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["throughput", "epoch", "resume", "convert"])
    p.add_argument("--data", required=True, help="the loader's own copy of the corpus (folder or URL)")
    p.add_argument("--source", default="", help="convert: the tokens/ folder to convert from")
    p.add_argument("--workload", default="tokens", choices=["tokens", "text"])
    p.add_argument("--samples", type=int, default=0, help="the corpus' samples (all ranks)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--measure", type=int, default=100_000, help="throughput: samples to time, at least")
    p.add_argument("--warmup-batches", type=int, default=200, help="throughput: batches after the first, timed apart")
    p.add_argument("--min-seconds", type=float, default=10.0, help="throughput: the steady window, at least")
    p.add_argument("--stop-after", type=int, default=0, help="epoch: stop after this many samples (0: the whole epoch)")
    p.add_argument("--fraction", type=float, default=0.0, help="resume: the cursor, as a fraction of the epoch")
    p.add_argument("--block", type=int, default=65_536, help="shuffle block / buffer, in samples")
    p.add_argument("--cache", default="", help="a local cache folder for remote data")
    p.add_argument("--cache-bytes", type=int, default=256 << 20)
    p.add_argument("--endpoint", default="", help="the S3-compatible endpoint URL")
    p.add_argument("--seed", type=int, default=1234)
    return p


class Peaks:
    """Samples the RSS of this process tree (main + workers, summed) and a cache folder's bytes."""

    def __init__(self, cache: str, period: float = 0.1) -> None:
        import psutil

        self._me, self._cache, self._period = psutil.Process(), cache, period
        self.rss, self.cache_bytes = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_rss(self) -> int:
        total = 0
        for proc in [self._me, *self._me.children(recursive=True)]:
            try:
                total += proc.memory_info().rss
            except Exception:  # noqa: BLE001 - a worker that just exited
                continue
        return total

    def sample(self) -> None:
        self.rss = max(self.rss, self._tree_rss())
        if self._cache and os.path.isdir(self._cache):
            used = 0
            for path in Path(self._cache).rglob("*"):
                try:
                    used += path.stat().st_size if path.is_file() else 0
                except OSError:
                    continue
            self.cache_bytes = max(self.cache_bytes, used)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self.sample()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self.sample()
        return {"peak_rss_bytes": self.rss, "peak_cache_bytes": self.cache_bytes}


def throughput(adapter: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Time to the first batch; then a warm-up of ``--warmup-batches`` (timed apart: worker start-up
    and epoch-start effects, e.g. LitData's mid-chunk workers, fall in it); then the steady rate over
    at least ``--measure`` samples and ``--min-seconds``, or to the end of the epoch (rank 0 of --world)."""
    peaks = Peaks(args.cache)
    start = time.perf_counter()
    loader, _ = adapter.make(args)
    batches = iter(loader)
    seen = [adapter.ids(next(batches))]
    first = time.perf_counter()
    warmup = min(args.warmup_batches, args.samples // (4 * args.batch))  # the small text corpus is short
    for _ in range(warmup):
        seen.append(adapter.ids(next(batches)))
    warm = time.perf_counter()
    count = 0
    while count < args.measure or time.perf_counter() - warm < args.min_seconds:
        batch = next(batches, None)
        if batch is None:  # the epoch ended first
            break
        ids = adapter.ids(batch)
        seen.append(ids)
        count += len(ids)
    end = time.perf_counter()
    ids = np.concatenate(seen)
    return {"first_batch_s": first - start, "warmup_batches": warmup, "warmup_s": warm - first, "samples": count,
            "seconds": end - warm, "samples_per_s": count / (end - warm), "distinct": int(np.unique(ids).size),
            "read": int(ids.size), "in_range": bool(ids.min() >= 0 and ids.max() < args.samples), **peaks.stop()}


def epoch(adapter: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One whole epoch of rank ``--rank`` of ``--world``: how many samples, how many distinct, peaks."""
    peaks = Peaks(args.cache)
    start = time.perf_counter()
    loader, _ = adapter.make(args)
    seen = np.zeros(args.samples, dtype=np.uint8)
    read = 0
    for batch in loader:
        ids = adapter.ids(batch)
        np.add.at(seen, ids, 1)
        read += len(ids)
        if args.stop_after and read >= args.stop_after:
            break
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "read": read, "distinct": int(np.count_nonzero(seen)),
            "repeated": int(np.count_nonzero(seen > 1)), "samples_per_s": read / seconds, **peaks.stop()}


def resume(adapter: Any, args: argparse.Namespace) -> dict[str, Any]:
    """In this fresh process: load a state ``--fraction`` into the epoch, time to the first batch."""
    per_rank = args.samples // args.world
    cursor = int(per_rank * args.fraction) // args.batch * args.batch
    state = adapter.state_at(args, cursor)
    peaks = Peaks(args.cache)
    start = time.perf_counter()
    loader, load_s = adapter.make(args, state=state)
    built = time.perf_counter()
    first = adapter.ids(next(iter(loader)))
    end = time.perf_counter()
    record = {"cursor": cursor, "resume_s": load_s + (end - built), "construct_s": built - start - load_s,
              "total_s": end - start, "first_ids": first[:8].tolist(), **peaks.stop()}
    check = getattr(adapter, "check_resume", None)
    if check is not None:
        record.update(check(args, cursor, first))
    return record


def main(adapter: Any) -> None:
    args = parser().parse_args()
    if args.mode == "convert":
        adapter.convert(args)
        return
    prepare = getattr(adapter, "prepare", None)
    if prepare is not None:
        prepare(args)  # imports, outside every timed span
    load = os.getloadavg()
    record = {"throughput": throughput, "epoch": epoch, "resume": resume}[args.mode](adapter, args)
    record["loadavg"] = [load[0], os.getloadavg()[0]]  # 1-minute load at the start and end: the machine is shared
    choices = getattr(adapter, "choices", None)
    if choices is not None:
        record["choices"] = choices(args)
    print(json.dumps(record), flush=True)
    os._exit(0)  # no interpreter teardown: some peers' worker/thread shutdown hangs or takes seconds

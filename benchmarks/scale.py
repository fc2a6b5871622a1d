"""What a 16,384-rank job (2,048 nodes x 8) pays to start, per rank, over a corpus of 1e5 shards (issue 33.6).

``make bench-scale`` (about 2 minutes here, plus the Gloo run). Writes ``benchmarks/results/scale.md`` and ``.json``.

- The corpus: 1e5 token shards (``.bin``, uint16) of 1e7 tokens each, 1e12 tokens, 4.9e8 windows of 2,048
  tokens (a ``Shards`` corpus reads token windows; the 1e9 documents of the issue are ``Packed``'s side, whose
  token counts another change publishes). It lives in a storage stub (``scalestub://``, an fsspec filesystem
  registered in every process): it lists the shards (as 100 LIST pages of 1,000 keys would), serves the index
  ``shufflepoint index`` would publish beside them (written here once, from the same records; columnar, with the
  glob recorded, so a rank reads it instead of listing), and serves a
  shard's bytes generated on demand (zeros: token 0), counting every byte and request it serves. No payload
  exists anywhere.
- Each sampled rank is a fresh process with an empty cache folder (a fresh node): ``Shards()``, ``DataLoader(rank=r,
  world_size=16384)``, ``load_state_dict`` and its first batch, timed (wall and CPU), the bytes it fetched
  before its first batch, and its peak RSS. Three starts: fresh (epoch 0, no state), resumed at 50% of the
  epoch, and resumed after resizes 16,384 -> 12,288 -> 16,384 (the states are built with the layout history's
  own arithmetic, ``benchmarks/which.py``'s ``state_at``). One node's eight ranks share a cache folder: the
  bytes the node reads before its first batches.
- ``which(step)`` at 16,384 ranks over this corpus, and the state after 1,000 resizes (its size; a load of it).
- ``--gloo N`` (the make target: 32): a real run of N processes on Gloo (``torch.distributed.run``), each from
  its own start to its first batch (resumed at 50% on N ranks, the agreement collective included): p50/p99.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHARDS, TOKENS_PER_SHARD, SEQ_LEN, BATCH = 100_000, 10_000_000, 2048, 8
WORLD, RESIZED, NODE = 16_384, 12_288, 8
SAMPLED = (0, 1, 4095, 8191, 12_287, 16_383)
ROOT = "scalestub://corpus"
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SHARD_BYTES = 2 * (TOKENS_PER_SHARD + 1)  # uint16 tokens; a window needs one token past it


# -- the storage stub ---------------------------------------------------------------------------
def register_stub() -> dict[str, int]:
    """Register ``scalestub://`` in this process; the counters it fills (bytes and requests by kind)."""
    import fsspec
    from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

    counts = {"list_requests": 0, "index_bytes": 0, "data_bytes": 0, "data_requests": 0, "head_requests": 0}
    published = os.environ.get("SCALE_PUBLISHED", "")

    def detail(path: str) -> dict[str, Any]:
        return {"name": path, "size": SHARD_BYTES, "type": "file", "ETag": '"v1"'}

    class StubFile(AbstractBufferedFile):
        def _fetch_range(self, start: int, end: int) -> bytes:
            counts["data_bytes"] += end - start
            counts["data_requests"] += 1
            return bytes(end - start)

    class StubFS(AbstractFileSystem):
        protocol = "scalestub"

        def glob(self, path: str, maxdepth: int | None = None, **kwargs: Any) -> Any:
            counts["list_requests"] += -(-SHARDS // 1000)  # S3 lists 1,000 keys a page
            names = [f"corpus/s{i:06d}.bin" for i in range(SHARDS)]
            return {name: detail(name) for name in names} if kwargs.get("detail") else names

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            counts["head_requests"] += 1
            path = self._strip_protocol(path)
            if path.endswith(".bin"):
                return detail(path)
            if published and path.rsplit("/", 1)[-1] == os.path.basename(published):
                return {"name": path, "size": os.path.getsize(published), "type": "file", "ETag": '"i1"'}
            raise FileNotFoundError(path)

        def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
            path = self._strip_protocol(path)
            if not (published and path.rsplit("/", 1)[-1] == os.path.basename(published)):
                raise FileNotFoundError(path)
            data = Path(published).read_bytes()
            counts["index_bytes"] += len(data)
            return data

        def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
                  cache_options: Any = None, **kwargs: Any) -> Any:
            return StubFile(self, path, mode, block_size or 8 << 20, autocommit, cache_type="none",
                            size=SHARD_BYTES)

    fsspec.register_implementation("scalestub", StubFS, clobber=True)
    return counts


def publish(path: Path) -> None:
    """The index ``shufflepoint index`` would publish beside the corpus, for every shard as the stub lists it."""
    import numpy as np

    from shufflepoint._shards.index import index as _index
    from shufflepoint._shards.index import index_file
    from shufflepoint._shards.index.indexing import published_name
    from shufflepoint._shards.readers import make_reader

    reader = make_reader("tokens", seq_len=SEQ_LEN)
    rows = (SHARD_BYTES // 2 - 1) // SEQ_LEN
    records = tuple(_index.ShardRecord(f"s{i:06d}.bin", SHARD_BYTES, "v1", rows) for i in range(SHARDS))
    built = _index.CorpusIndex(ROOT, reader.name, reader.options(), records)
    path.mkdir(parents=True, exist_ok=True)
    target = path / published_name(reader.name, reader.options())
    # As ``shufflepoint index scalestub://corpus/*.bin`` writes it: the glob recorded with its shards.
    target.write_bytes(index_file.encode(built, {"*.bin": np.arange(SHARDS)}))


def published_file(folder: Path) -> Path:
    found = sorted(folder.glob(".shufflepoint-index-*"))
    assert len(found) == 1, found
    return found[0]


# -- one rank, a fresh process ------------------------------------------------------------------
def child(rank: int, world: int, state_path: str, cache: str) -> dict[str, Any]:
    began, began_cpu = time.perf_counter(), time.process_time()
    import shufflepoint

    counts = register_stub()
    imported, imported_cpu = time.perf_counter(), time.process_time()
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks[name] = time.perf_counter()
        marks[name + "_cpu"] = time.process_time()

    corpus = shufflepoint.Shards(f"{ROOT}/*.bin", seq_len=SEQ_LEN, cache_dir=cache, progress=False)
    mark("shards")
    loader = shufflepoint.DataLoader(corpus, BATCH, seed=1, rank=rank, world_size=world, num_workers=0)
    mark("loader")
    if state_path:
        with open(state_path) as f:
            loader.load_state_dict(json.load(f))
    mark("load")
    batch = next(iter(loader))
    mark("batch")
    before = dict(counts)
    assert batch.shape[0] == BATCH
    return {"rank": rank, "world": world, "import_s": imported - began, "import_cpu_s": imported_cpu - began_cpu,
            "shards_s": marks["shards"] - imported, "shards_cpu_s": marks["shards_cpu"] - imported_cpu,
            "loader_s": marks["loader"] - marks["shards"], "load_s": marks["load"] - marks["loader"],
            "batch_s": marks["batch"] - marks["load"],
            "to_first_batch_s": marks["batch"] - imported, "to_first_batch_cpu_s": marks["batch_cpu"] - imported_cpu,
            "bytes_before_first_batch": before["index_bytes"] + before["data_bytes"], **before,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(rank: int, world: int, state: str, cache: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", str(rank), str(world), state, cache],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode:
        raise SystemExit(f"rank {rank} failed:\n{out.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


# -- the states ---------------------------------------------------------------------------------
def states(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """The resumed states (50%; after 16,384 -> 12,288 -> 16,384), written to ``folder``."""
    sys.path.insert(0, str(HERE))
    os.environ.update(env)
    register_stub()
    from which import state_at

    import shufflepoint

    corpus = shufflepoint.Shards(f"{ROOT}/*.bin", seq_len=SEQ_LEN, cache_dir=str(folder / "cache-parent"),
                                 progress=False)
    loader = shufflepoint.DataLoader(corpus, BATCH, seed=1, rank=0, world_size=WORLD)
    per_epoch = len(loader)
    half = per_epoch // 2
    found = {"resumed": state_at(loader, half, [(0, WORLD, BATCH)]),
             "resized": state_at(loader, half, [(0, WORLD, BATCH), (half // 2, RESIZED, BATCH),
                                                (half // 2 + half // 4, WORLD, BATCH)])}
    paths = {}
    for name, state in found.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(state))
        paths[name] = str(path)
    paths["batches_per_epoch"] = str(per_epoch)
    paths["rows"] = str(len(corpus))
    paths["segments_resized"] = json.dumps(found["resized"]["segments"])
    return paths


# -- which, and many resizes --------------------------------------------------------------------
def which_child(state_path: str, cache: str) -> dict[str, Any]:
    import shufflepoint

    register_stub()
    with open(state_path) as f:
        state = json.load(f)
    corpus = shufflepoint.Shards(f"{ROOT}/*.bin", seq_len=SEQ_LEN, cache_dir=cache, progress=False)
    loader = shufflepoint.DataLoader(corpus, BATCH, seed=1, rank=0, world_size=state["world_size"])
    loader.load_state_dict(state)
    found = {}
    for name, step in (("now", state["steps"]), ("last of the epoch", state["steps"] + loader.batches_left() - 1)):
        start, cpu = time.perf_counter(), time.process_time()
        answer = loader.which(step)
        found[name] = {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu, "ranks": len(answer)}
    return {"which": found, "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "state_bytes": len(json.dumps(state))}


def many_resizes(count: int) -> dict[str, Any]:
    """``count`` resizes among 2, 3 and 4 ranks in one epoch (one batch each): the state's size, and a load."""
    import shufflepoint

    n, state = 100_000, None
    start = time.perf_counter()
    for number in range(count):
        loader = shufflepoint.DataLoader(list(range(n)), 2, seed=7, rank=0, world_size=2 + number % 3, deal="spans")
        if state is not None:
            loader.load_state_dict(state)
        next(iter(loader))
        state = loader.state_dict()
    elapsed = time.perf_counter() - start
    fresh = shufflepoint.DataLoader(list(range(n)), 2, seed=7, rank=0, world_size=3, deal="spans")
    load_start = time.perf_counter()
    fresh.load_state_dict(state)
    load_s = time.perf_counter() - load_start
    assert state is not None
    return {"resizes": count, "state_bytes": len(json.dumps(state)), "segments": len(state["segments"]),
            "version": state["version"], "load_s": load_s, "per_resize_s": elapsed / count}


# -- a real Gloo run ----------------------------------------------------------------------------
def gloo_worker(state_dir: str, out_dir: str) -> None:
    """One process of a ``torch.distributed.run`` job: its start (``/proc/self/stat``) to its first batch."""
    import torch.distributed as dist

    import shufflepoint

    register_stub()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    corpus = shufflepoint.Shards(f"{ROOT}/*.bin", seq_len=SEQ_LEN, cache_dir=os.path.join(state_dir, f"cache-{rank}"),
                                 progress=False)
    loader = shufflepoint.DataLoader(corpus, BATCH, seed=1)
    with open(os.path.join(state_dir, "gloo-state.json")) as f:
        loader.load_state_dict(json.load(f))
    next(iter(loader))
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    since_start = uptime - started_ticks / os.sysconf("SC_CLK_TCK")
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "start_to_first_batch_s": since_start}, f)
    dist.barrier()
    dist.destroy_process_group()


def gloo(processes: int, folder: Path, env: dict[str, str]) -> dict[str, Any]:
    os.environ.update(env)
    register_stub()
    sys.path.insert(0, str(HERE))
    from which import state_at

    import shufflepoint

    corpus = shufflepoint.Shards(f"{ROOT}/*.bin", seq_len=SEQ_LEN, cache_dir=str(folder / "cache-parent"),
                                 progress=False)
    loader = shufflepoint.DataLoader(corpus, BATCH, seed=1, rank=0, world_size=processes)
    (folder / "gloo-state.json").write_text(json.dumps(state_at(loader, len(loader) // 2, [(0, processes, BATCH)])))
    out = folder / "gloo-out"
    out.mkdir(exist_ok=True)
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc_per_node={processes}", __file__, "--gloo-worker", str(folder), str(out)],
                         capture_output=True, text=True, env=env, timeout=900)
    if run.returncode:
        raise SystemExit(f"the Gloo run failed:\n{run.stderr[-4000:]}")
    times = sorted(json.loads(p.read_text())["start_to_first_batch_s"] for p in out.glob("*.json"))
    assert len(times) == processes, len(times)
    return {"processes": processes, "wall_s": time.perf_counter() - start, "p50_s": statistics.median(times),
            "p99_s": times[min(len(times) - 1, int(0.99 * len(times)))], "max_s": times[-1]}


# -- the report ---------------------------------------------------------------------------------
def report(found: dict[str, Any]) -> str:
    lines = [f"# bench-scale: a {WORLD:,}-rank start over {SHARDS:,} shards ({found['rows']:,} windows, 1e12 tokens)",
             "", f"Machine: {found['machine']}; load before the run: {found['load']}. Wall times on a shared 2-CPU box "
             f"are inflated; CPU seconds are given beside them. Remote shards read {found.get('reads', 'whole')}.", "",
             "| start | rank | Shards() wall / CPU | DataLoader() | load_state_dict | first batch | to first batch, "
             "wall / CPU | bytes before the first batch (index + data) | requests (LIST pages, data GETs) "
             "| peak RSS |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in found["ranks"]:
        lines.append(
            f"| {row['start']} | {row['rank']:,} | {row['shards_s']:.2f} / {row['shards_cpu_s']:.2f} s "
            f"| {row['loader_s'] * 1e3:.0f} ms | {row['load_s'] * 1e3:.0f} ms | {row['batch_s']:.2f} s "
            f"| {row['to_first_batch_s']:.2f} / {row['to_first_batch_cpu_s']:.2f} s "
            f"| {row['bytes_before_first_batch'] / 1e6:.1f} MB ({row['index_bytes'] / 1e6:.1f} + "
            f"{row['data_bytes'] / 1e6:.1f}) | {row['list_requests']}, {row['data_requests']} "
            f"| {row['max_rss_mib']:.0f} MiB |")
    node = found["node"]
    lines += ["", f"One node (ranks 0-7, one cache folder), resumed at 50%: {node['bytes'] / 1e6:.1f} MB before "
              f"their first batches ({node['index_bytes'] / 1e6:.1f} MB of index, {node['data_bytes'] / 1e6:.1f} MB "
              f"of shards); its share of the corpus is {2 * 10**12 / (WORLD // NODE) / 1e6:,.0f} MB.", "",
              "| which(step) at 16,384 ranks | state bytes | now: wall / CPU | last step of the epoch: wall / CPU "
              "| peak RSS |", "|---|---|---|---|---|"]
    for name, row in found["which"].items():
        now, last = row["which"]["now"], row["which"]["last of the epoch"]
        lines.append(f"| {name} | {row['state_bytes']:,} | {now['wall_s'] * 1e3:.0f} / {now['cpu_s'] * 1e3:.0f} ms "
                     f"| {last['wall_s'] * 1e3:.0f} / {last['cpu_s'] * 1e3:.0f} ms | {row['max_rss_mib']:.0f} MiB |")
    many = found["many_resizes"]
    lines += ["", f"{many['resizes']:,} resizes in one epoch (2, 3, 4 ranks in turn): state {many['state_bytes']:,} "
              f"bytes (version {many['version']}, {many['segments']} segments pairs), a load of it "
              f"{many['load_s'] * 1e3:.0f} ms, {many['per_resize_s'] * 1e3:.0f} ms per resize (build, load, one "
              "batch)."]
    if found.get("gloo"):
        g = found["gloo"]
        lines += ["", f"Gloo, {g['processes']} processes on this machine (torch.distributed.run, resumed at 50%): "
                  f"start to first batch p50 {g['p50_s']:.1f} s, p99 {g['p99_s']:.1f} s (the run {g['wall_s']:.0f} s)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=4)
    parser.add_argument("--which-child", nargs=2)
    parser.add_argument("--gloo-worker", nargs=2)
    parser.add_argument("--gloo", type=int, default=0, help="also a real run of this many processes on Gloo")
    parser.add_argument("--resizes", type=int, default=1000)
    args = parser.parse_args()
    if args.child:
        rank, world, state, cache = args.child
        print(json.dumps(child(int(rank), int(world), state, cache)))
        return
    if args.which_child:
        print(json.dumps(which_child(*args.which_child)))
        return
    if args.gloo_worker:
        gloo_worker(*args.gloo_worker)
        return
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        folder = Path(tmp)
        publish(folder / "published")
        env = dict(os.environ, SCALE_PUBLISHED=str(published_file(folder / "published")))
        found: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                                 f"{platform.python_version()}", "load": os.getloadavg()[0],
                                 "reads": "whole (SHUFFLEPOINT_RANGED_READS=0)"
                                 if os.environ.get("SHUFFLEPOINT_RANGED_READS") == "0" else "by range"}
        paths = states(folder, env)
        found["rows"] = int(paths["rows"])
        found["ranks"] = []
        for start, state in (("fresh", ""), ("resumed 50%", paths["resumed"]), ("after 16,384 -> 12,288 -> 16,384",
                                                                                 paths["resized"])):
            for rank in SAMPLED:
                row = run_child(rank, WORLD, state, str(folder / f"cache-{start[:5]}-{rank}"), env)
                found["ranks"].append({"start": start, **row})
                print(json.dumps(found["ranks"][-1]), flush=True)
        node_rows = [run_child(rank, WORLD, paths["resumed"], str(folder / "cache-node0"), env) for rank in range(NODE)]
        found["node"] = {"bytes": sum(r["bytes_before_first_batch"] for r in node_rows),
                         "index_bytes": sum(r["index_bytes"] for r in node_rows),
                         "data_bytes": sum(r["data_bytes"] for r in node_rows)}
        found["which"] = {}
        for name, state in (("resumed 50%", paths["resumed"]), ("after 16,384 -> 12,288 -> 16,384", paths["resized"])):
            out = subprocess.run([sys.executable, __file__, "--which-child", state, str(folder / "cache-which")],
                                 capture_output=True, text=True, env=env, timeout=600, check=True)
            found["which"][name] = json.loads(out.stdout.strip().splitlines()[-1])
        found["many_resizes"] = many_resizes(args.resizes)
        if args.gloo:
            found["gloo"] = gloo(args.gloo, folder, env)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(found, indent=1))
    text = report(found)
    (RESULTS / "scale.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

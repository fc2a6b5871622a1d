"""`make bench-shards`: shufflepoint's sharded loader beside Streaming, LitData (two layouts) and HF streaming.

    .venv/bin/python benchmarks/shards/run.py [--quick] [--repeats 3]

Builds (once, cached under .bench-cache/shards/) the corpus and each peer's copy of it, then runs
every measurement as a fresh child process in the loader's own venv (one JSON record each):
throughput (workers 0 and 4, local disk and the S3 server), resume at 10% and 90% (local disk),
an I/O run on the S3 server (rank 0 of 2: bytes the proxy served), and a whole-epoch count check
on the small corpus. Writes benchmarks/results/shards.json (with the load average at the start and end,
and each adapter's settings), then shards.md and the charts (report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import _s3  # noqa: E402
import corpus  # noqa: E402
import report  # noqa: E402

# loader -> its venv, its adapter, the folder of its copy of each workload
LOADERS = {
    "shufflepoint": {"venv": ".venv", "script": "peer_shufflepoint.py", "tokens": "tokens", "text": "text"},
    "streaming": {"venv": ".venv-bench-streaming", "script": "peer_streaming.py", "tokens": "mds"},
    "litdata": {"venv": ".venv-bench-litdata", "script": "peer_litdata.py", "tokens": "litdata"},
    "litdata-tokens": {"venv": ".venv-bench-litdata", "script": "peer_litdata_tokens.py", "tokens": "litdata-tokens"},
    "hf": {"venv": ".venv-bench-hf", "script": "peer_hf.py", "tokens": "hf-tokens", "text": "text"},
}
CONVERTED = {"mds": "streaming", "litdata": "litdata", "litdata-tokens": "litdata-tokens"}
WORLD = 2


SKIPPED: dict[str, str] = {}  # loader -> why this run left it out (its venv is absent)


def python_of(loader: str) -> str:
    """The loader's python: its venv's; shufflepoint's is the one running this script when this
    checkout has no .venv of its own (a git worktree)."""
    found = ROOT / LOADERS[loader]["venv"] / "bin" / "python"
    return str(found) if loader != "shufflepoint" or found.exists() else sys.executable


def skip_absent_peers() -> None:
    """Leave out (and say so) every peer whose venv is absent: ``make bench-shards`` builds them; a run
    without them still measures the rest instead of stopping at the first missing interpreter."""
    for loader in list(LOADERS):
        if loader != "shufflepoint" and not Path(python_of(loader)).exists():
            SKIPPED[loader] = f"no {LOADERS[loader]['venv']}/bin/python (make bench-shards builds it)"
            print(f"skipping {loader}: {SKIPPED[loader]}", flush=True)
            del LOADERS[loader]


def environment(loader: str) -> dict[str, str]:
    """The child's environment: shufflepoint's runs import this checkout's src/, whatever .venv has installed."""
    if loader != "shufflepoint":
        return dict(os.environ)
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def child(loader: str, mode: str, *options: str, timeout: float = 900) -> dict:
    """One measurement in a fresh process; its last JSON line, or the error it ended with."""
    cache = tempfile.mkdtemp(prefix=f"{loader}-", dir=CACHE_ROOT / "run-cache")
    command = [python_of(loader), LOADERS[loader]["script"], mode, *options, "--cache", cache]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=timeout,
                              env=environment(loader))
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode == 0 and lines:
            return json.loads(lines[-1])
        errors = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        raised = [line for line in errors if line[:1].isalpha() and ("Error" in line or "Exception" in line)]
        return {"error": (raised or errors)[-1][:300]}  # the exception's line, not the traceback's last code line
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        print(f"  {loader} {mode} {' '.join(options[-6:])}: {time.perf_counter() - start:.1f} s", flush=True)


def prepare(root: Path, quick: bool) -> dict:
    """The corpora and each peer's converted copy, made once."""
    built = corpus.build_all(root, quick)
    for folder, loader in CONVERTED.items():
        if loader in LOADERS and not (root / folder).exists():
            print(f"converting the token shards for {loader} (once) ...", flush=True)
            subprocess.run([python_of(loader), LOADERS[loader]["script"], "convert", "--source", str(root / "tokens"),
                            "--data", str(root / folder)], cwd=HERE, check=True)
    return built


def base_options(spec: dict, workload: str, data: str, args: argparse.Namespace) -> list[str]:
    samples = spec["shards"] * spec["rows"] if workload == "tokens" else spec["text_shards"] * spec["text_rows"]
    return ["--data", data, "--workload", workload, "--samples", str(samples), "--seq-len", str(spec["seq_len"]),
            "--batch", str(args.batch), "--block", str(args.block), "--cache-bytes", str(args.cache_bytes)]


def run_local(records: list, spec: dict, root: Path, args: argparse.Namespace, save: Callable[[], None]) -> None:
    for loader, entry in LOADERS.items():
        print(f"{loader}: local disk", flush=True)
        for workload in ("tokens", "text"):
            if workload not in entry:
                continue
            options = base_options(spec, workload, str(root / entry[workload]), args)
            for repeat in range(args.repeats):
                for workers in (0, 4):
                    result = child(loader, "throughput", *options, "--workers", str(workers),
                                   "--measure", str(args.measure), "--min-seconds", str(args.min_seconds))
                    records.append({"loader": loader, "kind": "throughput", "storage": "local", "workload": workload,
                                    "workers": workers, "repeat": repeat, **result})
                if workload != "tokens":
                    continue
                for fraction in (0.1, 0.9):
                    result = child(loader, "resume", *options, "--world", str(WORLD), "--fraction", str(fraction))
                    records.append({"loader": loader, "kind": "resume", "storage": "local", "workload": workload,
                                    "fraction": fraction, "repeat": repeat, **result})
        save()


def run_counts(records: list, small: Path, args: argparse.Namespace) -> None:
    """A whole epoch of rank 0 of 2 on the small corpus: how many samples, each once?"""
    spec = corpus.QUICK
    for loader, entry in LOADERS.items():
        options = base_options(spec, "tokens", str(small / entry["tokens"]), args)
        result = child(loader, "epoch", *options, "--world", str(WORLD), "--workers", "0")
        records.append({"loader": loader, "kind": "count", "storage": "local", "workload": "tokens",
                        "expected": spec["shards"] * spec["rows"] // WORLD, **result})


def run_s3(records: list, spec: dict, root: Path, args: argparse.Namespace, save: Callable[[], None]) -> None:
    """Per loader: a fresh S3 server with its copy only; throughput, then the I/O run (rank 0 of 2)."""
    per_rank = spec["shards"] * spec["rows"] // WORLD
    stop_after = per_rank if args.quick else int(per_rank * args.io_fraction)
    for loader, entry in LOADERS.items():
        print(f"{loader}: S3 server", flush=True)
        server = _s3.start()
        try:
            url, corpus_bytes = _s3.upload(server, root / entry["tokens"], entry["tokens"])
            options = [*base_options(spec, "tokens", url, args), "--endpoint", server.endpoint_url]
            for repeat in range(args.repeats):
                for workers in (0, 4):
                    result = child(loader, "throughput", *options, "--workers", str(workers),
                                   "--measure", str(args.measure), "--min-seconds", str(args.min_seconds))
                    records.append({"loader": loader, "kind": "throughput", "storage": "s3", "workload": "tokens",
                                    "workers": workers, "repeat": repeat, **result})
            server.counts.reset()
            result = child(loader, "epoch", *options, "--world", str(WORLD), "--workers", "4",
                           "--stop-after", str(stop_after))
            gets = sum(server.counts.gets().values())
            records.append({"loader": loader, "kind": "io", "storage": "s3", "workload": "tokens",
                            "bytes_read": server.counts.total(), "gets": gets, "corpus_bytes": corpus_bytes,
                            "per_rank": per_rank, "world": WORLD, **result})
        finally:
            server.stop()
        save()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the small corpus (2e5 samples in 100 shards)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--block", type=int, default=65_536, help="shuffle block/buffer of every loader, in samples")
    parser.add_argument("--cache-bytes", type=int, default=256 << 20, help="the cache budget of remote runs")
    parser.add_argument("--measure", type=int, default=60_000, help="samples timed per throughput run, at least")
    parser.add_argument("--min-seconds", type=float, default=None,
                        help="steady window per throughput run, at least (default 10 s, 3 s with --quick)")
    parser.add_argument("--io-fraction", type=float, default=0.1, help="full run: share of the epoch the I/O run reads")
    parser.add_argument("--only", default="", help="comma-separated loaders (default: all)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    global CACHE_ROOT
    CACHE_ROOT = ROOT / ".bench-cache" / "shards"
    (CACHE_ROOT / "run-cache").mkdir(parents=True, exist_ok=True)
    (ROOT / ".bench-cache" / ".gitignore").write_text("*\n")
    for name in [n for n in LOADERS if args.only and n not in args.only.split(",")]:
        del LOADERS[name]
    skip_absent_peers()
    started = time.perf_counter()
    load_start = os.getloadavg()
    small = CACHE_ROOT / "quick"
    prepare(small, quick=True)
    if args.min_seconds is None:
        args.min_seconds = 3.0 if args.quick else 10.0
    root = small if args.quick else CACHE_ROOT / "full"
    spec = prepare(root, args.quick)["spec"]
    records: list = []
    found_versions = versions()
    out, name = Path(args.out), "shards_quick" if args.quick else "shards"
    out.mkdir(parents=True, exist_ok=True)

    def save(done: bool = False) -> None:
        """The records so far (``partial`` until the end), so that a run cut short still leaves its figures."""
        local_bytes = {folder: corpus.folder_bytes(root / folder)
                       for folder in ("tokens", "mds", "litdata", "litdata-tokens", "hf-tokens", "text")}
        result = {"args": vars(args), "spec": spec, "local_bytes": local_bytes, "records": records,
                  "seconds": time.perf_counter() - started, "versions": found_versions, "partial": not done,
                  "skipped": SKIPPED,
                  "loadavg": {"start": list(load_start), "end": list(os.getloadavg()), "cpus": os.cpu_count()}}
        (out / f"{name}.json").write_text(json.dumps(result, indent=1))
        report.write(result, out, name)

    run_counts(records, small, args)
    run_local(records, spec, root, args, save)
    run_s3(records, spec, root, args, save)
    save(done=True)
    print(f"wrote {out / name}.json and .md in {time.perf_counter() - started:.0f} s")


def versions() -> dict:
    probes = {"shufflepoint": "import shufflepoint, torch; print(shufflepoint.__version__, torch.__version__)",
              "streaming": "import importlib.metadata as m; print(m.version('mosaicml-streaming'), m.version('torch'))",
              "litdata": "import importlib.metadata as m; print(m.version('litdata'), m.version('torch'))",
              "litdata-tokens": "import importlib.metadata as m; print(m.version('litdata'), m.version('torch'))",
              "hf": "import importlib.metadata as m; print(m.version('datasets'), m.version('torch'))"}
    found = {}
    for loader in LOADERS:
        done = subprocess.run([python_of(loader), "-c", probes[loader]], capture_output=True, text=True,
                              env=environment(loader))
        found[loader] = done.stdout.strip() or done.stderr.strip()[-200:]
    return found


CACHE_ROOT = Path()

if __name__ == "__main__":
    main()

"""`make bench-ranged`: shufflepoint over the S3 server with ranged reads on and off, side by side.

    .venv/bin/python benchmarks/shards/ranged.py [--repeats 2] [--measure 30000]

The pieces of ``make bench-shards`` that read remote shards (``run.py``'s S3 runs), on its small
corpus (100 token shards of 2,000 windows, 100 Parquet shards of 200 ~1 KiB rows), and a third
workload the size of real token shards (``tokens-large``: 8 shards of 16 MiB, windows of 1,024 tokens)
over a link shaped like an object store's (each GET's first byte after 30 ms, 100 MB/s per connection:
``S3Server.shape``), each in a fresh process with a fresh cache: the first batch's time, the steady rate
(workers 0 and 4), and the GET bytes and requests of a run of rank 0 of 2 over its whole share, with
``SHUFFLEPOINT_RANGED_READS`` =0 (every remote shard downloaded whole, prefetched ahead) and =1 (Parquet
and ``.bin`` shards read by byte range, their upcoming ranges read ahead: ``_shards/storage/ranged_ahead``).
Alternating off/on per repeat, so the load drifts over both alike. Writes ``results/ranged.md`` and
``.json``. Unset, the default reads by range the formats this measured at >= 0.9x whole shards' steady
rate (``ranged.DEFAULT_FORMATS``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import _s3
import corpus
import run

MODES = {"whole shards (off)": "0", "ranged (on)": "1"}
LARGE = {"shards": 8, "rows": 8_192, "seq_len": 1_024}  # 16 MiB shards of uint16 ids
SHAPED = {"latency_s": 0.03, "bytes_per_s": 100e6}  # tokens-large's link: an object store's round trip and rate
WORKLOADS = ("tokens", "tokens-large", "text")


def workload_spec(spec: dict, workload: str) -> tuple[dict, str]:
    """The spec ``run.base_options`` reads for ``workload``, and the adapter's workload name."""
    if workload == "tokens-large":
        return {**spec, **LARGE}, "tokens"
    return spec, workload


def build_large(root: Path) -> Path:
    def build(tmp: Path) -> None:
        for shard in range(LARGE["shards"]):
            corpus.shard_tokens(shard, LARGE["rows"], LARGE["seq_len"]).tofile(tmp / f"part-{shard:05d}.bin")
    return corpus._publish(build, root / "tokens-large")


def measure(server: _s3.s3_server.S3Server, server_url: dict[str, str], spec: dict,
            args: argparse.Namespace) -> list[dict]:
    records = []
    for repeat in range(args.repeats):
        for workload, url in server_url.items():
            shaped, kind = workload_spec(spec, workload)
            server.shape(**(SHAPED if workload == "tokens-large" else {}))
            options = [*run.base_options(shaped, kind, url, args), "--endpoint", args.endpoint]
            samples = shaped["shards"] * shaped["rows"] if kind == "tokens" else spec["text_shards"] * spec["text_rows"]
            for mode, value in MODES.items():
                os.environ["SHUFFLEPOINT_RANGED_READS"] = value
                for workers in (0, 4):
                    found = run.child("shufflepoint", "throughput", *options, "--workers", str(workers),
                                      "--measure", str(min(args.measure, samples // 4)), "--min-seconds", "2",
                                      "--warmup-batches", "8")
                    records.append({"kind": "throughput", "workload": workload, "mode": mode, "workers": workers,
                                    "repeat": repeat, **found})
                server.counts.reset()
                found = run.child("shufflepoint", "epoch", *options, "--world", "2", "--workers", "4")
                records.append({"kind": "io", "workload": workload, "mode": mode, "repeat": repeat,
                                "bytes_read": server.counts.total(), "gets": sum(server.counts.gets().values()),
                                "share_bytes": args.sizes[workload] / 2, **found})
    return records


def table(records: list[dict]) -> list[str]:
    def median(kind: str, workload: str, mode: str, key: str, **match: object) -> float:
        found = [r[key] for r in records if r["kind"] == kind and r["workload"] == workload and r["mode"] == mode
                 and key in r and all(r.get(k) == v for k, v in match.items())]
        return statistics.median(found) if found else float("nan")

    off, on = MODES
    lines = ["| workload | measure | whole shards (off) | ranged (on) | on / off |", "|---|---|---|---|---|"]
    for workload in dict.fromkeys(r["workload"] for r in records):
        rows = [(f"steady samples/s, {w} workers", "throughput", "samples_per_s", {"workers": w}) for w in (0, 4)]
        rows += [(f"first batch s, {w} workers", "throughput", "first_batch_s", {"workers": w}) for w in (0, 4)]
        rows += [("GET bytes / share, rank 0 of 2, its whole share", "io", "ratio", {}),
                 ("GET requests, same run", "io", "gets", {}), ("seconds, same run", "io", "seconds", {})]
        for name, kind, key, match in rows:
            a, b = median(kind, workload, off, key, **match), median(kind, workload, on, key, **match)
            lines.append(f"| {workload} | {name} | {a:,.3g} | {b:,.3g} | {b / a if a else float('nan'):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--measure", type=int, default=30_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--block", type=int, default=65_536)
    parser.add_argument("--cache-bytes", type=int, default=256 << 20)
    parser.add_argument("--only", choices=WORKLOADS, action="append", help="these workloads (default: all)")
    parser.add_argument("--out", default=str(run.ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    run.CACHE_ROOT = run.ROOT / ".bench-cache" / "shards"
    (run.CACHE_ROOT / "run-cache").mkdir(parents=True, exist_ok=True)
    (run.ROOT / ".bench-cache" / ".gitignore").write_text("*\n")
    root = run.CACHE_ROOT / "quick"
    spec = corpus.build_all(root, True)["spec"]
    build_large(root)
    load_start, started = os.getloadavg(), time.perf_counter()
    server = _s3.start()
    try:
        urls, args.sizes = {}, {}
        for workload in args.only or WORKLOADS:
            urls[workload], args.sizes[workload] = _s3.upload(server, root / workload, workload)
        args.endpoint = server.endpoint_url
        records = measure(server, urls, spec, args)
    finally:
        server.stop()
        os.environ.pop("SHUFFLEPOINT_RANGED_READS", None)
    for record in records:
        if record["kind"] == "io" and "read" in record:
            record["ratio"] = record["bytes_read"] / record["share_bytes"]
    load = {"start": list(load_start), "end": list(os.getloadavg()), "cpus": os.cpu_count()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"args": {k: v for k, v in vars(args).items()}, "spec": spec, "records": records, "load": load,
              "seconds": time.perf_counter() - started}
    (out / "ranged.json").write_text(json.dumps(result, indent=1, default=str))
    text = ["# make bench-ranged: ranged reads on and off, side by side", "",
            f"shufflepoint over the S3 server (moto behind a counting proxy), `make bench-shards`' small corpus: "
            f"{spec['shards']} token shards of {spec['rows']:,} windows, {spec['text_shards']} Parquet shards of "
            f"{spec['text_rows']} rows; tokens-large: {LARGE['shards']} token shards of {LARGE['rows']:,} windows of "
            f"{LARGE['seq_len']:,} tokens (16 MiB) over a link shaped like an object store's (a GET's first byte "
            f"after {SHAPED['latency_s'] * 1e3:.0f} ms, {SHAPED['bytes_per_s'] / 1e6:.0f} MB/s per connection); "
            f"batch {args.batch}, shuffle_block {args.block}, a fresh cache per run; "
            f"medians of {args.repeats} repeats. Load average {load['start'][0]:.1f} at the start, "
            f"{load['end'][0]:.1f} at the end ({load['cpus']} CPUs).", "", *table(records), ""]
    (out / "ranged.md").write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()

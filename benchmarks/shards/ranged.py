"""`make bench-ranged`: shufflepoint over the S3 server with ranged reads on and off, side by side.

    .venv/bin/python benchmarks/shards/ranged.py [--repeats 2] [--measure 30000]

The pieces of ``make bench-shards`` that read remote shards (``run.py``'s S3 runs), on its small
corpus (100 token shards of 2,000 windows, 100 Parquet shards of 200 ~1 KiB rows), each in a fresh
process with a fresh cache: the first batch's time, the steady rate (workers 0 and 4), and the GET
bytes and requests of a run of rank 0 of 2 over its whole share, with ``SHUFFLEPOINT_RANGED_READS``
=0 (every remote shard downloaded whole, prefetched ahead) and =1 (Parquet and ``.bin`` shards read
by byte range, their upcoming ranges read ahead: ``_shards/ranged_ahead``). Alternating off/on per
repeat, so the load drifts over both alike. Writes ``results/ranged.md`` and ``.json``. Unset, the
default reads by range the formats this measured at >= 0.9x whole shards' steady rate
(``ranged.DEFAULT_FORMATS``: Parquet).
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


def measure(server: _s3.s3_server.S3Server, server_url: dict[str, str], spec: dict,
            args: argparse.Namespace) -> list[dict]:
    records = []
    for repeat in range(args.repeats):
        for workload, url in server_url.items():
            options = [*run.base_options(spec, workload, url, args), "--endpoint", args.endpoint]
            samples = spec["shards"] * spec["rows"] if workload == "tokens" else spec["text_shards"] * spec["text_rows"]
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
    for workload in ("tokens", "text"):
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
    parser.add_argument("--out", default=str(run.ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    run.CACHE_ROOT = run.ROOT / ".bench-cache" / "shards"
    (run.CACHE_ROOT / "run-cache").mkdir(parents=True, exist_ok=True)
    (run.ROOT / ".bench-cache" / ".gitignore").write_text("*\n")
    root = run.CACHE_ROOT / "quick"
    spec = corpus.build_all(root, True)["spec"]
    load_start, started = os.getloadavg(), time.perf_counter()
    server = _s3.start()
    try:
        urls, args.sizes = {}, {}
        for workload in ("tokens", "text"):
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
            f"{spec['text_rows']} rows; batch {args.batch}, shuffle_block {args.block}, a fresh cache per run; "
            f"medians of {args.repeats} repeats. Load average {load['start'][0]:.1f} at the start, "
            f"{load['end'][0]:.1f} at the end ({load['cpus']} CPUs).", "", *table(records), ""]
    (out / "ranged.md").write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()

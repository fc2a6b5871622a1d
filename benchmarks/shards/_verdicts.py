"""Issue 12's targets for the sharded loader, judged from the measured records (nothing hard-coded)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

PEERS = ("streaming", "litdata", "litdata-tokens", "hf")
RESUME_LIMIT_S = 0.050
RESUME_FACTOR = 100
IO_LIMIT = 1.05


def _median(records: list, field: str, **match: object) -> float | None:
    found = [r[field] for r in records if field in r and all(r.get(k) == v for k, v in match.items())]
    return statistics.median(found) if found else None


def resume_targets(records: list) -> list[tuple[str, str, bool | None]]:
    ours = {f: _median(records, "resume_s", loader="shufflepoint", kind="resume", fraction=f) for f in (0.1, 0.9)}
    if None in ours.values():
        return [("resume ≤ 50 ms at any cursor", "not measured", None)]
    worst = max(ours.values())
    rows = [("resume ≤ 50 ms at any cursor", f"{1000 * ours[0.1]:.1f} ms at 10%, {1000 * ours[0.9]:.1f} ms at 90%",
             worst <= RESUME_LIMIT_S)]
    peers = {p: _median(records, "resume_s", loader=p, kind="resume", fraction=0.9) for p in PEERS}
    peers = {p: v for p, v in peers.items() if v is not None}
    if peers:
        best = min(peers, key=peers.__getitem__)
        factor = peers[best] / ours[0.9]
        rows.append((f"resume ≥ {RESUME_FACTOR}× the best peer at 90%",
                     f"{factor:,.1f}× ({best}: {1000 * peers[best]:,.1f} ms)", factor >= RESUME_FACTOR))
    return rows


def throughput_targets(records: list) -> list[tuple[str, str, bool | None]]:
    parts, oks = [], []
    for storage in ("local", "s3"):
        for workers in (0, 4):
            match = {"kind": "throughput", "storage": storage, "workers": workers, "workload": "tokens"}
            ours = _median(records, "samples_per_s", loader="shufflepoint", **match)
            peers = {p: _median(records, "samples_per_s", loader=p, **match) for p in PEERS}
            peers = {p: v for p, v in peers.items() if v is not None}
            if ours is None or not peers:
                continue
            best = max(peers, key=peers.__getitem__)
            oks.append(ours >= peers[best])
            parts.append(f"{storage} w{workers}: {ours / peers[best]:.2f}× ({best})")
    return [("samples/s ≥ the best peer's (token windows)", "; ".join(parts) or "not measured",
             all(oks) if oks else None)]


def read_path_targets(records: list) -> list[tuple[str, str, bool | None]]:
    """Issue 19's: token windows at >= 1M/s with no workers; Parquet rows at >= 2x HF streaming (local disk)."""
    rows: list[tuple[str, str, bool | None]] = []
    local = {"kind": "throughput", "storage": "local"}
    ours = _median(records, "samples_per_s", loader="shufflepoint", workload="tokens", workers=0, **local)
    if ours is not None:
        rows.append(("token windows ≥ 1M samples/s, local, workers 0", f"{ours:,.0f}/s", ours >= 1e6))
    for workers in (0, 4):
        mine = _median(records, "samples_per_s", loader="shufflepoint", workload="text", workers=workers, **local)
        hf = _median(records, "samples_per_s", loader="hf", workload="text", workers=workers, **local)
        if mine is not None and hf is not None:
            rows.append((f"Parquet rows ≥ 2× HF streaming, local, workers {workers}", f"{mine / hf:.2f}×",
                         mine >= 2 * hf))
    return rows


def io_target(amplification: dict) -> list[tuple[str, str, bool | None]]:
    if "shufflepoint" not in amplification:
        return [("I/O amplification ≤ 1.05", "not measured", None)]
    value = amplification["shufflepoint"]
    peers = ", ".join(f"{p} {v:.2f}" for p, v in amplification.items() if p != "shufflepoint")
    return [("I/O amplification ≤ 1.05 (rank 0 of 2, its own node)", f"{value:.2f} (peers: {peers or '—'})",
             value <= IO_LIMIT)]


def shuffle_target(path: Path) -> list[tuple[str, str, bool | None]]:
    name = "shuffle quality ≥ Streaming py1e at an equal cache budget (`make bench-shuffle`)"
    if not path.exists():
        return [(name, "not run: run `make bench-shuffle` first", None)]
    found = json.loads(path.read_text())["results"]
    ours = found.get("shufflepoint blocks")
    py1e = {k: v for k, v in found.items() if k.startswith("Streaming py1e")}
    if ours is None or not py1e:
        return [(name, "not in shuffle_quality.json", None)]
    parts, oks = [], []
    for key, theirs in py1e.items():
        ok = ours["distinct_median"] >= theirs["distinct_median"] and ours["live_shards"] <= theirs["live_shards"]
        oks.append(ok)
        parts.append(f"{ours['distinct_median']:.0f} vs {theirs['distinct_median']:.0f} distinct shards per global "
                     f"batch with {ours['live_shards']} vs {theirs['live_shards']} live shards ({key})")
    return [(name, "; ".join(parts), all(oks))]


def judge(records: list, amplification: dict, shuffle_json: Path) -> list[tuple[str, str, bool | None]]:
    return [*resume_targets(records), *throughput_targets(records), *read_path_targets(records),
            *io_target(amplification),
            *shuffle_target(shuffle_json)]

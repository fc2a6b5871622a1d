"""shards.md (tables, targets with verdicts computed from the records) and the charts, from shards.json."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

NAMES = {"shufflepoint": "**shufflepoint** (`DataLoader(Shards)`)", "streaming": "Streaming 0.13.0 (MDS, py1e)",
         "litdata": "LitData (optimized chunks, an item per window)",
         "litdata-tokens": "LitData (`TokensLoader` chunks)", "hf": "HF `datasets` streaming (Parquet, buffer)"}
RESUME_NOTES = {"shufflepoint": "exact (checked against the uninterrupted run)",
                "streaming": "exact by design (not checked here)", "litdata": "exact by design (not checked here)",
                "litdata-tokens": "exact by design (not checked here)",
                "hf": "**not exact**: the shuffle buffer is not saved; time includes refilling it"}
PEERS = ("streaming", "litdata", "litdata-tokens", "hf")
CHOICES = ("dataset", "item loader / layout", "shuffle", "batch, workers", "cache", "decode path")
SHUFFLE_JSON = Path(__file__).resolve().parents[1] / "results" / "shuffle_quality.json"


def values(records: list, field: str, **match: object) -> list[float]:
    return [r[field] for r in records if field in r and all(r.get(k) == v for k, v in match.items())]


def errors(records: list, **match: object) -> list[str]:
    return sorted({r["error"] for r in records if "error" in r and all(r.get(k) == v for k, v in match.items())})


def cell(found: list[float], scale: float = 1.0, fmt: str = "{:,.0f}", failed: list[str] = ()) -> str:
    if not found:
        return f"not run: {failed[0]}" if failed else "—"
    med, low, high = (statistics.median(found) * scale, min(found) * scale, max(found) * scale)
    text = fmt.format(med)
    return text if len(found) == 1 else f"{text} ({fmt.format(low)}–{fmt.format(high)})"


def med(found: list[float]) -> float | None:
    return statistics.median(found) if found else None


def throughput_table(records: list, loaders: list[str], workload: str) -> list[str]:
    lines = ["| loader | local, workers 0 | local, workers 4 | S3, workers 0 | S3, workers 4 |",
             "|---|---|---|---|---|"]
    for loader in loaders:
        cells = []
        for storage in ("local", "s3"):
            for workers in (0, 4):
                match = {"loader": loader, "kind": "throughput", "storage": storage, "workers": workers,
                         "workload": workload}
                cells.append(cell(values(records, "samples_per_s", **match), failed=errors(records, **match)))
        if any(c != "—" for c in cells):
            lines.append(f"| {NAMES[loader]} | " + " | ".join(cells) + " |")
    return lines


def startup_table(records: list, loaders: list[str], workload: str) -> list[str]:
    """First batch and warm-up (the batches after it, timed apart from the steady rate), local disk."""
    lines = ["| loader | first batch, w0 | warm-up, w0 | first batch, w4 | warm-up, w4 |", "|---|---|---|---|---|"]
    for loader in loaders:
        cells = []
        for workers in (0, 4):
            match = {"loader": loader, "kind": "throughput", "storage": "local", "workers": workers,
                     "workload": workload}
            cells += [cell(values(records, key, **match), 1, "{:,.2f} s") for key in ("first_batch_s", "warmup_s")]
        if any(c != "—" for c in cells):
            lines.append(f"| {NAMES[loader]} | " + " | ".join(cells) + " |")
    return lines


def ratio_table(records: list, loaders: list[str], workload: str) -> list[str]:
    """shufflepoint's median steady rate over each peer's, per storage and worker count (one run)."""
    lines = ["| shufflepoint ÷ | local, workers 0 | local, workers 4 | S3, workers 0 | S3, workers 4 |",
             "|---|---|---|---|---|"]
    for loader in [n for n in loaders if n in PEERS]:
        cells = []
        for storage in ("local", "s3"):
            for workers in (0, 4):
                match = {"kind": "throughput", "storage": storage, "workers": workers, "workload": workload}
                ours = med(values(records, "samples_per_s", loader="shufflepoint", **match))
                theirs = med(values(records, "samples_per_s", loader=loader, **match))
                cells.append(f"{ours / theirs:.2f}×" if ours and theirs else "—")
        if any(c != "—" for c in cells):
            lines.append(f"| {NAMES[loader]} | " + " | ".join(cells) + " |")
    return lines


def choices_table(records: list, loaders: list[str]) -> list[str]:
    """Each adapter's settings, as its child process reported them (the same for every run of a loader)."""
    lines = ["| loader | " + " | ".join(CHOICES) + " |", "|---" * (len(CHOICES) + 1) + "|"]
    for loader in loaders:
        found = next((r["choices"] for r in records if r["loader"] == loader and "choices" in r), None)
        if found:
            lines.append(f"| {NAMES[loader]} | " + " | ".join(found.get(k, "—") for k in CHOICES) + " |")
    return lines


def load_line(result: dict) -> str:
    """The machine's load (1-minute average) at the start and end of the run and over its throughput runs."""
    load = result.get("loadavg")
    if not load:
        return "Load average: not recorded."
    during = [x for r in result["records"] if r.get("kind") == "throughput" for x in r.get("loadavg", [])]
    span = f"; {min(during):.1f}–{max(during):.1f} at the start/end of the throughput runs" if during else ""
    return (f"Load average (1, 5, 15 min) on {load.get('cpus', '?')} CPUs: start "
            f"{', '.join(f'{x:.2f}' for x in load['start'])}, end {', '.join(f'{x:.2f}' for x in load['end'])}{span}.")


def resume_table(records: list, loaders: list[str]) -> list[str]:
    lines = ["| loader | resume at 10% | resume at 90% | dataset + loader built before it | resume |",
             "|---|---|---|---|---|"]
    for loader in loaders:
        row = [cell(values(records, "resume_s", loader=loader, kind="resume", fraction=f), 1000, "{:,.1f} ms",
                    errors(records, loader=loader, kind="resume", fraction=f)) for f in (0.1, 0.9)]
        row.append(cell(values(records, "construct_s", loader=loader, kind="resume"), 1000, "{:,.0f} ms"))
        exact = values(records, "exact", loader=loader, kind="resume")
        note = RESUME_NOTES[loader] + (f"; {sum(exact)}/{len(exact)} resumed first batches equal" if exact else "")
        lines.append(f"| {NAMES[loader]} | " + " | ".join(row) + f" | {note} |")
    return lines


def io_rows(records: list, loaders: list[str]) -> tuple[list[str], dict]:
    lines = ["| loader | samples read (rank 0 of 2) | bytes read | I/O amplification | peak cache | "
             "peak RSS, rank + workers | GETs |", "|---|---|---|---|---|---|---|"]
    amplification = {}
    for loader in loaders:
        found = [r for r in records if r["loader"] == loader and r["kind"] == "io"]
        if not found or "error" in found[0]:
            lines.append(f"| {NAMES[loader]} | not run: {found[0]['error'] if found else 'no record'} |||||| ")
            continue
        r = found[0]
        share = r["read"] / r["per_rank"]
        amplification[loader] = r["bytes_read"] / (r["corpus_bytes"] / r["world"] * share)
        lines.append(f"| {NAMES[loader]} | {r['read']:,} ({100 * share:.0f}% of its epoch) | "
                     f"{r['bytes_read'] / 2**20:,.1f} MiB of {r['corpus_bytes'] / 2**20:,.0f} MiB | "
                     f"{amplification[loader]:.2f} | {r['peak_cache_bytes'] / 2**20:,.1f} MiB | "
                     f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB | {r['gets']:,} |")
    return lines, amplification


def count_rows(records: list, loaders: list[str]) -> list[str]:
    lines = ["| loader | expected (rank 0 of 2) | read | distinct | read twice | samples/s (workers 0) |",
             "|---|---|---|---|---|---|"]
    for loader in loaders:
        found = [r for r in records if r["loader"] == loader and r["kind"] == "count"]
        if found and "error" not in found[0]:
            r = found[0]
            lines.append(f"| {NAMES[loader]} | {r['expected']:,} | {r['read']:,} | {r['distinct']:,} | "
                         f"{r['repeated']:,} | {r['samples_per_s']:,.0f} |")
        else:
            lines.append(f"| {NAMES[loader]} | not run: {found[0]['error'] if found else 'no record'} |||||")
    return lines


def verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**MISSED**")


def targets(records: list, amplification: dict) -> list[str]:
    from _verdicts import judge

    lines = ["| target | measured | |", "|---|---|---|"]
    for name, measured, ok in judge(records, amplification, SHUFFLE_JSON):
        lines.append(f"| {name} | {measured} | {verdict(ok)} |")
    return lines


def write(result: dict, out: Path, name: str) -> None:
    records, spec = result["records"], result["spec"]
    loaders = [n for n in NAMES if any(r["loader"] == n for r in records)]
    io_lines, amplification = io_rows(records, loaders)
    samples = spec["shards"] * spec["rows"]
    text_rows = spec["text_shards"] * spec["text_rows"]
    args = result["args"]
    lines = [f"# Sharded loading side by side (`make bench-shards{' QUICK=1' if name.endswith('quick') else ''}`)",
             "", f"Corpus: {samples:,} token windows (seq_len {spec['seq_len']}, uint16) in {spec['shards']:,} shards; "
             f"{text_rows:,} Parquet rows of ~1 KiB in {spec['text_shards']:,} shards. Batch {args['batch']}, "
             f"shuffle block/buffer {result['args']['block']:,} samples for every loader, cache budget "
             f"{result['args']['cache_bytes'] / 2**20:,.0f} MiB for remote runs. Median (min–max) of "
             f"{result['args']['repeats']} fresh processes. Run took {result['seconds'] / 60:.1f} min"
             + (" **so far: the run did not finish; the tables hold what it measured**." if result.get("partial")
                else "."),
             "", "Versions: " + "; ".join(f"{k}: {v}" for k, v in result["versions"].items()), "",
             *([("**Left out of this run** (no venv): " + "; ".join(f"{k}: {v}" for k, v in result["skipped"].items())
                 + "."), ""] if result.get("skipped") else []),
             load_line(result), "",
             "## Targets", "", *targets(records, amplification), "",
             "## Samples/s, token windows (rank 0 of 1)", "",
             "Steady state: timed after the first batch and a warm-up of up to 200 batches, over at least "
             f"{result['args']['measure']:,} samples and {result['args'].get('min_seconds') or 10:g} s. On 2 vCPUs, "
             "4 workers mostly measure oversubscription.", "", *throughput_table(records, loaders, "tokens"), "",
             "Ratios (medians of this run):", "", *ratio_table(records, loaders, "tokens"), "",
             "## First batch and warm-up, token windows (local disk)", "", *startup_table(records, loaders, "tokens"),
             "",
             "## Samples/s, Parquet rows of ~1 KiB (rank 0 of 1)", "", *throughput_table(records, loaders, "text"), "",
             *ratio_table(records, loaders, "text"), "",
             "## What each adapter was configured with", "",
             "Every setting not named is the library's default. The same corpus, batch, seed and shuffle "
             "block/buffer for all; workers W = 0 and 4.", "", *choices_table(records, loaders), "",
             "## Resume in a fresh process (local disk, rank 0 of 2, workers 0): load_state_dict + first batch", "",
             *resume_table(records, loaders), "",
             "## I/O, cache and memory on the S3 server (rank 0 of 2, workers 4)", "",
             "I/O amplification = bytes the S3 proxy served to this rank ÷ (the loader's corpus bytes ÷ 2 × the share "
             "of the epoch read).", "", *io_lines, "",
             "## Every sample once? A whole epoch of rank 0 of 2 on the small corpus (200,000 samples, local)", "",
             *count_rows(records, loaders), ""]
    (out / f"{name}.md").write_text("\n".join(lines))
    try:
        from _shard_charts import charts
    except ImportError:
        return
    charts(records, loaders, out, name)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    path = Path(sys.argv[1])
    write(json.loads(path.read_text()), path.parent, path.stem)

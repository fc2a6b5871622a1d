"""Turn ``results/raw.jsonl`` into ``results/results.md`` and the charts. Measures nothing itself.

Usage: ``python benchmarks/report.py [raw.jsonl] [out_dir]``. Every figure is a median with its
min–max over the repeats; comparisons are ratios of medians.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _charts import charts  # noqa: E402
from _report_format import (  # noqa: E402
    LABELS,
    OURS,
    PEERS,
    SHORT,
    TARGET_ITER_RATIO,
    TARGET_MEMORY_B,
    TARGET_OVERHEAD_S,
    TARGET_RESUME_S,
    TARGET_STATE_B,
    fmt_bytes,
    fmt_n,
    fmt_ratio,
    fmt_seconds,
    fmt_stat,
    load,
    stats,
    verdict,
)
from _report_indexgen import indexgen_section  # noqa: E402


class Report:
    def __init__(self, sections: dict[str, list[dict]]) -> None:
        self.s = sections
        self.resume: dict[tuple[str, int, float], list[float]] = defaultdict(list)
        self.exact: dict[tuple[str, int], set] = defaultdict(set)
        self.synth: dict[tuple[str, int], bool] = {}
        for r in sections["resume"]:
            self.resume[r["impl"], r["n"], r["frac"]].append(r["seconds"])
            self.exact[r["impl"], r["n"]].add(r["exact"])
            self.synth[r["impl"], r["n"]] = self.synth.get((r["impl"], r["n"]), False) or r["synth"]
        self.memory = {(r["impl"], r["n"]): r for r in sections["memory"]}
        self.lines: list[str] = []
        self.targets: list[tuple[str, str, bool | str]] = []

    def w(self, line: str = "") -> None:
        self.lines.append(line)

    def median(self, key: str, n: int, frac: float) -> float | None:
        values = self.resume.get((key, n, frac))
        return statistics.median(values) if values else None

    # -- sections ----------------------------------------------------------------------------
    def header(self) -> None:
        m = self.s["machine"][0]
        run = self.s.get("run", [{}])[-1]
        self.w("# shufflepoint benchmarks")
        self.w()
        self.w("Written by `make bench` (`benchmarks/run.py`, then `benchmarks/report.py`); do not edit by hand.")
        self.w()
        self.w(f"- **Machine:** {m['logical_cpus']} logical CPUs ({m['cpu_model']}), {m['mem_gib']} GiB RAM, "
               f"no GPU; {m['platform']}. Shared with other jobs, so timings are noisy: every figure is a "
               "median with its min–max, and comparisons are ratios.")
        self.w(f"- **Software:** Python {m['python']}, torch {m['torch']} ({m['torch_threads']} intra-op threads), "
               f"numpy {m['numpy']}, torchdata {m['torchdata']}, accelerate {m['accelerate']}, "
               f"shufflepoint {m['shufflepoint']} (commit {m['commit']}).")
        seconds = run.get("seconds")
        took = f" The whole run took {seconds / 60:.1f} min" if seconds else ""
        quick = " (**--quick smoke run: small sizes, few repeats**)" if run.get("quick") else ""
        self.w(f"- **Reproduce:** `make bench` (= `.venv/bin/python benchmarks/run.py`).{took}{quick}; "
               f"run on {m['date']}.")
        self.w("- **Workload:** a map-style dataset whose item i is the int i (no data cost), batch size 32, "
               "shuffled, every loader built right after `torch.manual_seed(1234)`. \"Rank 0 of 2\" loaders are "
               "built with an explicit rank and world size and no process group (Accelerate: "
               "`prepare_data_loader(num_processes=2, process_index=0, use_stateful_dataloader=True)`).")
        self.w()

    def resume_section(self) -> None:
        ns = sorted({n for (_, n, _) in self.resume})
        self.w("## 1. Resume latency")
        self.w()
        self.w("Time of `load_state_dict(state)` + `iter()` + `next()` on a freshly built loader in a fresh process "
               "(building the loader, ≤ 2 ms, is not timed; the state first makes a round trip through JSON for "
               "shufflepoint, pickle for the peers). Cursor = fraction of this rank's batches of epoch 0 already "
               "received. At 0% the loader has no state to load: that is the cost of starting an epoch, which "
               "the plain DistributedSampler loader (no `state_dict`) also pays. \"exact\": the batch equals the "
               "true next batch, computed in closed form.")
        self.w()
        self.w("| loader | n | state | 0% | 50% | 90% | reps | exact |")
        self.w("|---|---|---|---|---|---|---|---|")
        order = ("shufflepoint", "sp_sampler", "torchdata", "accelerate", "torch_ds")
        for key in order:
            for n in ns:
                cells = []
                reps = 0
                for frac in (0.0, 0.5, 0.9):
                    values = self.resume.get((key, n, frac))
                    cells.append(fmt_stat(values) if values else "—")
                    reps = max(reps, len(values or []))
                if reps == 0:
                    continue
                exact = self.exact[key, n] - {None}
                exact_text = "—" if not exact else ("yes" if exact == {True} else "**NO**")
                state = "—" if key == "torch_ds" else ("synthetic" if self.synth[key, n] else "real")
                self.w(f"| {SHORT[key]} | {fmt_n(n)} | {state} | {' | '.join(cells)} | {reps} | {exact_text} |")
        self.w()
        self.w("**Best peer ÷ shufflepoint.DataLoader** (ratio of medians; best peer = the faster of torchdata "
               "and Accelerate at that point):")
        self.w()
        self.w("| n | 0% | 50% | 90% |")
        self.w("|---|---|---|---|")
        for n in ns:
            cells = []
            for frac in (0.0, 0.5, 0.9):
                ours = self.median(OURS, n, frac)
                peers = [m for key in PEERS if (m := self.median(key, n, frac)) is not None]
                if ours is None or not peers:
                    cells.append("—")
                    continue
                best = min(peers)
                cells.append(f"{fmt_ratio(best / ours)} ({fmt_seconds(best)} vs {fmt_seconds(ours)})")
            if any(c != "—" for c in cells):
                self.w(f"| {fmt_n(n)} | {' | '.join(cells)} |")
        self.w()
        self._resume_targets()

    def _resume_targets(self) -> None:
        for n in (10**8, 10**9):
            medians = [self.median(OURS, n, f) for f in (0.0, 0.5, 0.9)]
            if None in medians:
                continue
            worst = max(medians)
            highs = max(max(self.resume[OURS, n, f]) for f in (0.0, 0.5, 0.9))
            self.targets.append((f"resume ≤ 5 ms at n = {fmt_n(n)}, any cursor",
                                 f"median ≤ {fmt_seconds(worst)} at 0/50/90% (slowest single run "
                                 f"{fmt_seconds(highs)})", worst <= TARGET_RESUME_S))
            flat = max(medians) / min(medians)
            self.targets.append((f"flat in the cursor at n = {fmt_n(n)}",
                                 f"slowest ÷ fastest cursor median = {flat:.2f} (≤ 1.5 counts as flat)", flat <= 1.5))
        n = 10**8
        ratios = []
        for frac in (0.0, 0.5, 0.9):
            ours = self.median(OURS, n, frac)
            peers = [m for key in PEERS if (m := self.median(key, n, frac)) is not None]
            if ours is not None and peers:
                ratios.append(min(peers) / ours)
        if ratios:
            self.targets.append(("≥ 1000× faster than the best peer at n = 1e8",
                                 f"{fmt_ratio(min(ratios))} at worst (cursors 0/50/90%: "
                                 f"{', '.join(fmt_ratio(r) for r in ratios)})", min(ratios) >= 1000))

    def synth_section(self) -> None:
        rows = self.s.get("synth_check", [])
        if not rows:
            return
        self.w("Synthetic states (rows marked \"synthetic\"): iterating a peer to 90% of 1e8 would take minutes "
               "per point, so its state is the real state after 3 batches with the progress counters set to k "
               "(torchdata: `_num_yielded`, `_sampler_iter_yielded`, `samples_yielded`, `yielded`; its generator "
               "state is the one before the epoch's permutation and does not move with k. Accelerate: "
               "`_num_yielded`, `_sampler_iter_yielded`. shufflepoint: `cursor`). Checked in this run against "
               "states taken by really iterating:")
        self.w()
        self.w("| loader | n | cursor | synthetic state == real state | resumed batch == true next batch |")
        self.w("|---|---|---|---|---|")
        for r in rows:
            self.w(f"| {SHORT[r['impl']]} | {fmt_n(r['n'])} | {r['frac']:.0%} (k={r['k']:,}) | "
                   f"{'yes' if r['state_equal'] else '**NO**'} | {'yes' if r['next_batch_exact'] else '**NO**'} |")
        self.w()

    def memory_section(self) -> None:
        ns = sorted({n for (_, n) in self.memory})
        self.w("## 2. Memory per rank")
        self.w()
        self.w("Peak RSS growth of the first resume at 90% in a fresh process (VmHWM, reset through "
               "`/proc/self/clear_refs` just before, minus VmRSS just before), and what stays resident after it "
               "while the loader is alive. For shufflepoint also the Python/numpy allocations the loader makes, "
               "traced with `tracemalloc`: retained after the first batch, and the peak over the next "
               "4,000 batches (the index chunks reach their largest size within them).")
        self.w()
        keys = [k for k in ("shufflepoint", "sp_sampler", "torchdata", "accelerate", "torch_ds")
                if any((k, n) in self.memory for n in ns)]
        self.w("| loader | " + " | ".join(f"n = {fmt_n(n)}" for n in ns) + " |")
        self.w("|---|" + "---|" * len(ns))
        for key in keys:
            cells = []
            for n in ns:
                r = self.memory.get((key, n))
                if r is None:
                    cells.append(self._not_run(key, n))
                    continue
                cells.append(f"{fmt_bytes(r['peak_delta_bytes'])} peak, {fmt_bytes(r['kept_bytes'])} kept")
            self.w(f"| {SHORT[key].replace(' (fresh start)', ' (epoch start)')} | {' | '.join(cells)} |")
        for key in ("shufflepoint", "sp_sampler"):
            if not any("traced_peak_bytes" in self.memory.get((key, n), {}) for n in ns):
                continue
            cells = []
            for n in ns:
                r = self.memory.get((key, n), {})
                cells.append(f"{fmt_bytes(r['traced_retained_bytes'])} retained, "
                             f"{fmt_bytes(r['traced_peak_bytes'])} peak" if "traced_peak_bytes" in r else "—")
            self.w(f"| {SHORT[key]}, traced allocations | {' | '.join(cells)} |")
        self.w()
        r = self.memory.get((OURS, 10**9))
        if r is not None and "traced_peak_bytes" in r:
            self.targets.append(("sampler state < 1 MiB at n = 1e9",
                                 f"{fmt_bytes(r['traced_peak_bytes'])} peak of traced allocations while iterating "
                                 f"({fmt_bytes(r['traced_retained_bytes'])} retained after the first batch; "
                                 f"process RSS peak +{fmt_bytes(r['peak_delta_bytes'])})",
                                 r["traced_peak_bytes"] < TARGET_MEMORY_B))

    def _not_run(self, key: str, n: int) -> str:
        known = [(m, r["peak_delta_bytes"] / m) for (k, m), r in self.memory.items() if k == key and m >= 10**7]
        if not known or key in ("shufflepoint", "sp_sampler"):
            return "not run"
        m, per_index = max(known)
        estimate = per_index * n
        return f"not run: ≈ {fmt_bytes(estimate)} est. ({per_index:.0f} B/index at {fmt_n(m)})"

    def iter_section(self) -> None:
        rows = self.s.get("iter", [])
        if not rows:
            return
        self.w("## 3. Iteration throughput")
        self.w()
        self.w("One whole epoch of a freshly built loader, `iter()` included; the loaders take turns, repeat after "
               "repeat. Batches/s counts this rank's batches. \"× DistributedSampler\" is the ratio of medians to "
               "the plain DataLoader + DistributedSampler rank; \"paired\" is the median of the per-repeat "
               "ratios (each repeat's runs are seconds apart, so machine noise mostly cancels); µs/batch over it "
               "is the difference of the medians.")
        self.w()
        self.w("With num_workers 0 the whole loader runs in the main thread, so its CPU time (`time.thread_time`) is "
               "also shown: it is what the loader costs, without the time other jobs on this shared machine take "
               "from it. With num_workers 2 the main thread mostly waits for the workers, so only wall time counts "
               "there.")
        self.w()
        self.w("| loader | workers | n | batches/epoch | batches/s median (min–max) | µs/batch | "
               "× DistributedSampler (paired) | µs/batch over it | CPU µs/batch | CPU × DistributedSampler | reps |")
        self.w("|---|---|---|---|---|---|---|---|---|---|---|")
        groups: dict[tuple[int, int], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            groups[r["workers"], r["n"]][r["impl"]].append(r)
        for (workers, n), by_impl in sorted(groups.items()):
            self._iter_rows(workers, n, by_impl)
        self.w()

    def _iter_rows(self, workers: int, n: int, by_impl: dict[str, list[dict]]) -> None:
        """One table row per loader for one (num_workers, n), and the iteration targets."""
        reference = by_impl.get("torch_ds", [])
        ref_rate = statistics.median(r["batches"] / r["seconds"] for r in reference) if reference else None
        ref_us = statistics.median(r["seconds"] / r["batches"] for r in reference) if reference else None
        ref_cpu = statistics.median(r["cpu_seconds"] / r["batches"] for r in reference) if reference else None
        for key in ("torch_ds", "shufflepoint", "sp_sampler", "torch", "torchdata", "accelerate"):
            runs = by_impl.get(key)
            if not runs:
                continue
            rates = [r["batches"] / r["seconds"] for r in runs]
            median, low, high = stats(rates)
            us = statistics.median(r["seconds"] / r["batches"] for r in runs)
            ratio = median / ref_rate if ref_rate else None
            paired = None
            if reference and key != "torch_ds":
                by_repeat = {r["repeat"]: r["batches"] / r["seconds"] for r in reference}
                pairs = [rate / by_repeat[r["repeat"]] for r, rate in zip(runs, rates, strict=True)
                         if r["repeat"] in by_repeat]
                paired = statistics.median(pairs) if pairs else None
            over = (us - ref_us) * 1e6 if ref_us is not None and key != "torch_ds" else None
            cpu_us = statistics.median(r["cpu_seconds"] / r["batches"] for r in runs)
            cpu_ratio = ref_cpu / cpu_us if ref_cpu else None
            cpu_cells = (f"{cpu_us * 1e6:.1f} | {cpu_ratio:.2f}" if workers == 0 and cpu_ratio else "— | —")
            self.w(f"| {LABELS[key]} | {workers} | {fmt_n(n)} | {runs[0]['batches']:,} | "
                   f"{median:,.0f} ({low:,.0f}–{high:,.0f}) | {us * 1e6:.1f} | "
                   f"{'1.00' if key == 'torch_ds' else f'{ratio:.2f} ({paired:.2f})'} | "
                   f"{'—' if over is None else f'{over:+.1f}'} | {cpu_cells} | {len(runs)} |")
            if key == OURS and workers == 0 and ratio is not None:
                wall_ok = ratio >= TARGET_ITER_RATIO or paired >= TARGET_ITER_RATIO
                self.targets.append(("iteration ≥ 0.95× DataLoader + DistributedSampler (num_workers 0)",
                                     f"{ratio:.2f}× wall (paired {paired:.2f}×), {cpu_ratio:.2f}× CPU time",
                                     wall_ok or ("cpu" if cpu_ratio >= TARGET_ITER_RATIO else False)))
                cpu_over = (cpu_us - ref_cpu) * 1e6
                self.targets.append(("iteration overhead ≤ 1 µs/batch over it (num_workers 0)",
                                     f"{over:+.2f} µs/batch wall, {cpu_over:+.2f} µs/batch CPU "
                                     "(negative: faster)",
                                     over <= TARGET_OVERHEAD_S * 1e6
                                     or ("cpu" if cpu_over <= TARGET_OVERHEAD_S * 1e6 else False)))

    def state_section(self) -> None:
        rows = self.s.get("state", [])
        if not rows:
            return
        self.w("## 4. State")
        self.w()
        self.w("At n = 1e6 after 1,000 batches. `state_dict()` cost: median of 5 blocks of 1,000 calls.")
        self.w()
        self.w("| loader | JSON bytes | pickle bytes | state_dict() per call |")
        self.w("|---|---|---|---|")
        for r in rows:
            median, low, high = stats(r["call_seconds"])
            json_text = f"{r['json_bytes']:,}" if r["json_bytes"] is not None else "not JSON-able"
            self.w(f"| {SHORT[r['impl']]} | {json_text} | {r['pickle_bytes']:,} | {median * 1e6:.2f} µs "
                   f"({low * 1e6:.2f}–{high * 1e6:.2f}) |")
        self.w()
        sizes = self.s.get("state_size", [])
        for r in sizes:
            self.w(f"- shufflepoint state, {r['case']}: **{r['json_bytes']} bytes** of JSON.")
        if sizes:
            self.w(f"  The widest state: `{json.dumps(sizes[-1]['state'])}`. A user's `dataset_fingerprint` string "
                   "adds its own length.")
            worst = max(r["json_bytes"] for r in sizes)
            self.targets.append(("state ≤ 512 bytes as JSON", f"{worst} bytes at most (widest values of every field)",
                                 worst <= TARGET_STATE_B))
        self.w()

    def indexgen_section(self) -> None:
        lines, targets = indexgen_section(self.s.get("indexgen", []))
        self.lines += lines
        self.targets += targets

    def errors(self) -> None:
        for r in self.s.get("error", []):
            self.w(f"- **ERROR** in {r['impl']} n={r['n']}: `{r['stderr'][-300:]}`")

    def targets_section(self) -> list[str]:
        out = ["## Targets (issue 5)", "", "| target | measured | verdict |", "|---|---|---|"]
        out += [f"| {name} | {measured} | {verdict(ok)} |" for name, measured, ok in self.targets]
        out.append("")
        return out

    def build(self) -> str:
        self.header()
        head = len(self.lines)
        self.resume_section()
        self.synth_section()
        self.memory_section()
        self.iter_section()
        self.state_section()
        self.indexgen_section()
        self.errors()
        self.w("Charts: `resume_latency.png` (resume latency vs cursor, log scale, one line per loader, one panel "
               "per n) and `memory.png` (peak memory of a resume vs n).")
        self.lines[head:head] = self.targets_section()
        return "\n".join(self.lines) + "\n"



def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    raw = Path(argv[0]) if argv else HERE / "results" / "raw.jsonl"
    out = Path(argv[1]) if len(argv) > 1 else raw.parent
    report = Report(load(raw))
    text = report.build()
    (out / "results.md").write_text(text)
    charts(report, out)
    print(f"wrote {out / 'results.md'}, {out / 'resume_latency.png'}, {out / 'memory.png'}")


if __name__ == "__main__":
    main()

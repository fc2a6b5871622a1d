"""Section 5 of ``results.md``: index generation, and its targets (issues 5 and 12)."""

from __future__ import annotations

import statistics

from _report_format import TARGET_INDEX_RATE, TARGET_RADIX_RATE, fmt_n, fmt_stat, stats

Target = tuple[str, str, "bool | str"]


def indexgen_section(rows: list[dict]) -> tuple[list[str], list[Target]]:
    """The table's lines and the targets it decides."""
    if not rows:
        return [], []
    lines = [
        "## 5. Index generation", "",
        "Indices per second (count ÷ seconds), median (min–max). `feistel take` is the vectorised seekable order "
        "on an int64 array of positions; the loader stream is what the sampler hands torch (Python ints, rank 0 "
        "of 2, in chunks); `radix-feistel` is the order of issue 12 (a Feistel over a mixed-radix domain "
        "a × 2^k ≥ n, so almost no cycle walking); the `torch` order materialises `torch.randperm`. Sizes "
        "2^k+1 are where a power-of-two domain walks almost half of its values.", "",
        "\"CPU\" divides by the thread's CPU time instead of wall time: the work itself, without the time other "
        "jobs on this shared machine took from it.", "",
        "| op | n | indices | M indices/s (wall) | M indices/s (CPU) | seconds (wall) | reps |",
        "|---|---|---|---|---|---|---|",
    ]
    targets: list[Target] = []
    for r in rows:
        median, low, high = stats([r["count"] / s / 1e6 for s in r["seconds"]])
        cpu = statistics.median(r["count"] / s / 1e6 for s in r["cpu_seconds"])
        lines.append(f"| {r['op']} | {fmt_n(r['n'])} | {r['count']:,} | {median:.1f} ({low:.1f}–{high:.1f}) | "
                     f"{cpu:.1f} | {fmt_stat(r['seconds'])} | {len(r['seconds'])} |")
        if r["op"].startswith("feistel take") and r["n"] in (10**8, 10**9):
            ok: bool | str = median * 1e6 >= TARGET_INDEX_RATE
            ok = ok or ("cpu" if cpu * 1e6 >= TARGET_INDEX_RATE else False)
            targets.append((f"index generation ≥ 20 M/s vectorised (n = {fmt_n(r['n'])}, feistel)",
                            f"{median:.1f} M/s wall median ({low:.1f}–{high:.1f}); {cpu:.1f} M/s on CPU time", ok))
    lines.append("")
    return lines, targets + _radix_targets([r for r in rows if r["op"].startswith("radix-feistel take")])


def _radix_targets(rows: list[dict]) -> list[Target]:
    """Issue 12: ≥ 30 M/s at every n up to 2**62, and no dip just above a power of two."""
    if not rows:
        return []
    rates = {r["n"]: statistics.median(r["count"] / s for s in r["seconds"]) for r in rows}
    slowest = min(rates, key=rates.__getitem__)
    targets: list[Target] = [(
        "index generation ≥ 30 M/s at every n ≤ 2^62 (radix-feistel)",
        f"{rates[slowest] / 1e6:.1f} M/s at worst (n = {fmt_n(slowest)}); M/s by n: "
        + ", ".join(f"{fmt_n(n)}: {rate / 1e6:.0f}" for n, rate in sorted(rates.items())),
        rates[slowest] >= TARGET_RADIX_RATE)]
    above = [rate for n, rate in rates.items() if n > 2 and (n - 1) & (n - 2) == 0]  # n = 2**k + 1
    others = [rate for n, rate in rates.items() if not (n > 2 and (n - 1) & (n - 2) == 0)]
    if above and others:
        dip = min(above) / statistics.median(others)
        targets.append(("no dip just above a power of two (radix-feistel)",
                        f"slowest n = 2^k+1 ÷ median of the other sizes = {dip:.2f} (≥ 0.8 counts as no dip)",
                        dip >= 0.8))
    return targets

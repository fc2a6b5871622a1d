"""shards*_throughput.png and shards*_resume.png, in the style of benchmarks/_charts.py (matplotlib, Agg)."""

from __future__ import annotations

import statistics
from pathlib import Path

COLORS = {"shufflepoint": "#d62728", "streaming": "#1f77b4", "litdata": "#9467bd", "litdata-tokens": "#c5b0d5",
          "hf": "#ff7f0e"}
SHORT = {"shufflepoint": "shufflepoint", "streaming": "Streaming 0.13", "litdata": "LitData (items)",
         "litdata-tokens": "LitData (TokensLoader)", "hf": "HF streaming"}


def _bars(ax, records: list, loaders: list[str], groups: list[tuple[str, dict]], field: str, scale: float) -> None:
    width = 0.8 / max(1, len(loaders))
    for i, loader in enumerate(loaders):
        med, low, high = [], [], []
        for _, match in groups:
            found = [r[field] * scale for r in records
                     if r["loader"] == loader and field in r and all(r.get(k) == v for k, v in match.items())]
            m = statistics.median(found) if found else 0.0
            med.append(m)
            low.append(m - min(found) if found else 0.0)
            high.append(max(found) - m if found else 0.0)
        x = [g + (i - (len(loaders) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(x, med, width, yerr=[low, high], capsize=3, color=COLORS[loader], label=SHORT[loader])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([label for label, _ in groups], fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)


def charts(records: list, loaders: list[str], out: Path, name: str) -> None:
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    throughput = [(f"{s}, w{w}", {"kind": "throughput", "storage": s, "workers": w, "workload": "tokens"})
                  for s in ("local", "s3") for w in (0, 4)]
    resume = [(f"cursor {int(100 * f)}%", {"kind": "resume", "fraction": f}) for f in (0.1, 0.9)]
    for suffix, groups, field, scale, size, ylabel, title in (
        ("throughput", throughput, "samples_per_s", 1.0, (7.2, 4.0), "samples/s (token windows, batch 256)",
         "Steady-state throughput, rank 0 of 1 (median, min–max bars; no bar: not run)"),
        ("resume", resume, "resume_s", 1000.0, (6.4, 4.0), "load_state_dict + first batch (ms)",
         "Resume in a fresh process, rank 0 of 2 (red: 50 ms target)"),
    ):
        fig, ax = plt.subplots(figsize=size)
        _bars(ax, records, loaders, groups, field, scale)
        if suffix == "resume":
            ax.axhline(50, color="red", linestyle=":", linewidth=1)
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{name}_{suffix}.png", dpi=110)
        plt.close(fig)

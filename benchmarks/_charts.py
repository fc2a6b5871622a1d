"""The benchmark charts (resume latency, memory), drawn from a built ``Report``."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report_format import COLORS, OURS, SHORT, TARGET_MEMORY_B, TARGET_RESUME_S, fmt_n

if TYPE_CHECKING:
    from report import Report


def charts(report: Report, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    resume_chart(plt, report, out)
    memory_chart(plt, report, out)


def resume_chart(plt: Any, report: Report, out: Path) -> None:
    """resume_latency.png: one panel per n, latency against the cursor."""
    ns = sorted({n for (_, n, _) in report.resume})
    if ns:
        fig, axes = plt.subplots(1, len(ns), figsize=(3.2 * len(ns), 3.8), sharey=True, squeeze=False)
        for ax, n in zip(axes[0], ns, strict=True):
            for key in ("torchdata", "accelerate", "torch_ds", "sp_sampler", "shufflepoint"):
                fracs = [f for f in (0.0, 0.5, 0.9) if (key, n, f) in report.resume]
                if not fracs:
                    continue
                med = [statistics.median(report.resume[key, n, f]) for f in fracs]
                low = [m - min(report.resume[key, n, f]) for m, f in zip(med, fracs, strict=True)]
                high = [max(report.resume[key, n, f]) - m for m, f in zip(med, fracs, strict=True)]
                x = [100 * f for f in fracs]
                ax.errorbar(x, med, yerr=[low, high], marker="o", capsize=3, color=COLORS[key],
                            label=SHORT[key], linestyle="-" if len(x) > 1 else "none")
            ax.axhline(TARGET_RESUME_S, color="red", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_xticks([0, 50, 90])
            ax.set_xlabel("cursor (% of epoch)")
            ax.set_title(f"n = {fmt_n(n)}")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("resume: load_state_dict + first batch (s)")
        handles, labels = axes[0][0].get_legend_handles_labels()
        for ax in axes[0][1:]:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
        fig.suptitle("Resume latency vs cursor (median, min–max bars; red: 5 ms target)", fontsize=10)
        fig.tight_layout(rect=(0, 0.08, 1, 0.95))
        fig.savefig(out / "resume_latency.png", dpi=110)
        plt.close(fig)


def memory_chart(plt: Any, report: Report, out: Path) -> None:
    """memory.png: peak memory of a resume at 90% against n."""
    if report.memory:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for key in ("torchdata", "accelerate", "torch_ds", "sp_sampler", "shufflepoint"):
            points = sorted((n, r["peak_delta_bytes"]) for (k, n), r in report.memory.items() if k == key)
            if points:
                ax.plot([p[0] for p in points], [max(p[1], 4096) / 2**20 for p in points], marker="o",
                        color=COLORS[key], label=f"{SHORT[key].replace(' (fresh start)', ' (epoch start)')}: "
                        "process peak RSS Δ")
        points = sorted((n, r["traced_peak_bytes"]) for (k, n), r in report.memory.items()
                        if k == OURS and "traced_peak_bytes" in r)
        if points:
            ax.plot([p[0] for p in points], [p[1] / 2**20 for p in points], marker="s", linestyle="--",
                    color=COLORS[OURS], label="shufflepoint.DataLoader: traced allocations, peak")
        ax.axhline(TARGET_MEMORY_B / 2**20, color="red", linestyle=":", linewidth=1, label="1 MiB target")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (samples in the dataset)")
        ax.set_ylabel("MiB")
        ax.set_title("Memory of a resume at 90%, per rank", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        fig.savefig(out / "memory.png", dpi=110)
        plt.close(fig)


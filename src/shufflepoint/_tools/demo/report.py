"""The demo's terminal table and its loss plot (matplotlib, when installed)."""

from __future__ import annotations

from typing import Any

from shufflepoint._tools import audit as _audit


def import_matplotlib() -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass


def plot_losses(curves: dict[str, tuple[list[float], list[float], int, str]], path: str) -> tuple[str | None, str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "no plot: matplotlib is not installed (pip install 'shufflepoint[plot]')"
    figure = loss_figure(curves)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path, f"loss per step, uninterrupted vs resumed: {path}"


def loss_figure(curves: dict[str, tuple[list[float], list[float], int, str]]) -> Any:
    """One panel per variant; each panel's legend sits below its axes, so it never hides the curves or
    the "checkpoint, SIGKILL" mark (inside the axes, at the top of the checkpoint's line)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.9), sharey=True, squeeze=False,
                                layout="constrained")
    for axis, (label, (reference, resumed, cut, verdict)) in zip(axes[0], curves.items(), strict=True):
        axis.plot(range(1, len(reference) + 1), reference, color="#444444", lw=2.2, label="uninterrupted")
        axis.plot(range(cut + 1, len(resumed) + 1), resumed[cut:], color="#d62728" if verdict not in
                  _audit.PASSING else "#2ca02c", lw=1.4, ls="--", marker=".", label="resumed after SIGKILL")
        axis.axvline(cut + 0.5, color="#888888", ls=":", lw=1)
        axis.annotate("checkpoint,\nSIGKILL", (cut + 0.5, 1.0), xycoords=("data", "axes fraction"),
                      xytext=(-4, -4), textcoords="offset points", ha="right", va="top", fontsize=7,
                      color="#666666")
        axis.set_title(f"{label}\n{verdict}", fontsize=10)
        axis.set_xlabel("training step")
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    axes[0][0].set_ylabel("loss (mean over ranks)")
    return figure


def render(result: dict[str, Any]) -> str:
    setup = result["setup"]
    lines = [
        "",
        f"shufflepoint demo: {setup['processes']} processes, {setup['epochs']} epochs, checkpoint at epoch "
        f"{setup['save_at']['epoch']} step {setup['save_at']['step']}, SIGKILL, resume in new processes",
        "",
        f"  {'variant':<33} {'data order':<19} {'final weights vs uninterrupted':<40}",
        f"  {'-' * 33} {'-' * 19} {'-' * 40}",
    ]
    for row in result["variants"]:
        if row["weights_identical"]:
            weights = "identical, bit for bit"
        elif row["variant"] == "elastic":
            weights = f"differ by {row['weights_max_abs_diff']:.1e} (expected)"
        else:
            weights = f"DIFFER (max |diff| {row['weights_max_abs_diff']:.1e})"
        flag = "" if row["as_expected"] else "   <- unexpected"
        lines.append(f"  {row['label']:<33} {row['verdict']:<19} {weights}{flag}")
    lines.append("")
    for row in result["variants"]:
        lines.append(f"  {row['label']}: {row['summary']}")
    if any(r["variant"] == "elastic" for r in result["variants"]):
        lines.append("  (elastic: 1 process x batch 8 takes the same global batches as 2 x 4, but averages "
                     "the gradient in another order, so the weights are close, not equal)")
    lines += ["", f"  {result['plot_note']}",
              f"  checkpoints to look at: shufflepoint inspect {result['checkpoints']}/stock_r0.pt",
              f"  wall time {result['wall_time_s']:.1f}s"]
    return "\n".join(lines)


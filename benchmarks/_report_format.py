"""Formatting helpers, labels and targets shared by the benchmark report and its charts."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

LABELS = {
    "shufflepoint": "shufflepoint.DataLoader (rank 0 of 2)",
    "sp_sampler": "shufflepoint.ResumableSampler + torch DataLoader (rank 0 of 2)",
    "torch_ds": "torch DataLoader + DistributedSampler (rank 0 of 2)",
    "torch": "torch DataLoader, shuffle=True (1 process)",
    "torchdata": "torchdata StatefulDataLoader (1 process)",
    "accelerate": "Accelerate prepared, stateful (rank 0 of 2)",
}
SHORT = {
    "shufflepoint": "shufflepoint.DataLoader", "sp_sampler": "shufflepoint.ResumableSampler",
    "torch_ds": "torch DL + DistributedSampler (fresh start)", "torch": "torch DataLoader",
    "torchdata": "torchdata StatefulDataLoader", "accelerate": "Accelerate (stateful)",
}
PEERS = ("torchdata", "accelerate")
OURS = "shufflepoint"
COLORS = {"shufflepoint": "tab:green", "sp_sampler": "tab:olive", "torch_ds": "tab:gray",
          "torchdata": "tab:orange", "accelerate": "tab:blue", "torch": "black"}
TARGET_RESUME_S = 5e-3
TARGET_MEMORY_B = 2**20
TARGET_STATE_B = 512
TARGET_INDEX_RATE = 20e6
TARGET_RADIX_RATE = 30e6
TARGET_OVERHEAD_S = 1e-6
TARGET_ITER_RATIO = 0.95


def stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def fmt_stat(values: list[float]) -> str:
    median, low, high = stats(values)
    if len(values) == 1:
        return fmt_seconds(median)
    return f"{fmt_seconds(median)} ({fmt_seconds(low)}–{fmt_seconds(high)})"


def fmt_bytes(size: float) -> str:
    if size < 2**10:
        return f"{size:.0f} B"
    if size < 2**20:
        return f"{size / 2**10:.0f} KiB"
    if size < 2**30:
        return f"{size / 2**20:.1f} MiB"
    return f"{size / 2**30:.2f} GiB"


def fmt_n(n: int) -> str:
    exponent = len(str(n)) - 1
    if n == 10**exponent:
        return f"1e{exponent}"
    for offset, suffix in ((0, ""), (1, "+1")):  # 2**k and 2**k + 1, as the index generation sizes are
        if n - offset > 1024 and (n - offset) & (n - offset - 1) == 0:
            return f"2^{(n - offset).bit_length() - 1}{suffix}"
    return f"{n:,}"


def fmt_ratio(ratio: float) -> str:
    if ratio >= 100:
        return f"{ratio:,.0f}×"
    return f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.1f}×"


def load(path: Path) -> dict[str, list[dict]]:
    sections: dict[str, list[dict]] = defaultdict(list)
    with path.open() as raw:
        for line in raw:
            record = json.loads(line)
            sections[record["section"]].append(record)
    return sections


def verdict(ok: bool | str) -> str:
    if ok == "cpu":
        return "**missed on wall clock, met on CPU time** (shared machine: see the section)"
    return "**met**" if ok else "**MISSED**"



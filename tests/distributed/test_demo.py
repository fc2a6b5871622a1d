"""``shufflepoint demo`` as ``make demo`` runs it: the console script, real processes, the table and the plot."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("accelerate", "torchdata")),
    reason="the full demo needs accelerate and torchdata")


def test_demo_shows_the_seeds_bug_and_its_fixes(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "shufflepoint")
    started = time.monotonic()
    done = subprocess.run([script, "demo", "--out", str(tmp_path), "--json", str(tmp_path / "demo.json")],
                          capture_output=True, text=True, timeout=240)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((tmp_path / "demo.json").read_text())
    rows = {row["variant"]: row for row in result["variants"]}
    assert {name: (row["verdict"], row["weights_identical"]) for name, row in rows.items()} == {
        "stock": ("ORDER_LOST", False),
        "patched": ("EXACT", True),
        "shufflepoint": ("EXACT", True),
        "elastic": ("SAME_GLOBAL_BATCHES", False),
    }
    assert "replays epoch 0's order" in rows["stock"]["summary"]
    assert rows["elastic"]["weights_max_abs_diff"] < 1e-3  # same global batches, another summation order
    # the table, on stdout; progress lines on stderr while it runs
    assert "stock Accelerate                  ORDER_LOST          DIFFER" in done.stdout
    assert "Accelerate + patch_accelerate()   EXACT               identical, bit for bit" in done.stdout
    assert "elastic 2 -> 1 (shufflepoint)     SAME_GLOBAL_BATCHES differ by" in done.stdout
    assert done.stderr.count("s] ") == 6 and "SIGKILLed right after the checkpoint" in done.stderr
    # the plot, at the path it printed
    assert result["plot"] == str(tmp_path / "demo_loss.png") and f"{result['plot']}" in done.stdout
    with open(result["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # the checkpoints it points at are inspectable
    assert os.path.exists(os.path.join(result["checkpoints"], "stock_r0.pt"))
    print(f"demo wall time {wall:.1f}s (its own clock: {result['wall_time_s']}s; timings {result['timings_s']})")
    assert wall < 240

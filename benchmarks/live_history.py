"""The live loader's history over many membership changes (issue 43.2; make bench-live-history).

A ``LiveLoader`` follows a simulated Manager through ``--changes`` membership changes (the quorum moves between
GROUPS and GROUPS - 1 participants every 1 to 3 steps; the loader's group always takes part, as participant 0;
epochs of N samples end on the way, each end one more entry). Per step it records the share it served. Then:

- the state's size (JSON bytes, and the history's own), its save (``state_dict``) and load (``load_state_dict``
  into a fresh loader) times, at 1k, 10k and 100k changes;
- ``which(step)[0]`` of the loaded loader equals the served share, for every committed step;
- ``shufflepoint which`` (the tool's ``answer`` on a checkpoint file) equals it too, for a sample of steps: the
  first, the last, and random ones;
- the history alone at a realistic spacing (``hourly``): 2,048 groups, a change every 1 to 7,200 steps.

Results: benchmarks/results/live_history.md and .json. Plain ``.venv`` (no torchft needed).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))

from shufflepoint._core.membership import Changes  # noqa: E402
from shufflepoint._loading.live import LiveLoader  # noqa: E402
from shufflepoint._tools.which import answer  # noqa: E402
from shufflepoint._tools.which_checkpoint import read_checkpoint  # noqa: E402

N, BATCH, GROUPS = 100_003, 2, 4


class Quorum:
    """The Manager's questions, answered by the script: participants, this group always participant 0."""

    def __init__(self) -> None:
        self.step, self.participants = 0, GROUPS

    def start_quorum(self) -> None:
        pass

    def num_participants(self) -> int:
        return self.participants

    def participating_rank(self) -> int:
        return 0

    def current_step(self) -> int:
        return self.step


def loader() -> LiveLoader:
    return LiveLoader(range(N), BATCH, replica_groups=GROUPS, seed=3, prefetch=False, collate_fn=list)


def run(changes: int, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    manager, served = Quorum(), []
    live = loader()
    live.follow(manager)
    began = time.perf_counter()
    for change in range(changes):
        manager.participants = GROUPS - change % 2
        for _ in range(rng.randint(1, 3)):
            steps = iter(live)
            batch = next(steps, None)
            while batch is None:  # the epoch ended: the next iter() reads the next one
                steps = iter(live)
                batch = next(steps, None)
            served.append([int(i) for i in batch])
            manager.step += 1
    trained_s = time.perf_counter() - began
    entries = len(live._changes)
    began = time.perf_counter()
    state = live.state_dict()
    save_s = time.perf_counter() - began
    text = json.dumps({"loader": state, "model": {}})
    fresh = loader()
    began = time.perf_counter()
    fresh.load_state_dict(json.loads(text)["loader"])
    load_s = time.perf_counter() - began
    began = time.perf_counter()
    wrong = [step for step in range(len(served)) if fresh.which(step)[0] != served[step]]
    which_s = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "checkpoint.json"
        path.write_text(text)
        found = read_checkpoint(str(path))
        sample = sorted({0, len(served) - 1, *rng.sample(range(len(served)), min(8, len(served)))})
        began = time.perf_counter()
        tool_wrong = [step for step in sample if [e["index"] for e in answer(
            found, range(N), step, locate=False)["ranks"]["0"]] != served[step]]
        tool_s = (time.perf_counter() - began) / len(sample)
    return {"changes": changes, "entries": entries, "steps": len(served), "epochs": fresh.epoch,
            "state_bytes": len(json.dumps(state)), "history_bytes": len(state["changes"]),
            "bytes_per_change": round(len(state["changes"]) / changes, 2), "save_ms": round(save_s * 1e3, 1),
            "load_ms": round(load_s * 1e3, 1), "which_us_per_step": round(which_s / len(served) * 1e6, 1),
            "which_wrong": len(wrong), "tool_steps": len(sample), "tool_wrong": len(tool_wrong),
            "tool_ms_per_answer": round(tool_s * 1e3, 1), "train_us_per_step": round(trained_s / len(served) * 1e6, 1)}


def hourly(changes: int, groups: int = 2048, seed: int = 0) -> dict[str, Any]:
    """The history alone (``membership.Changes``, fed as the loader feeds it) for a run of 16,384 GPUs as 2,048
    groups of 8 with a change every 1 to 7,200 steps (hourly at ~1 step/s; too many steps to drive a loader)."""
    rng = random.Random(seed)
    history, step, lot = Changes(), 0, 0
    for change in range(changes):
        participants = groups - change % 2
        history = history.committed(step, lot, participants, participants, 8)
        steps = rng.randint(1, 7200)
        step, lot = step + steps, lot + steps * participants
    began = time.perf_counter()
    text = history.to_state()
    save_s = time.perf_counter() - began
    began = time.perf_counter()
    loaded = Changes.from_state(text)
    load_s = time.perf_counter() - began
    assert loaded == history
    return {"changes": changes, "steps": step, "history_bytes": len(text),
            "bytes_per_change": round(len(text) / changes, 2), "save_ms": round(save_s * 1e3, 1),
            "load_ms": round(load_s * 1e3, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    rows = []
    for changes in args.changes:
        rows.append(run(changes))
        print(json.dumps(rows[-1]), flush=True)
    hours = [hourly(changes) for changes in args.changes]
    for row in hours:
        print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "live_history.json").write_text(json.dumps({"loader": rows, "hourly": hours}, indent=1) + "\n")
    lines = ["# The live loader's history over many membership changes (`make bench-live-history`)", "",
             f"A LiveLoader of {N:,} samples, batch {BATCH}, {GROUPS} groups; the quorum moves between {GROUPS} and "
             f"{GROUPS - 1} participants every 1-3 steps. `which` checked against the served share at every "
             "committed step; `shufflepoint which` (the tool's answer on a checkpoint file) at the first, the last "
             "and 8 random steps.", "",
             "| changes | entries | steps | state JSON bytes | history bytes | bytes a change | save ms | load ms "
             "| which µs a step | which wrong | tool steps / wrong | tool ms an answer |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['changes']:,} | {r['entries']:,} | {r['steps']:,} | {r['state_bytes']:,} | "
                     f"{r['history_bytes']:,} | {r['bytes_per_change']} | {r['save_ms']} | {r['load_ms']} | "
                     f"{r['which_us_per_step']} | {r['which_wrong']} | {r['tool_steps']} / {r['tool_wrong']} | "
                     f"{r['tool_ms_per_answer']} |")
    lines += ["", "The history alone, 16,384 GPUs as 2,048 groups of 8, a change every 1-7,200 steps (hourly at ~1 "
              "step/s; `membership.Changes` fed as the loader feeds it, then saved and loaded):", "",
              "| changes | steps | history bytes | bytes a change | save ms | load ms |", "|---|---|---|---|---|---|"]
    for r in hours:
        lines.append(f"| {r['changes']:,} | {r['steps']:,} | {r['history_bytes']:,} | {r['bytes_per_change']} | "
                     f"{r['save_ms']} | {r['load_ms']} |")
    (RESULTS / "live_history.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""``which`` at step 1e7 (issue 26, "Measured"): from a cold process, against the peers' ways of answering.

``make bench-which`` (about 2 minutes here). Writes ``benchmarks/results/which.md`` and ``.json``.

- Array corpus: 1e9 samples, a synthetic index dataset (``range(10**9)``: a real map-style dataset
  whose sample i is i; the answer is the same for any dataset of that length). 8 ranks x batch 128
  (global batch 1,024) for 5e6 steps, then 16 ranks x batch 64 (a resize): the state is the one
  such a run writes at step 1.2e7 (built from the layout history's own arithmetic and checked, at a
  small size, equal to the state a real run writes), and ``which(1e7)`` is asked of it.
- Packed corpus: 1e12 tokens in 1e7 documents (lognormal, mean 1e5 tokens: long documents keep the
  per-document counts at 40 MB on this 23 GB machine; they are kept as a ``Shards`` corpus keeps them,
  with their prefix sums and digest, and memory-mapped back as every training process does at start).
  seq_len 4096, 8 ranks x batch 128 rows. ``which(1e7)`` (epoch 41 of ~244M rows) and ``locate`` of
  rank 0's 128 rows (their documents and token spans).
- Each is timed in fresh processes (``--child``), median of ``--repeats``: the loader built, the state
  loaded, ``which`` (the issue's target: <= 10 ms for these together), ``locate``; Python start and the
  imports apart.
- Bytes written for this during training: ``/proc/self/io`` ``wchar`` around 1,000 steps of a loader
  (nothing else writes in that stretch), and the state's size (written at each checkpoint anyway).
- Peers (``which_peers.py``): OLMo-core's ``global_indices`` (bytes computed, build measured at 1e8),
  Megatron's ``--iterations-to-skip`` (a replay: the data cost of one iteration measured, times 1e5), a
  per-step log (bytes of 1,000 steps measured, times 1,000).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ARRAY_N, STEP, RESIZE_AT, SAVED_AT = 10**9, 10**7, 5 * 10**6, 12 * 10**6
TOKENS, DOCUMENTS, SEQ_LEN = 10**12, 10**7, 4096
WORLD, BATCH, RESIZED_WORLD, RESIZED_BATCH = 8, 128, 16, 64
RESULTS = Path(__file__).resolve().parent / "results"


# -- the states --------------------------------------------------------------------------------
def state_at(loader: Any, step: int, legs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The state a run of ``loader``'s dataset writes after ``step`` batches per rank, read with
    ``legs`` ((first step, world size, batch size), the first at step 0): the layout history's own
    arithmetic (``_core/history``), no batch read. ``check_state_at`` compares it with a real run."""
    from shufflepoint._core.history import History, Place
    from shufflepoint._core.plan import Layout

    saved = loader.state_dict()
    n, deal, drop_last = saved["n"], saved["deal"], saved["drop_last"]
    first, world, batch = legs[0]
    history = History.begin(n, deal, Layout(n, world, batch, drop_last), Place(0, 0), first)
    for begins, world, batch in legs[1:]:
        arrived = history.position(begins)
        assert arrived is not None
        history = history.record(begins, Layout(n, world, batch, drop_last), arrived)
    place = history.position(step)
    assert place is not None
    last = history.legs[-1].layout
    return {**saved, "epoch": place.epoch, "cursor": place.cursor, "segments": [list(p) for p in place.segments],
            "world_size": last.world_size, "batch_size": last.batch_size, "steps": step,
            "history": history.entries()}


def check_state_at() -> None:
    """At a size a run can be made: the built state equals the one a real run writes (two legs)."""
    import shufflepoint

    data = list(range(1000))

    def train(loader: Any, steps: int, until: int) -> int:
        while steps < until:
            for _ in loader:
                steps += 1
                if steps == until:
                    break
        return steps

    run = shufflepoint.DataLoader(data, 8, seed=5, world_size=4, rank=0)
    steps = train(run, 0, 40)  # into epoch 1 (32 batches an epoch)
    resized = shufflepoint.DataLoader(data, 4, seed=5, world_size=2, rank=0)
    resized.load_state_dict(run.state_dict(), verify_ranks=False)
    train(resized, steps, 300)  # epochs 1-3 on the new layout
    real = resized.state_dict()
    built = state_at(shufflepoint.DataLoader(data, 8, seed=5, world_size=4, rank=0), 300, [(0, 4, 8), (40, 2, 4)])
    if built != real:
        raise SystemExit(f"state_at disagrees with a real run:\nbuilt {built}\nreal  {real}")


# -- the cold process --------------------------------------------------------------------------
class LongDocuments:
    """1e7 documents whose token ids are views of one small buffer (their content repeats)."""

    def __init__(self, documents: int) -> None:
        self.documents = documents
        self.buffer = np.random.default_rng(0).integers(0, 50_257, 1 << 22, dtype=np.int64)

    def __len__(self) -> int:
        return self.documents

    def __getitem__(self, document: int) -> dict[str, np.ndarray]:
        start = (document * 7919) % (self.buffer.size // 2)
        return {"input_ids": self.buffer[start:start + 1024]}


def child(kind: str, state_path: str, counts_path: str | None) -> dict[str, Any]:
    began = time.perf_counter()
    import shufflepoint
    from shufflepoint._shards.counting import token_counts

    imported = time.perf_counter()
    with open(state_path) as f:
        state = json.load(f)
    start = time.perf_counter()
    if kind == "array":
        dataset: Any = range(ARRAY_N)
    else:
        assert counts_path is not None
        token_counts.count_all = lambda *args, **kwargs: np.load(counts_path, mmap_mode="r")  # kept
        dataset = shufflepoint.Packed(LongDocuments(DOCUMENTS), SEQ_LEN, progress=False)
    dataset_s = time.perf_counter() - start
    built = time.perf_counter()
    loader = shufflepoint.DataLoader(dataset, state["batch_size"], seed=state["seed"], world_size=state["world_size"],
                                     rank=0, verify_ranks=False)
    loader.load_state_dict(state)
    loaded = time.perf_counter()
    found = loader.which(STEP)
    answered = time.perf_counter()
    again = time.perf_counter()
    loader.which(STEP)
    warm_s = time.perf_counter() - again
    locate_s = locate_warm_s = None
    if kind == "packed":
        start = time.perf_counter()
        located = [dataset.locate(i) for i in found[0]]
        locate_s = time.perf_counter() - start
        assert all(sum(d["tokens"][1] - d["tokens"][0] for d in row["documents"]) == SEQ_LEN for row in located)
        following = loader.which(STEP + 1)[0]
        start = time.perf_counter()
        [dataset.locate(i) for i in following]
        locate_warm_s = time.perf_counter() - start
    return {"import_s": imported - began, "dataset_s": dataset_s, "build_and_load_s": loaded - built,
            "which_s": answered - loaded,
            "which_warm_s": warm_s, "locate_s": locate_s,
            "locate_warm_s": locate_warm_s, "ranks": len(found), "per_rank": len(found[0]),
            "first": found[0][:3]}


def cold(kind: str, state: dict[str, Any], counts_path: str | None, repeats: int) -> dict[str, Any]:
    """``child`` in ``repeats`` fresh processes: medians, and the whole process's wall time."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(state, f)
    runs, walls = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--child", kind, f.name, counts_path or ""],
                              capture_output=True, text=True, check=True, timeout=600)
        walls.append(time.perf_counter() - start)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    os.unlink(f.name)
    found = {key: statistics.median(r[key] for r in runs) for key in runs[0]
             if isinstance(runs[0][key], float)}
    found["runs"] = runs
    found.update(process_s=statistics.median(walls), ranks=runs[0]["ranks"], per_rank=runs[0]["per_rank"],
                 first=runs[0]["first"], repeats=repeats)
    return found


def bytes_written_while_training(steps: int = 1000) -> int:
    """``wchar`` of this process over ``steps`` batches of a loader (no checkpoint in the stretch)."""
    import shufflepoint

    loader = shufflepoint.DataLoader(range(10**7), 128, seed=1, world_size=8, rank=3)  # 9,765 steps an epoch
    batches = iter(loader)
    next(batches)

    def wchar() -> int:
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("wchar:")).split()[1])

    before = wchar()
    for _ in range(steps):
        next(batches)
    return wchar() - before


def main() -> None:
    from which_peers import megatron_skip, olmo_global_indices, step_log

    import shufflepoint

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()
    check_state_at()
    legs = [(0, WORLD, BATCH), (RESIZE_AT, RESIZED_WORLD, RESIZED_BATCH)]
    array_state = state_at(shufflepoint.DataLoader(range(ARRAY_N), BATCH, seed=7, world_size=WORLD, rank=0),
                           SAVED_AT, legs)
    report: dict[str, Any] = {"machine": f"{platform.system().lower()}, {os.cpu_count()} CPUs",
                              "load_average_before": load, "state_bytes": len(json.dumps(array_state))}
    report["array"] = cold("array", array_state, None, args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        rng = np.random.default_rng(0)
        lengths = np.maximum(1, rng.lognormal(np.log(TOKENS / DOCUMENTS) - 0.5, 1.0, DOCUMENTS)).astype(np.int64)
        lengths = (lengths * (TOKENS / lengths.sum())).astype(np.int64) + 1  # 1e12 tokens, give or take rounding
        counts = os.path.join(folder, "tokens.npy")
        from shufflepoint._shards.counting import token_counts

        np.save(counts, lengths.astype(np.int32))  # counts kept on disk (a list-like dataset has no per-shard file)
        keep = token_counts.count_all
        token_counts.count_all = lambda *a, **k: np.load(counts, mmap_mode="r")
        try:
            packed = shufflepoint.Packed(LongDocuments(DOCUMENTS), SEQ_LEN, progress=False)
            packed_state = state_at(shufflepoint.DataLoader(packed, BATCH, seed=7, world_size=WORLD, rank=0),
                                    SAVED_AT, [(0, WORLD, BATCH)])
        finally:
            token_counts.count_all = keep
        report["packed"] = cold("packed", packed_state, counts, args.repeats)
        report["packed"].update(tokens=int(lengths.sum()), documents=DOCUMENTS, rows=len(packed),
                                counts_bytes=os.path.getsize(counts))
    report["bytes_written_1000_steps"] = bytes_written_while_training()
    report["olmo"] = olmo_global_indices()
    report["megatron"] = megatron_skip()
    report["step_log"] = step_log()
    report["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "which.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "which.md").write_text(render(report))
    print(render(report))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def render(r: dict[str, Any]) -> str:
    a, p, o, m, log = r["array"], r["packed"], r["olmo"], r["megatron"], r["step_log"]
    load = ", ".join(f"{x:.2f}" for x in r["load_average_before"])
    lines = [
        "# which: the samples of step 1e7, from the checkpoint alone (issue 26)",
        "",
        f"Written by `benchmarks/which.py` (`make bench-which`), {r['machine']}, load average {load} before "
        f"(shared machine), fresh processes, median of {a['repeats']}.",
        "",
        "| corpus | dataset built | loader built + state loaded | `which(1e7)` | built + loaded + which | "
        "`locate` of rank 0's batch | imports | whole process |",
        "|---|---|---|---|---|---|---|---|",
        f"| 1e9 samples (synthetic index), 8 x 128 then 16 x 64 ranks x batch | {_ms(a['dataset_s'])} | "
        f"{_ms(a['build_and_load_s'])} | {_ms(a['which_s'])} | **{_ms(a['build_and_load_s'] + a['which_s'])}** | - | "
        f"{_ms(a['import_s'])} | {a['process_s']:.2f} s |",
        f"| Packed, {p['tokens']:.3g} tokens, {p['documents']:.0e} documents, seq_len {SEQ_LEN}, 8 x 128 | "
        f"{_ms(p['dataset_s'])} (maps {p['counts_bytes'] / 1e6:.0f} MB of kept counts) | "
        f"{_ms(p['build_and_load_s'])} | {_ms(p['which_s'])} | **{_ms(p['build_and_load_s'] + p['which_s'])}** | "
        f"{_ms(p['locate_s'])} (step 1e7 + 1: {_ms(p['locate_warm_s'])}) | {_ms(p['import_s'])} | "
        f"{p['process_s']:.2f} s |",
        "",
        f"`which` alone, asked again in the same process: {_ms(a['which_warm_s'])} (array), "
        f"{_ms(p['which_warm_s'])} (Packed). The Packed loader's construction memory-maps the corpus's kept token "
        "counts and their prefix sums and reads their digest (no pass over the documents), and the first "
        "`locate` builds the epoch's O(blocks) table and one block of documents (the table is then kept).",
        "",
        f"Bytes written for this during training: **{r['bytes_written_1000_steps']} B** over 1,000 steps "
        f"(`/proc/self/io` wchar); the state it answers from is {r['state_bytes']} B, written at each checkpoint "
        "anyway.",
        "",
        "| peer | how it answers | cost | how |",
        "|---|---|---|---|",
        f"| OLMo-core `global_indices` | an O(N) uint32 index per epoch, written to disk, read by its inspection "
        f"script | {o['target_bytes'] / 1e9:.1f} GB per epoch at 1e9; {o['target_build_s']:.0f} s to build and write | "
        f"bytes computed; time measured at {o['measured_n']:.0e} ({o['build_s']:.1f} s shuffle + "
        f"{o['write_s']:.1f} s write), x10 |",
        f"| Megatron-LM `--iterations-to-skip` | a replay: each skipped iteration reads its batch | "
        f"{m['skip_s']:.0f} s to skip 1e5 iterations (data alone) | measured {_ms(m['per_iteration_s'])} per iteration "
        f"per rank ({m['per_rank_batch']} windows of {m['seq_len'] + 1} tokens, memmap, default collate), x1e5 |",
        f"| a per-step log | ids of every step, global batch 1,024 | {log['target_json_bytes'] / 1e9:.1f} GB (JSON) / "
        f"{log['target_int64_bytes'] / 1e9:.1f} GB (int64) per 1e6 steps | measured over 1,000 steps, x1,000 |",
        "",
        f"Load average after: {', '.join(f'{x:.2f}' for x in r['load_average_after'])}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], sys.argv[4] or None)))
    else:
        main()

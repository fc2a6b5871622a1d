"""Locality of a corpus under the live loader (issue 43, open item d; make bench-live-locality).

A JSONL ``Shards`` corpus of SHARDS small shards (the ``blocks`` order, the ``spans`` deal) is read for one epoch by
3 replica groups of 1 rank, batch 4, with a simulated Manager (tests/loading/test_live.py's ``Cluster``): a third of
the epoch with all 3 groups, a third with group 1 lost, the rest with it back (restarted, healed from a peer). The
same corpus read by a fixed world of 3 ranks (``shufflepoint.DataLoader``, spans) gives each rank its *own
stretch*: the shards it reads. Per group and phase: the shards it touched, and the share of its reads inside the
stretch the fixed-world rank of the same number reads. Two ways to read the lots, side by side:

- ``in order`` (0.6.0): each step's lots are the next ones of the epoch's stream, dealt by stride among the
  participants (so every group reads a part of every block);
- ``stretches``: each participant reads a whole lot of its own stretch (``membership.stretch_lot``), the order laid
  along the stretches.

Results: benchmarks/results/live_locality.md and .json.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "tests" / "loading")]

from test_live import Cluster  # noqa: E402

import shufflepoint  # noqa: E402
from corpus_files import jsonl_corpus  # noqa: E402

SHARDS, GROUPS, BATCH = 60, 3, 4
RESULTS = ROOT / "benchmarks" / "results"


class CorpusCluster(Cluster):
    """``Cluster`` over a corpus instead of ``range(n)``; ``stretches=False``: lots read in order, as 0.6.0 did."""

    def __init__(self, corpus: Any, stretches: bool) -> None:
        self.dataset, self.groups, self.group_world, self.sizes = corpus, GROUPS, 1, {"batch_size": BATCH}
        self.options, self.ranks, self.trained, self.stretches = {}, {}, [], stretches
        for group in range(GROUPS):
            self.start(group)

    def start(self, group: int) -> None:
        super().start(group)
        if not self.stretches:
            for loader, _ in self.ranks[group]:
                loader._stretches = 0  # private: 0.6.0's way, before the first step (a healing group takes the peer's)


def epoch(corpus: Any, stretches: bool) -> dict[str, dict[int, list[int]]]:
    """The indices each group read, per phase; checked: every row once."""
    cluster = CorpusCluster(corpus, stretches)
    a_third = len(corpus) // (GROUPS * BATCH) // 3
    read: dict[str, dict[int, list[int]]] = {}

    def step(name: str, alive: list[int], healing: list[int] = []) -> None:  # noqa: B006
        cluster.step(alive, healing, True)
        for group in alive:
            read.setdefault(name, {}).setdefault(group, []).extend(cluster.ranks[group][0][0].last_indices)

    for _ in range(a_third):
        step("all 3", [0, 1, 2])
    for _ in range(a_third):
        step("group 1 lost", [0, 2])
    cluster.start(1)
    step("group 1 back", [0, 1, 2], [1])
    while sum(len(b) for b in cluster.trained) < len(corpus):
        step("group 1 back", [0, 1, 2])
    trained = [i for b in cluster.trained for i in b]
    assert sorted(trained) == list(range(len(corpus))), "every row once"
    return read


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        jsonl_corpus(folder + "/corpus", SHARDS, rows=(16, 24))
        corpus = shufflepoint.Shards(folder + "/corpus/*.jsonl", cache_dir=folder + "/cache",
                                     transform=lambda row: row["id"])
        own = []
        for rank in range(GROUPS):
            loader = shufflepoint.DataLoader(corpus, batch_size=BATCH, world_size=GROUPS, rank=rank, seed=7)
            own.append({corpus.shard_of(int(i))[0] for batch in loader for i in batch})
        result: dict[str, Any] = {"shards": SHARDS, "rows": len(corpus), "own_stretch_shards": [len(s) for s in own]}
        for mode, stretches in (("in order", False), ("stretches", True)):
            result[mode] = {
                name: {group: {"reads": len(ids), "shards": len({corpus.shard_of(i)[0] for i in ids}),
                               "in_own_stretch": round(sum(corpus.shard_of(i)[0] in own[group] for i in ids)
                                                       / len(ids), 3)}
                       for group, ids in sorted(groups.items())}
                for name, groups in epoch(corpus, stretches).items()}
    print(json.dumps(result, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "live_locality.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Locality of a corpus under the live loader (`make bench-live-locality`)", "",
             f"{SHARDS} JSONL shards, {result['rows']:,} rows, 3 replica groups x 1 rank, batch {BATCH}, one epoch: a "
             "third with all 3 groups, a third with group 1 lost, the rest with it back (healed from a peer). A fixed "
             f"world of 3 ranks reads {', '.join(map(str, result['own_stretch_shards']))} shards each (its *own "
             "stretch*). Per group: shards touched in the phase / share of its reads inside its own stretch. Every "
             "row read once in both.", "",
             "| phase | group | in order (0.6.0) | stretches |", "|---|---|---|---|"]
    for name, groups in result["stretches"].items():
        for group, found in groups.items():
            before = result["in order"][name][group]
            lines.append(f"| {name} | {group} | {before['shards']} / {before['in_own_stretch']:.2f} | "
                         f"{found['shards']} / {found['in_own_stretch']:.2f} |")
    (RESULTS / "live_locality.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

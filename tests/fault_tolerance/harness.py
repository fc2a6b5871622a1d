"""Runs of tests/fault_tolerance/worker.py under a real torchft Lighthouse (each replica group its own processes, Gloo
on 127.0.0.1), failures injected by signal, and the verdict: the ids trained in committed steps."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Run:
    """A Lighthouse and ``groups`` replica groups of ``group_world`` processes each, writing into ``out``."""

    out: pathlib.Path
    groups: int
    group_world: int = 1
    worker_args: list[str] = field(default_factory=list)
    worker: pathlib.Path = HERE / "worker.py"

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.lighthouse = subprocess.Popen(
            [str(BIN / "torchft_lighthouse"), "--min_replicas", "1", "--quorum_tick_ms", "100",
             "--join_timeout_ms", "10000", "--bind", f"127.0.0.1:{port}"],
            stdout=open(self.out / "lighthouse.log", "a"), stderr=subprocess.STDOUT)
        self.env = {**os.environ, "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{port}", "GLOO_SOCKET_IFNAME": "lo",
                    "PYTHONUNBUFFERED": "1"}
        self.processes: dict[int, list[subprocess.Popen[bytes]]] = {}

    def start(self, group: int, *extra: str) -> None:
        """Start (or restart) ``group``: its processes, a store port of its own."""
        port = free_port()
        self.processes[group] = [subprocess.Popen(
            ["nice", "-n", "5", sys.executable, str(self.worker), "--group", str(group), "--groups", str(self.groups),
             "--group-rank", str(rank), "--group-world", str(self.group_world), "--store-port", str(port),
             "--out", str(self.out), *self.worker_args, *extra],
            env=self.env, stdout=open(self.out / f"log-{group}-{rank}.txt", "a"), stderr=subprocess.STDOUT)
            for rank in range(self.group_world)]

    def start_all(self, *extra: str) -> None:
        """Every group, the first step taken once all of them are ready (so the first quorum holds them all)."""
        for group in range(self.groups):
            self.start(group, "--wait-for", str(self.groups * self.group_world), *extra)

    def restart(self, group: int) -> None:
        """Start ``group`` again; once its processes are up, the survivors (held by ``--hold-at``) go on."""
        for rank in range(self.group_world):
            (self.out / "ready" / f"{group}-{rank}").unlink(missing_ok=True)
        (self.out / "go").unlink(missing_ok=True)
        self.start(group)
        self.wait_until(lambda: all((self.out / "ready" / f"{group}-{rank}").exists()
                                    for rank in range(self.group_world)))
        (self.out / "go").touch()

    def kill(self, group: int) -> None:
        for process in self.processes[group]:
            process.send_signal(signal.SIGKILL)
            process.wait()

    def committed_steps(self, group: int) -> int:
        """The steps ``group``'s rank 0 has committed, from its records."""
        path = self.out / f"records-{group}-0.jsonl"
        if not path.exists():
            return 0
        steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return sum(1 for record in steps if record.get("committed"))

    def wait_until(self, predicate: Any, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while not predicate():
            if time.time() > deadline:
                raise TimeoutError(f"waited {timeout} s; logs in {self.out}")
            time.sleep(0.05)

    def finish(self, timeout: float = 180) -> None:
        """Wait for every live process to end; then end the Lighthouse."""
        deadline = time.time() + timeout
        try:
            for processes in self.processes.values():
                for process in processes:
                    left = deadline - time.time()
                    if process.poll() is None:
                        process.wait(timeout=max(left, 1))
        finally:
            for processes in self.processes.values():
                for process in processes:
                    if process.poll() is None:
                        process.kill()
            self.lighthouse.kill()
            self.lighthouse.wait()


def records(out: pathlib.Path) -> list[dict[str, Any]]:
    """Every step each rank drew, with its group, group rank and whether it committed there (None: the process
    died before should_commit answered)."""
    found = []
    for path in sorted(out.glob("records-*.jsonl")):
        group, rank = (int(v) for v in path.stem.split("-")[1:])
        draw: dict[str, Any] | None = None
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if record["kind"] == "draw":
                if draw is not None:
                    found.append(draw)
                draw = {**record, "group": group, "group_rank": rank, "committed": None, "participating": None}
            elif draw is not None:
                found.append({**draw, "committed": record["committed"], "participating": record["participating"]})
                draw = None
        if draw is not None:
            found.append(draw)
    return found


def global_batches(found: list[dict[str, Any]], group_world: int, below: int | None = None) -> dict[int, list[int]]:
    """Each committed step's global batch, in the order the deal defines: the shares the quorum that committed it dealt
    (each rank's last draw at that step in that quorum, also a rank killed before it answered), interleaved by global
    rank. A commit means the allreduce had every participant's gradient."""
    batches: dict[int, list[int]] = {}
    for step in sorted({r["step"] for r in found if r["committed"]}):
        if below is not None and step >= below:
            continue
        quorum = next(r["quorum"] for r in found if r["step"] == step and r["committed"])
        shares: dict[int, list[int]] = {}
        participants = 0
        for r in found:  # in file order: a later attempt at the same step replaces an earlier one
            if r["step"] == step and r["quorum"] == quorum and r["rank"] is not None:
                shares[r["rank"] * group_world + r["group_rank"]] = r["ids"]
                participants = r["participants"]
        world = participants * group_world
        assert sorted(shares) == list(range(world)), f"step {step}: shares of ranks {sorted(shares)} of {world}"
        merged = [0] * sum(len(s) for s in shares.values())
        for rank, share in shares.items():
            merged[rank::world] = share
        batches[step] = merged
    return batches


def epoch_order(n: int, epoch: int = 0) -> list[int]:
    import shufflepoint

    loader = shufflepoint.DataLoader(list(range(n)), batch_size=n, seed=0, world_size=1, rank=0)
    loader.set_epoch(epoch)
    return [int(i) for i in next(iter(loader))]


def verdict(batches: dict[int, list[int]], n: int) -> dict[str, int]:
    """Steps, distinct ids, ids trained twice or more, ids never trained; and whether the committed steps read the
    epoch's order front to back (``in_order`` 1 or 0)."""
    trained = [i for step in sorted(batches) for i in batches[step]]
    counts: dict[int, int] = {}
    for i in trained:
        counts[i] = counts.get(i, 0) + 1
    return {"steps": len(batches), "distinct": len(counts), "twice": sum(1 for c in counts.values() if c > 1),
            "never": n - len(counts), "in_order": int(trained == epoch_order(n)),
            "consecutive": int(sorted(batches) == list(range(len(batches))))}

"""Many nodes, simulated the way torchrun runs them: one ``torch.distributed.run`` agent per node.

Each "node" is its own agent on 127.0.0.1 with its own shard cache folder, shared by its local
ranks (``LOCAL_RANK`` != ``RANK`` on the second node). The shards live in the local S3 server, so
the cache is exercised as on a cluster. Elastic jobs meet in a c10d rendezvous (``--nnodes=1:2``: the
first round completes as soon as both nodes are in, instead of waiting out ``last_call`` for a third);
the fixed-topology job uses torchrun's static rendezvous with ``--node-rank``. Judged by sample ids
from the job's committed log (tests/distributed/workers/multinode_worker.py):

- a node is SIGKILLed (its agent and workers) mid-epoch: the survivor's agent restarts, the job
  re-forms with fewer nodes from the last checkpoint, and every sample is trained once;
- a node joins a running job: the agents re-form with more nodes, every sample once;
- the whole job is killed and started again on the same topology: exactly the uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

from shufflepoint._tools.launch import kill_tree, worker_env

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_corpus  # noqa: E402
from s3_server import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(900)
WORKER = os.path.join(os.path.dirname(__file__), "workers", "multinode_worker.py")
BATCH, SEED, EPOCHS, EVERY, PAUSE = 4, 7, 2, 3, 17  # ~13 steps an epoch at 3 ranks: the pause is mid-epoch 1


@pytest.fixture(scope="module")
def corpus(s3_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("multinode-corpus"))
    bucket = "nodes-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    ids = jsonl_corpus(out, 80, rows=(1, 3))
    s3_server.upload(bucket, out, prefix="web/")
    return {"sources": f"s3://{bucket}/web/part-*", "storage_options": s3_server.storage_options, "ids": ids}


class Job:
    """The agents of one simulated job; every process they started is killed at the end."""

    def __init__(self, out: str, corpus: dict, **spec) -> None:
        self.out, self.agents, self.logs = out, {}, {}
        os.makedirs(out, exist_ok=True)
        self.spec = {"sources": corpus["sources"], "storage_options": corpus["storage_options"], "out": out,
                     "checkpoint": os.path.join(out, "checkpoint.pt"), "batch_size": BATCH, "seed": SEED,
                     "epochs": EPOCHS, "shuffle_block": 24, "checkpoint_every": EVERY, **spec}

    def start(self, node: str, nproc: int, launcher: list[str]) -> None:
        """One node: a torchrun agent with ``nproc`` workers and the node's own cache folder."""
        log = open(os.path.join(self.out, f"agent-{node}-{len(self.logs)}.log"), "w")
        self.logs[node] = log.name
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--monitor-interval=0.1",
               *launcher, WORKER, json.dumps(self.spec)]
        # A fresh worker store each rendezvous round (the README's "Many nodes" says why).
        cache = os.path.join(os.path.dirname(self.out), f"cache-{node}")
        env = worker_env({"LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "SP_NODE": node,
                          "SP_CACHE": cache})
        self.agents[node] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)

    def kill(self, node: str) -> None:
        """The node fails: its agent and every worker it started, SIGKILLed at once."""
        agent = self.agents.pop(node)
        kill_tree(agent.pid)
        agent.wait()

    def wait_for(self, what: str, done, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            failed = {n: a.returncode for n, a in self.agents.items() if a.poll() not in (None, 0)}
            if failed or time.monotonic() > deadline:
                pytest.fail(f"waiting for {what}: {'agents failed ' + str(failed) if failed else 'timed out'}\n"
                            + self.tails())
            time.sleep(0.1)

    def paused(self, world: int) -> None:
        self.wait_for(f"{world} ranks at step {PAUSE}",
                      lambda: all(os.path.exists(os.path.join(self.out, f"paused.{r}")) for r in range(world)))

    def finish(self, timeout: float = 300) -> dict:
        self.wait_for("the job to finish", lambda: all(a.poll() is not None for a in self.agents.values()), timeout)
        codes = {n: a.returncode for n, a in self.agents.items()}
        assert set(codes.values()) == {0}, f"agents exited with {codes}\n{self.tails()}"
        with open(os.path.join(self.out, "final.json")) as f:
            return json.load(f)

    def procs(self) -> list[dict]:
        folder = os.path.join(self.out, "procs")
        return [json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))]

    def tails(self) -> str:
        return "\n".join(f"--- {node}:\n" + open(path).read()[-3000:] for node, path in self.logs.items())

    def close(self) -> None:
        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                kill_tree(agent.pid)
                agent.wait(timeout=10)


def elastic(nnodes: str, port: int, last_call: float) -> list[str]:
    return [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id=job-{port}", f"--rdzv-conf=last_call_timeout={last_call},join_timeout=120",
            "--max-restarts=3"]


def static(node_rank: int, port: int, nnodes: int = 2) -> list[str]:
    return [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--master-addr=127.0.0.1", f"--master-port={port}"]


def check_every_sample_once(final: dict, ids: list[int]) -> None:
    """Each epoch of the committed log holds every sample of the corpus, repeated only as the tail
    padding of the layout that finished it (fewer than its world size)."""
    for epoch in range(EPOCHS):
        steps = [s for s in final["committed"] if s["epoch"] == epoch]
        seen = Counter(i for s in steps for batch in s["batches"] for i in batch)
        assert set(seen) == set(ids), f"epoch {epoch}: {len(set(ids) - set(seen))} samples never trained"
        assert sum(seen.values()) - len(ids) < steps[-1]["world"], f"epoch {epoch}: samples trained twice"
    assert [s["step"] for s in final["committed"]] == list(range(1, len(final["committed"]) + 1))


def test_a_node_killed_mid_epoch_re_forms_with_fewer_nodes_and_trains_every_sample_once(tmp_path, corpus, jobs):
    job = Job(str(tmp_path / "job"), corpus, pause_at=PAUSE)
    jobs.append(job)
    port = free_port()
    # a hosts the rendezvous store; b must join within a's last call (8 s), else a trains alone first
    job.start("a", 2, elastic("1:2", port, last_call=8))
    time.sleep(1)
    job.start("b", 1, elastic("1:2", port, last_call=8))
    job.paused(3)  # both nodes in one world, past the checkpoint of step 15
    job.kill("b")
    open(os.path.join(job.out, "release"), "w").close()  # a's ranks go on, and fail at the next collective
    final = job.finish()
    check_every_sample_once(final, corpus["ids"])
    worlds = [s["world"] for s in final["committed"]]
    assert worlds == [3] * (PAUSE - PAUSE % EVERY) + [2] * (len(worlds) - PAUSE + PAUSE % EVERY)
    resumed = [p for p in job.procs() if not p["first_generation"]]
    assert {(p["node"], p["restart_count"], p["loaded_step"], p["world"]) for p in resumed} == {("a", 1, 15, 2)}


def test_a_node_joining_a_running_job_re_forms_with_more_nodes_and_trains_every_sample_once(
        tmp_path, corpus, jobs):
    job = Job(str(tmp_path / "job"), corpus, pause_at=PAUSE)
    jobs.append(job)
    port = free_port()
    job.start("a", 2, elastic("1:2", port, last_call=1))
    job.paused(2)  # a alone, mid-epoch 1
    job.start("b", 1, elastic("1:2", port, last_call=1))  # a's agent sees a node waiting and re-forms
    final = job.finish()
    check_every_sample_once(final, corpus["ids"])
    worlds = [s["world"] for s in final["committed"]]
    assert worlds == [2] * (PAUSE - PAUSE % EVERY) + [3] * (len(worlds) - PAUSE + PAUSE % EVERY)
    resumed = {(p["node"], p["loaded_step"], p["world"]) for p in job.procs() if not p["first_generation"]}
    assert resumed == {("a", 15, 3), ("b", 15, 3)}


def test_the_whole_job_restarted_on_the_same_nodes_is_exact_and_each_node_fetches_each_shard_once(
        tmp_path, corpus, jobs, s3_server):
    s3_server.reset()
    reference = Job(str(tmp_path / "reference"), corpus)
    jobs.append(reference)
    port = free_port()
    reference.start("a", 2, static(0, port))
    reference.start("b", 1, static(1, port))
    whole = reference.finish()
    gets = Counter(path for method, path, _ in s3_server.faults.log if method == "GET" and "/part-" in path)
    assert len(gets) == 80 and set(gets.values()) == {2}, gets  # once per node: its local ranks share it
    for node in "ab":
        cached = [n for n in os.listdir(str(tmp_path / f"cache-{node}" / "shards")) if n.endswith(".shard")]
        assert len(cached) == 80
    procs = reference.procs()
    assert {(p["node"], p["group_rank"], p["local_rank"], p["rank"]) for p in procs} == {
        ("a", 0, 0, 0), ("a", 0, 1, 1), ("b", 1, 0, 2)}

    job = Job(str(tmp_path / "job"), corpus, pause_at=PAUSE)
    jobs.append(job)
    port = free_port()
    job.start("a", 2, static(0, port))
    job.start("b", 1, static(1, port))
    job.paused(3)
    job.kill("a"), job.kill("b")
    port = free_port()
    job.start("a", 2, static(0, port))  # a new job, new processes, the same topology
    job.start("b", 1, static(1, port))
    final = job.finish()
    assert [s["batches"] for s in final["committed"]] == [s["batches"] for s in whole["committed"]]
    assert {p["loaded_step"] for p in job.procs() if not p["first_generation"]} == {15}

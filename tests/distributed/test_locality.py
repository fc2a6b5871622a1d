"""Locality on many nodes: under the corpus's ``spans`` deal each node fetches its own share of the
shards, keeps it across epochs, and a job resized inside an epoch, 2x2 -> 3x1 -> 2x2 nodes, and
killed at a random step, still trains every sample of each epoch once.

Nodes are simulated as in ``test_multinode.py``: one torchrun agent each, with its own cache folder;
the shards are token files in the local S3 server (indexed from their sizes, so every GET the
proxy counts is a read of a shard).
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
import uuid
from collections import Counter

import pytest
from test_multinode import Job, check_every_sample_once, static

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import token_corpus  # noqa: E402
from s3_server import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(900)
SHARDS, SEQ_LEN = 60, 4


@pytest.fixture(scope="module")
def tokens(s3_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("locality-corpus"))
    bucket = "locality-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    ids = token_corpus(out, SHARDS, seq_len=SEQ_LEN)
    s3_server.upload(bucket, out, prefix="tok/")
    files = sorted(os.path.join(out, n) for n in os.listdir(out) if n.startswith("part-"))
    return {"sources": f"s3://{bucket}/tok/part-*.bin", "storage_options": s3_server.storage_options, "ids": ids,
            "files": files}


def shard_gets(s3_server) -> Counter:
    return Counter(path for method, path, _ in s3_server.faults.log if method == "GET" and "/part-" in path)


def shard_bytes(s3_server, sizes: dict[str, int]) -> Counter:
    """GET bytes per shard, from the Range headers (a whole GET: the shard's size)."""
    found: Counter = Counter()
    for method, path, header in s3_server.faults.log:
        if method == "GET" and "/part-" in path:
            ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", header)
            name = path.split("?")[0].rsplit("/", 1)[-1]
            found[name] += int(ranged[2]) - int(ranged[1]) + 1 if ranged else sizes[name]
    return found


def cached(tmp_path, node: str) -> set[str]:
    """The shards a node holds: whole (``.shard``) or the ranges it read (``.part``, ranged reads)."""
    folder = tmp_path / f"cache-{node}" / "shards"
    return {n.rsplit(".", 1)[0] for n in os.listdir(folder) if n.endswith((".shard", ".part"))} \
        if folder.exists() else set()


def start(job: Job, nodes: list[tuple[str, int]]) -> None:
    port = free_port()
    for rank, (node, nproc) in enumerate(nodes):
        job.start(node, nproc, static(rank, port, nnodes=len(nodes)))


def test_each_node_fetches_its_share_once_for_two_epochs(tmp_path, tokens, jobs, s3_server):
    s3_server.reset()
    job = Job(str(tmp_path / "job"), tokens, shards={"seq_len": SEQ_LEN, "dtype": "uint16"}, shuffle_block=12)
    jobs.append(job)
    start(job, [("a", 2), ("b", 2)])
    final = job.finish()
    check_every_sample_once(final, tokens["ids"])
    gets = shard_gets(s3_server)
    # Strided, each node fetched every shard (2x the corpus); spans: each shard's bytes once, but the
    # one a node edge splits (whole downloads: that shard twice; by range: the windows' shared tokens).
    sizes = {os.path.basename(p): os.path.getsize(p) for p in tokens["files"]}
    got = shard_bytes(s3_server, sizes)
    assert len(gets) == SHARDS and sum(got.values()) <= sum(sizes.values()) + max(sizes.values()), (got, sizes)
    a, b = cached(tmp_path, "a"), cached(tmp_path, "b")
    assert len(a | b) == SHARDS and len(a & b) <= 1
    assert abs(len(a) - len(b)) <= SHARDS // 4  # about half each (shards hold 2-6 windows)


def test_resized_inside_an_epoch_and_killed_at_a_random_step_trains_every_sample_once(
        tmp_path, tokens, jobs, s3_server):
    """2x2 nodes, then 3x1 from its checkpoint, then 2x2 again from that one, all inside epoch 0 (new
    processes each time); the second 2x2 job is SIGKILLed on every node at a random moment after its
    first checkpoint, and restarted: every epoch once. (The resize back to 2x2 is the killed job itself:
    a separate 2x2 phase paused at a fixed step before it proved nothing more, at a job start's cost.)"""
    spec = {"shards": {"seq_len": SEQ_LEN, "dtype": "uint16"}, "shuffle_block": 12, "batch_size": 2,
            "checkpoint": str(tmp_path / "checkpoint.pt")}
    phases = [([("a", 2), ("b", 2)], 3), ([("a", 1), ("b", 1), ("c", 1)], 9)]
    worlds_at_pause = []
    for number, (nodes, pause_at) in enumerate(phases):
        job = Job(str(tmp_path / f"phase{number}"), tokens, pause_at=pause_at, **spec)
        jobs.append(job)
        start(job, nodes)
        world = sum(nproc for _, nproc in nodes)
        job.paused(world)
        worlds_at_pause.append(world)
        for node, _ in nodes:
            job.kill(node)
    killed = Job(str(tmp_path / "killed"), tokens, slow_steps=0.05, **spec)
    jobs.append(killed)
    start(killed, [("a", 2), ("b", 2)])
    checkpoint = spec["checkpoint"]
    stamp = os.path.getmtime(checkpoint)
    killed.wait_for("a new checkpoint", lambda: os.path.getmtime(checkpoint) != stamp)
    time.sleep(random.Random().uniform(0.0, 1.5))
    killed.kill("a"), killed.kill("b")
    last = Job(str(tmp_path / "last"), tokens, **spec)
    jobs.append(last)
    start(last, [("a", 2), ("b", 2)])
    final = last.finish()
    check_every_sample_once(final, tokens["ids"])
    steps = final["committed"]
    epoch0_worlds = [s["world"] for s in steps if s["epoch"] == 0]
    assert 3 in epoch0_worlds and epoch0_worlds[0] == 4 and epoch0_worlds[-1] == 4, epoch0_worlds

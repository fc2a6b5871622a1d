"""The resume contract on a sharded corpus, in real, fresh processes: 1,000+ shards on disk, and 250 in
the local S3 server (moto over HTTP, read through s3fs) while its proxy answers 500s and drops
connections (each fault is retried, none becomes a gap).

2 and 3 ranks, ``num_workers`` 0 and 2, SIGKILL, elastic 2 -> 3 and 3 -> 2, and a mixture resumed
across an epoch boundary, on disk and in S3 alike. Exactly-once is checked by sample ids: every row
carries its own id.

The disk and S3 scenarios share five launches (a launch costs seconds of imports on a 2-core CI
machine): the scenarios saved on 2 ranks ride in the launch that ends with its corpus's SIGKILL
scenario, one such launch per corpus, then one launch saves on 3 ranks and one resumes on each world
size. The S3 corpus has 250 shards, not 1,000: every shard is a GET through the proxy and moto on its
first read (that module alone was 50 s of ``make test``), and nothing here depends on the count.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_corpus, parquet_corpus  # noqa: E402

# A launch takes 5-30 s on a quiet 2-core machine (several minutes at a load of 20); a hung one fails
# after LAUNCH_TIMEOUT with every process's stack (py-spy), inside the module's own limit (five
# launches), so a hang is diagnosed instead of cut off.
LAUNCH_TIMEOUT = 240
pytestmark = pytest.mark.timeout(1500)
WORKER = os.path.join(os.path.dirname(__file__), "workers", "shards_worker.py")
SHARDS, S3_SHARDS = 1000, 250


def corpora(root):
    web = os.path.join(root, "web")
    books = os.path.join(root, "books")
    web_ids = jsonl_corpus(web, SHARDS, rows=(1, 3), gz_every=10)
    books_ids = parquet_corpus(books, 120, first_id=10**6)
    cache = os.path.join(root, "cache")
    disk = {"kind": "shards", "sources": os.path.join(web, "part-*"), "cache_dir": cache}
    mixture = {"kind": "mixture", "samples_per_epoch": 1200,
               "parts": [[disk, 0.75], [{"kind": "shards", "sources": os.path.join(books, "*.parquet"),
                                         "columns": ["id"], "cache_dir": cache}, 0.25]]}
    return disk, mixture, web_ids, books_ids


def s3_corpora(root, s3_server):
    """The S3 corpus (~500 rows in 250 shards) and a mixture of it with 40 Parquet shards, in one bucket."""
    bucket = "shards-" + uuid.uuid4().hex[:8]
    ids = jsonl_corpus(os.path.join(root, "s3-local"), S3_SHARDS, rows=(1, 3), gz_every=10)
    s3_server.upload(bucket, os.path.join(root, "s3-local"), prefix="web/")
    parquet_corpus(os.path.join(root, "s3-books"), 40, first_id=10**6)
    s3_server.upload(bucket, os.path.join(root, "s3-books"), prefix="books/")
    remote = {"kind": "shards", "storage_options": s3_server.storage_options,
              "cache_dir": os.path.join(root, "node-cache"), "retries": 8}
    corpus = dict(remote, sources=f"s3://{bucket}/web/part-*")
    mixture = {"kind": "mixture", "samples_per_epoch": 400,
               "parts": [[corpus, 0.75],
                         [dict(remote, sources=f"s3://{bucket}/books/*.parquet", columns=["id"]), 0.25]]}
    return corpus, mixture, ids


def scenario(name, corpus, save_at, **kwargs):
    return {"name": name, "corpus": corpus, "batch_size": 8, "seed": 17, "epochs": 2, "save_at": save_at,
            "shuffle_block": 64, **kwargs}


def resume(s, saved_world, **changes):
    return dict(s, source=s["name"], saved_world=saved_world, **changes)


def plan(out, s3_server):
    """Every scenario, by the launch that saves it. Disk: ~125 steps an epoch on 2 ranks, ~83 on 3 (the
    mixture: 75 on 2); S3 (seed 23): ~31 on 2, ~21 on 3 (its mixture: 25 on 2). Every save is mid-epoch."""
    disk, mixture, web_ids, books_ids = corpora(out)
    remote, remote_mixture, s3_ids = s3_corpora(out, s3_server)
    s3 = lambda *args, **kwargs: scenario(*args, **{"seed": 23, **kwargs})  # noqa: E731
    saves = {
        "disk2": [scenario("disk", disk, [1, 20]), scenario("disk_workers", disk, [0, 50], num_workers=2),
                  scenario("to_three", disk, [0, 60]),
                  scenario("mixture", mixture, [0, 70], epochs=3),
                  scenario("mixture_to_three", mixture, [0, 30], epochs=3, num_workers=2),
                  scenario("killed", disk, [0, 40], num_workers=2, kill=True)],  # last: SIGKILLed after its save
        "s3_2": [s3("s3", remote, [1, 8], num_workers=2), s3("s3_to_three", remote, [0, 12]),
                 s3("s3_mixture", remote_mixture, [0, 13], epochs=3),
                 s3("s3_killed", remote, [0, 10], num_workers=2, kill=True)],
        "three": [scenario("three", disk, [0, 30]), scenario("to_two", disk, [1, 10], num_workers=2),
                  s3("s3_three", remote, [0, 7]), s3("s3_to_two", remote, [1, 5], num_workers=2)],
    }
    return saves, {"web": web_ids, "books": books_ids, "s3": s3_ids}


@pytest.fixture(scope="module")
def runs(s3_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("shards"))
    saves, ids = plan(out, s3_server)

    def go(mode, scenarios, nproc, **kwargs):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT, **kwargs)

    for key, killed in (("disk2", "killed"), ("s3_2", "s3_killed")):
        if key == "s3_2":
            s3_server.fail_next(6)  # the index build and first reads meet 500s (fewer than retries: each is retried)
            s3_server.drop_next(10)  # and connections dropped mid-shard
        result = go("save", saves[key], 2, kill_when=os.path.join(out, f"{killed}.saved"))
        if not result.killed:
            result.check()  # a scenario before the kill failed: raises with the workers' stderr
        assert result.killed, f"the kill scenario {killed} was supposed to be SIGKILLed"
    assert s3_server.faults.injected["fail"] == 6 and s3_server.faults.injected["drop"] == 10
    go("save", saves["three"], 3).check()
    s = {s["name"]: s for scenarios in saves.values() for s in scenarios}
    go("resume", [resume(s["disk"], 2), resume(s["disk_workers"], 2), resume(s["mixture"], 2),
                  resume(s["killed"], 2, kill=False), resume(s["to_two"], 3, num_workers=0),
                  resume(s["s3"], 2), resume(s["s3_mixture"], 2), resume(s["s3_killed"], 2, kill=False),
                  resume(s["s3_to_two"], 3, num_workers=0)], 2).check()
    go("resume", [resume(s["three"], 3), resume(s["to_three"], 2, num_workers=2),
                  resume(s["mixture_to_three"], 2),
                  resume(s["s3_to_three"], 2, num_workers=2), resume(s["s3_three"], 3)], 3).check()
    return out, ids


def read(out, name, world):
    found = []
    for rank in range(world):
        with open(os.path.join(out, f"{name}.r{rank}.json")) as f:
            found.append(json.load(f))
    return found


def flat(batches):
    return [i for batch in batches for i in batch]


def check_same_world(out, name, world):
    """Every rank's resumed stream is exactly the rest of its uninterrupted one, batch for batch."""
    references, befores, resumed = (read(out, f"{name}.{kind}", world) for kind in ("ref", "before", "resumed"))
    for rank in range(world):
        done = {epoch: len(batches) for epoch, batches in befores[rank].items()}
        save_epoch = max(done, key=int)
        expected = {epoch: batches[done[epoch]:] if epoch == save_epoch else batches
                    for epoch, batches in references[rank].items() if int(epoch) >= int(save_epoch)}
        assert resumed[rank] == expected, f"{name}: rank {rank} diverged after the resume"


def check_elastic(out, name, old_world, new_world, corpus_ids=None):
    """The interrupted epoch, before and after the resume, holds every sample once, up to the tail
    padding of each layout (fewer than world_size repeats)."""
    references = read(out, f"{name}.ref", old_world)
    befores = read(out, f"{name}.before", old_world)
    resumed = read(out, f"{name}.resumed", new_world)
    save_epoch = max(befores[0], key=int)
    seen = Counter(i for r in range(old_world) for i in flat(befores[r].get(save_epoch, [])))
    seen.update(i for r in range(new_world) for i in flat(resumed[r][save_epoch]))
    expected = Counter(i for r in range(old_world) for i in flat(references[r][save_epoch]))
    assert sum((seen - expected).values()) < new_world, f"{name}: samples served twice"
    assert sum((expected - seen).values()) < old_world, f"{name}: samples lost"
    if corpus_ids is not None:
        assert set(seen) == set(corpus_ids), f"{name}: the epoch does not cover the corpus"
    later = [epoch for epoch in resumed[0] if int(epoch) > int(save_epoch)]
    for epoch in later:  # later epochs are complete epochs of the new world
        everything = Counter(i for r in range(new_world) for i in flat(resumed[r][epoch]))
        assert sum(everything.values()) - len(expected) < 2 * new_world


def test_same_world_size_resumes_exactly(runs):
    out, _ = runs
    for name, world in [("disk", 2), ("disk_workers", 2), ("three", 3), ("mixture", 2)]:
        check_same_world(out, name, world)


def test_sigkill_after_a_checkpoint_loses_and_repeats_nothing(runs):
    out, _ = runs
    check_same_world(out, "killed", 2)


def test_elastic_resumes_see_every_sample_once(runs):
    out, ids = runs
    check_elastic(out, "to_three", 2, 3, ids["web"])
    check_elastic(out, "to_two", 3, 2, ids["web"])
    check_elastic(out, "mixture_to_three", 2, 3)


def test_the_mixture_crosses_its_epoch_boundary_with_exact_shares(runs):
    out, ids = runs
    resumed = read(out, "mixture.resumed", 2)
    books = set(ids["books"])
    for epoch in ("1", "2"):
        served = [i for r in range(2) for i in flat(resumed[r][epoch])]
        assert len(served) == 1200
        assert sum(i in books for i in served) == 300  # 0.25 of 1,200, in every epoch
    web_served = Counter(i for epoch in ("0", "1", "2") for r in range(2)
                         for i in flat(read(out, "mixture.ref", 2)[r][epoch]) if i not in books)
    assert sum(web_served.values()) == 2700
    full = 2700 // len(ids["web"])  # whole passes over the web corpus: every row as often, +1 at most
    assert set(web_served) == set(ids["web"]) and set(web_served.values()) <= {full, full + 1}


def test_same_world_and_sigkill_resume_exactly_from_s3(runs):
    out, _ = runs
    for name, world in [("s3", 2), ("s3_killed", 2), ("s3_three", 3)]:
        check_same_world(out, name, world)
    check_same_world(out, "s3_mixture", 2)  # a mixture of two buckets' corpora, across its epoch boundary


def test_elastic_resume_from_s3_sees_every_sample_once(runs):
    out, ids = runs
    check_elastic(out, "s3_to_three", 2, 3, ids["s3"])
    check_elastic(out, "s3_to_two", 3, 2, ids["s3"])

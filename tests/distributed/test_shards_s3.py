"""The resume contract on 250 shards in the local S3 server (moto over HTTP, read through s3fs).

Fresh processes on 2 and 3 ranks sharing one node cache, ``num_workers`` 0 and 2, SIGKILL, elastic
2 -> 3 and 3 -> 2, and a mixture of two corpora resumed across its epoch boundary, judged by
sample ids as ``test_shards_resume.py`` judges the same corpus on disk. The proxy
answers 500s and drops connections during the run: each fault is retried, none becomes a gap.

250 shards, not the 1,000 on disk: every shard is a GET through the proxy and moto on its first read,
which made this module the slowest of ``make test`` (50 s), and nothing here depends on the count
(the listing fits one page either way; ``test_shards_resume.py`` keeps the larger corpus on disk).
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest
from test_shards_resume import LAUNCH_TIMEOUT, WORKER, check_elastic, check_same_world

from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_corpus, parquet_corpus  # noqa: E402

pytestmark = pytest.mark.timeout(1200)  # the launches time out first (LAUNCH_TIMEOUT), with stacks
SHARDS = 250


@pytest.fixture(scope="module")
def runs(s3_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("shards_s3"))
    bucket = "shards-" + uuid.uuid4().hex[:8]
    ids = jsonl_corpus(os.path.join(out, "local"), SHARDS, rows=(1, 3), gz_every=10)  # ~500 rows
    s3_server.upload(bucket, os.path.join(out, "local"), prefix="web/")
    parquet_corpus(os.path.join(out, "books"), 40, first_id=10**6)
    s3_server.upload(bucket, os.path.join(out, "books"), prefix="books/")
    remote = {"kind": "shards", "storage_options": s3_server.storage_options,
              "cache_dir": os.path.join(out, "node-cache"), "retries": 8}
    corpus = dict(remote, sources=f"s3://{bucket}/web/part-*")
    mixture = {"kind": "mixture", "samples_per_epoch": 400,
               "parts": [[corpus, 0.75],
                         [dict(remote, sources=f"s3://{bucket}/books/*.parquet", columns=["id"]), 0.25]]}

    def scenario(name, save_at, **kwargs):
        return {"name": name, "corpus": corpus, "batch_size": 8, "seed": 23, "epochs": 2, "save_at": save_at,
                "shuffle_block": 64, **kwargs}

    def go(mode, scenarios, nproc, **kwargs):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT, **kwargs)

    # ~31 steps an epoch on 2 ranks, ~21 on 3 (the mixture: 25 on 2): every save point is mid-epoch
    save = [scenario("s3", [1, 8], num_workers=2), scenario("s3_to_three", [0, 12]),
            {**scenario("s3_mixture", [0, 13]), "corpus": mixture, "epochs": 3}]
    save3 = [scenario("s3_three", [0, 7]), scenario("s3_to_two", [1, 5], num_workers=2)]
    s3_server.fail_next(6)  # the index build and first reads meet 500s (fewer than retries: each is retried)
    s3_server.drop_next(10)  # and connections dropped mid-shard
    go("save", save, 2).check()
    assert s3_server.faults.injected["fail"] == 6 and s3_server.faults.injected["drop"] == 10
    go("save", save3, 3).check()
    killed = scenario("s3_killed", [0, 10], num_workers=2, kill=True)
    assert go("save", [killed], 2, kill_when=os.path.join(out, "s3_killed.saved")).killed
    resumed = [dict(s, source=s["name"], saved_world=2) for s in (save[0], save[2], dict(killed, kill=False))]
    go("resume", [*resumed, dict(save3[1], source="s3_to_two", saved_world=3, num_workers=0)], 2).check()
    go("resume", [dict(save[1], source="s3_to_three", saved_world=2, num_workers=2),
                  dict(save3[0], source="s3_three", saved_world=3)], 3).check()
    return out, ids


def test_same_world_and_sigkill_resume_exactly_from_s3(runs):
    out, _ = runs
    check_same_world(out, "s3", 2)
    check_same_world(out, "s3_killed", 2)
    check_same_world(out, "s3_three", 3)
    check_same_world(out, "s3_mixture", 2)  # a mixture of two buckets' corpora, across its epoch boundary


def test_elastic_resume_from_s3_sees_every_sample_once(runs):
    out, ids = runs
    check_elastic(out, "s3_to_three", 2, 3, ids)
    check_elastic(out, "s3_to_two", 3, 2, ids)

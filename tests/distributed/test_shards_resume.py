"""The resume contract on a sharded corpus of 1,000+ shards on disk, in real, fresh processes.

2 and 3 ranks, ``num_workers`` 0 and 2, SIGKILL, elastic 2 -> 3 and 3 -> 2, and a mixture resumed
across an epoch boundary. Exactly-once is checked by sample ids: every row carries its own id.
The same contract over the local S3 server is in ``test_shards_s3.py``.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_corpus, parquet_corpus  # noqa: E402

# A launch takes 5-15 s here; a hung one fails after LAUNCH_TIMEOUT with every process's stack
# (py-spy), well inside the module's own limit, so a hang is diagnosed instead of cut off.
LAUNCH_TIMEOUT = 150
pytestmark = pytest.mark.timeout(1200)
WORKER = os.path.join(os.path.dirname(__file__), "workers", "shards_worker.py")
SHARDS = 1000


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


def scenario(name, corpus, save_at, **kwargs):
    return {"name": name, "corpus": corpus, "batch_size": 8, "seed": 17, "epochs": 2, "save_at": save_at,
            "shuffle_block": 64, **kwargs}


def resume(s, saved_world, **changes):
    return dict(s, source=s["name"], saved_world=saved_world, **changes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("shards"))
    disk, mixture, web_ids, books_ids = corpora(out)
    plan = {
        "save2": [scenario("disk", disk, [1, 20]), scenario("disk_workers", disk, [0, 50], num_workers=2),
                  scenario("to_three", disk, [0, 60]),
                  scenario("mixture", mixture, [0, 70], epochs=3),
                  scenario("mixture_to_three", mixture, [0, 30], epochs=3, num_workers=2)],
        "save3": [scenario("three", disk, [0, 30]), scenario("to_two", disk, [1, 10], num_workers=2)],
        "kill2": [scenario("killed", disk, [0, 40], num_workers=2, kill=True)],
    }

    def go(mode, scenarios, nproc, **kwargs):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT, **kwargs)

    go("save", plan["save2"], 2).check()
    go("save", plan["save3"], 3).check()
    killed = go("save", plan["kill2"], 2, kill_when=os.path.join(out, "killed.saved"))
    assert killed.killed, "the kill scenario was supposed to be SIGKILLed"
    s2, s3, k2 = ({s["name"]: s for s in plan[key]} for key in ("save2", "save3", "kill2"))
    go("resume", [resume(s2["disk"], 2), resume(s2["disk_workers"], 2), resume(s2["mixture"], 2),
                  resume(k2["killed"], 2, kill=False), resume(s3["to_two"], 3, num_workers=0)], 2).check()
    go("resume", [resume(s3["three"], 3), resume(s2["to_three"], 2, num_workers=2),
                  resume(s2["mixture_to_three"], 2)], 3).check()
    return out, {"web": web_ids, "books": books_ids}


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

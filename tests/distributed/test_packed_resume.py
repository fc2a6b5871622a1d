"""``Packed`` rows over a JSONL corpus on disk, in real, fresh processes: 2 ranks resume exactly,
row for row, also after a SIGKILL; 2 -> 3 ranks (with 2 workers) serve every row of the interrupted
epoch once."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest
from test_shards_resume import LAUNCH_TIMEOUT, WORKER, check_elastic, check_same_world, flat, read

from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_documents  # noqa: E402

pytestmark = pytest.mark.timeout(900)
SEQ_LEN, EOS = 16, 10**9


def scenario(name, corpus, save_at, **kwargs):
    return {"name": name, "corpus": corpus, "batch_size": 8, "seed": 23, "epochs": 2, "save_at": save_at,
            "shuffle_block": 64, **kwargs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("packed"))
    tokens = jsonl_documents(os.path.join(out, "docs"), 200)
    shards = {"kind": "shards", "sources": os.path.join(out, "docs", "part-*"), "cache_dir": os.path.join(out, "c")}
    corpus = {"kind": "packed", "source": shards, "seq_len": SEQ_LEN, "eos": EOS}
    same, elastic = scenario("packed", corpus, [1, 10]), scenario("packed_to_three", corpus, [1, 25])

    def go(mode, scenarios, nproc):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, timeout=LAUNCH_TIMEOUT).check()

    killed = scenario("packed_killed", corpus, [0, 30], num_workers=2, kill=True)
    go("save", [same, elastic], 2)
    stopped = launch([WORKER, "save", out, json.dumps([killed])], 2, timeout=LAUNCH_TIMEOUT,
                     kill_when=os.path.join(out, "packed_killed.saved"))
    assert stopped.killed, "the kill scenario was supposed to be SIGKILLed"
    go("resume", [dict(same, source="packed", saved_world=2),
                  dict(killed, source="packed_killed", saved_world=2, kill=False)], 2)
    go("resume", [dict(elastic, source="packed_to_three", saved_world=2, num_workers=2)], 3)
    return out, tokens


def test_same_world_size_resumes_row_for_row(runs):
    out, _ = runs
    check_same_world(out, "packed", 2)


def test_sigkill_after_a_checkpoint_loses_and_repeats_no_row(runs):
    out, _ = runs
    check_same_world(out, "packed_killed", 2)


def test_three_ranks_finish_the_epoch_two_started_each_row_once(runs):
    out, tokens = runs
    check_elastic(out, "packed_to_three", 2, 3)
    befores, resumed = read(out, "packed_to_three.before", 2), read(out, "packed_to_three.resumed", 3)
    rows = set(flat(befores[0]["1"]) + flat(befores[1]["1"]) + [i for r in range(3) for i in flat(resumed[r]["1"])])
    served = Counter(int(t) for row in rows for t in row.split("-") if int(t) != EOS)
    assert all(len(row.split("-")) == SEQ_LEN for row in rows)
    assert max(served.values()) == 1 and set(served) <= set(tokens)  # no token twice, none invented
    eos_count = sum(row.split("-").count(str(EOS)) for row in rows)
    assert len(rows) * SEQ_LEN == len(served) + eos_count
    assert len(tokens) - len(served) < SEQ_LEN  # the dropped tail: fewer than SEQ_LEN tokens of the epoch

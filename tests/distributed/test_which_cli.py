"""A resized run, answered afterwards by ``shufflepoint which``: 2 ranks train over a JSONL corpus and are
SIGKILLed mid-epoch, 3 new processes resume from the checkpoint and train into a later epoch; then
the CLI, pointed at the last checkpoint only, answers steps before the resize, at it and after it, and
every answer equals what each rank logged when it trained (its ids, read back from the bytes the
CLI says the sample lives at)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shufflepoint._tools import cli
from shufflepoint._tools.launch import launch, worker_env

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from corpus_files import jsonl_corpus  # noqa: E402

pytestmark = pytest.mark.timeout(600)
WORKER = os.path.join(os.path.dirname(__file__), "workers", "which_cli_worker.py")
ROWS, STOP, END = 60, 20, 45  # 2 ranks x batch 2: 15 steps an epoch; 3 ranks x 2: 10


def logged(out, world):
    """{step: {rank: ids}} from every rank's log."""
    found: dict[int, dict[int, list[int]]] = {}
    for rank in range(world):
        with open(os.path.join(out, f"log-rank{rank}.jsonl")) as f:
            for line in f:
                entry = json.loads(line)
                found.setdefault(entry["step"], {})[rank] = entry["ids"]
    return found


def test_which_answers_a_resized_run_as_it_was_trained(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus"
    ids = jsonl_corpus(str(corpus), 12, rows=(5, 5))
    assert len(ids) == ROWS
    env = {"WHICH_CORPUS": str(corpus)}
    first = tmp_path / "first"
    first.mkdir()
    launch([WORKER, str(first), "--steps", str(END), "--stop-at", str(STOP)], 2, env=env, timeout=200,
           kill_when=str(first / "stopped")).check()
    second = tmp_path / "second"
    second.mkdir()
    os.replace(first / "checkpoint.pt", second / "checkpoint.pt")
    launch([WORKER, str(second), "--steps", str(END)], 3, env=env, timeout=200).check()

    trained = {**logged(str(first), 2), **logged(str(second), 3)}
    assert sorted(trained) == list(range(END))
    assert {len(trained[s]) for s in range(STOP)} == {2} and {len(trained[s]) for s in range(STOP, END)} == {3}
    monkeypatch.setenv("WHICH_CORPUS", str(corpus))
    target = f"{WORKER}:dataset"
    for step in range(END + 5):  # past the last step: the future of the last layout
        assert cli.main(["which", str(second / "checkpoint.pt"), "--step", str(step), "--dataset", target,
                         "--json", "-"]) == 0
        answer = json.loads(capsys.readouterr().out)
        ranks = {int(r): entries for r, entries in answer["ranks"].items()}
        if step >= END:
            assert sorted(ranks) == [0, 1, 2]
            continue
        assert sorted(ranks) == sorted(trained[step]), step
        for rank, entries in ranks.items():
            read = []
            for entry in entries:
                with open(entry["url"], "rb") as f:
                    f.seek(entry["byte_offset"])
                    read.append(json.loads(f.read(entry["bytes"]))["id"])
            assert read == trained[step][rank], (step, rank)

    # and from a fresh process, as a user runs it: one step before the resize, one after
    for step, rank in ((3, 1), (STOP + 12, 2)):
        found = subprocess.run(
            [sys.executable, "-m", "shufflepoint", "which", str(second / "checkpoint.pt"), "--step", str(step),
             "--rank", str(rank), "--dataset", target, "--json", "-"],
            capture_output=True, text=True, env=worker_env(env), timeout=120, check=True)
        answer = json.loads(found.stdout)
        assert list(answer["ranks"]) == [str(rank)]
        assert [ids[e["index"]] for e in answer["ranks"][str(rank)]] == trained[step][rank]

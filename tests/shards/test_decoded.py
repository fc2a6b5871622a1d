"""Decoded Parquet row groups: one byte budget for every open file of the process, and it holds.

A group's bytes are what it holds: the Arrow table when kept, numpy arrays, and the Python str and
bytes objects of its converted columns (``sys.getsizeof``)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards.readers import parquet as parquet_reader
from shufflepoint._shards.readers._decoded import ENV, GROUPS
from shufflepoint._shards.readers._group import DecodedGroup

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS, GROUP = 60, 10


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)  # each row group its own decode unit
    for shard in range(6):
        ids = np.arange(shard * ROWS, (shard + 1) * ROWS)
        table = pa.table({"id": ids, "text": [f"{i:08d}" * 20 for i in ids]})
        pq.write_table(table, tmp_path / f"{shard}.parquet", row_group_size=GROUP)
    shards = shufflepoint.Shards(str(tmp_path / "*.parquet"), cache_dir=str(tmp_path / "c"), progress=False,
                                 max_open=6)
    group_bytes = DecodedGroup(pq.read_table(tmp_path / "0.parquet").slice(0, GROUP), pa).nbytes
    saved = GROUPS.limit
    GROUPS.set_limit(0)  # groups of files other tests left open go
    yield shards, group_bytes
    GROUPS.set_limit(saved)


def _held_as_counted() -> int:
    return sum(int(t.nbytes) for t in GROUPS._tables.values())


@pytest.mark.parametrize("groups_kept", [0, 1, 3, 7])
def test_the_budget_holds_across_every_open_file(corpus, groups_kept):
    shards, group_bytes = corpus
    GROUPS.set_limit(int(group_bytes * groups_kept + group_bytes // 2))
    rng = np.random.default_rng(groups_kept)
    for step in range(40):
        indices = rng.integers(0, len(shards), size=int(rng.integers(1, 30)))
        batch = shards.__getitems__(indices.tolist()) if step % 2 else [shards[int(i)] for i in indices]
        assert [row["id"] for row in batch] == indices.tolist()  # rows stay right at any budget
        assert [row["text"] for row in batch] == [f"{i:08d}" * 20 for i in indices.tolist()]
        assert GROUPS.held == _held_as_counted() <= GROUPS.limit
        assert len(GROUPS._tables) <= groups_kept
    assert groups_kept == 0 or len(GROUPS._tables) == groups_kept  # the budget is used, not just respected
    flat_held = sum(int(opened._flat.held.sum()) for opened in shards._opened.values())
    assert flat_held == len(GROUPS._tables)  # a file's flat columns hold exactly its kept groups


def test_groups_the_budget_lets_go_leave_the_flat_columns(corpus):
    """A batch is one index per column over a file's flat columns (``_flat``): what they hold follows
    the budget, and a file whose last group goes gives its arrays back."""
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    everything = list(range(len(shards)))
    assert [row["id"] for row in shards.__getitems__(everything)] == everything
    opened = list(shards._opened.values())
    assert all(o._flat.complete for o in opened)
    GROUPS.set_limit(0)
    assert not any(o._flat.held.any() for o in opened)
    assert all(column is None for o in opened for column in o._flat._objects)
    assert [row["text"] for row in shards.__getitems__(everything[::-7])] == \
        [f"{i:08d}" * 20 for i in everything[::-7]]


def test_a_closed_file_gives_its_groups_back(corpus):
    shards, group_bytes = corpus
    GROUPS.set_limit(100 * group_bytes)
    shards.__getitems__(list(range(len(shards))))
    assert len(GROUPS._tables) >= 36
    for opened in list(shards._opened.values()):
        opened.close()
    assert GROUPS.held == _held_as_counted() == 0


def test_the_budget_comes_from_the_environment():
    code = "from shufflepoint._shards.readers._decoded import GROUPS; print(GROUPS.limit)"
    run = lambda value: subprocess.run([sys.executable, "-c", code], env={**os.environ, ENV: value},  # noqa: E731
                                       capture_output=True, text=True)
    assert run("12345").stdout.strip() == "12345"
    assert run("").stdout.strip() == str(256 << 20)
    refused = run("12MB")
    assert refused.returncode != 0 and ENV in refused.stderr and "'12MB'" in refused.stderr
    with pytest.raises(ValueError, match="limit: found -1"):
        GROUPS.set_limit(-1)

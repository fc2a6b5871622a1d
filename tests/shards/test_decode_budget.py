"""The default block sized to the decode budget: each row group decoded about once an epoch, the
block a decision a resumed run keeps (fresh processes, other budgets), and a warning with the
numbers where the settings force re-decoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._order.blocks import DEFAULT_SHUFFLE_BLOCK
from shufflepoint._order.decode_budget import fitting_block
from shufflepoint._shards.readers import parquet as parquet_reader
from shufflepoint._shards.readers._decoded import ENV, GROUPS
from shufflepoint._shards.readers._group import DecodedGroup

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SHARDS, ROWS, GROUP, WIDTH = 8, 40, 10, 2000  # rows of ~2 KB: 80 KB a shard decoded


@given(row_bytes=st.integers(1, 2**30), limit=st.integers(0, 2**40))
def test_the_fitting_block_is_the_largest_power_of_two_that_fills_half_the_budget(row_bytes, limit):
    block = fitting_block(row_bytes, limit)
    assert 1 <= block <= DEFAULT_SHUFFLE_BLOCK and block & (block - 1) == 0
    if block == DEFAULT_SHUFFLE_BLOCK:
        assert limit // 2 // row_bytes >= DEFAULT_SHUFFLE_BLOCK
    elif block > 1:
        assert block * row_bytes <= limit // 2 < 2 * block * row_bytes
    else:
        assert limit // 2 < 2 * row_bytes  # not even two rows fit: one row a block


def _corpus(folder: str) -> str:
    rng = np.random.default_rng(0)
    for shard in range(SHARDS):
        ids = np.arange(shard * ROWS, (shard + 1) * ROWS)
        blobs = [rng.bytes(WIDTH) for _ in ids]
        pq.write_table(pa.table({"id": ids, "image": blobs}), os.path.join(folder, f"part-{shard}.parquet"),
                       row_group_size=GROUP)
    return os.path.join(folder, "*.parquet")


@pytest.fixture()
def budget():
    saved = GROUPS.limit
    yield GROUPS.set_limit
    GROUPS.set_limit(saved)


def test_the_estimate_is_what_a_decoded_group_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)
    corpus = shufflepoint.Shards(_corpus(str(tmp_path)), cache_dir=str(tmp_path / "c"), progress=False)
    held = DecodedGroup(pq.read_table(tmp_path / "part-0.parquet"), pa).nbytes / ROWS
    # An over-estimate where Parquet's overhead is large (a dictionary page tried on 40 unique 2 KB
    # values: 1.2x here); within 1% on the benchmarks' 1 KiB text and 100 KiB image rows.
    assert 0.95 * held <= corpus._access.decoded_row_bytes() <= 1.3 * held
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    np.arange(100, dtype=np.uint16).tofile(tokens / "t.bin")
    assert shufflepoint.Shards(str(tokens / "*.bin"), seq_len=4, cache_dir=str(tmp_path / "c"),
                               progress=False)._access.decoded_row_bytes() is None  # windows: nothing kept decoded


def test_the_default_block_fits_the_budget_and_reads_each_group_once(tmp_path, budget, monkeypatch):
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)
    pattern = _corpus(str(tmp_path))
    corpus = shufflepoint.Shards(pattern, cache_dir=str(tmp_path / "c"), progress=False)
    row = corpus._access.decoded_row_bytes()
    budget(int(3.5 * ROWS * row))  # holds three shards and a half decoded
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default block fits: no warning
        loader = shufflepoint.DataLoader(corpus, batch_size=8, seed=3)
    assert loader._position.orders.shuffle_block == 64 < DEFAULT_SHUFFLE_BLOCK  # 1.75 shards of rows -> 64
    ids, decoded = _epoch_decodes(loader, monkeypatch)
    assert sorted(ids) == list(range(SHARDS * ROWS))
    assert len(decoded) == len(set(decoded)) == SHARDS * ROWS // GROUP  # every row group decoded once


def _epoch_decodes(loader, monkeypatch):
    """One epoch of ``loader``: the ids served, and every (shard, unit) decoded, in order."""
    decoded = []
    real = parquet_reader.OpenParquet._decode
    monkeypatch.setattr(parquet_reader.OpenParquet, "_decode",
                        lambda self, unit: decoded.append((self._shard, tuple(unit))) or real(self, unit))
    return [int(i) for batch in loader for i in batch["id"]], decoded


def test_a_block_that_does_not_fit_is_said_with_the_numbers(tmp_path, budget):
    corpus = shufflepoint.Shards(_corpus(str(tmp_path)), cache_dir=str(tmp_path / "c"), progress=False)
    budget(int(1.5 * ROWS * corpus._access.decoded_row_bytes()))
    with pytest.warns(UserWarning, match=rf"(?s){ENV}: .* holds up to 320 rows .* decoded ~\d+x each an epoch"
                                         r".*shuffle_block=16 for a new run"):
        shufflepoint.DataLoader(corpus, batch_size=8, seed=3, shuffle_block=1000)
    budget(int(0.5 * ROWS * corpus._access.decoded_row_bytes()))  # not even a shard fits
    with pytest.warns(UserWarning, match="write shards of <= 10 rows"):
        shufflepoint.DataLoader(corpus, batch_size=8, seed=3)


_RUN = """
import json, sys, warnings
import shufflepoint
corpus = shufflepoint.Shards(sys.argv[1], cache_dir=sys.argv[2], progress=False)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    loader = shufflepoint.DataLoader(corpus, batch_size=8, seed=3)
    if sys.argv[3] == "save":  # "whole": the epoch from its start
        batches = iter(loader)
        for _ in range(5):
            next(batches)
        state = loader.state_dict()
    else:
        if sys.argv[3] == "load":
            loader.load_state_dict(json.loads(sys.argv[4]))
        state = None
    rest = [[int(i) for i in batch["id"]] for batch in loader]
print(json.dumps({"block": loader._position.orders.shuffle_block, "state": state, "rest": rest,
                  "warnings": [str(w.message) for w in seen]}))
"""


def _run(pattern: str, cache: str, limit: int, *extra: str) -> dict:
    env = {**os.environ, ENV: str(limit)}
    done = subprocess.run([sys.executable, "-c", _RUN, pattern, cache, *extra], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    found: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_resume_keeps_the_block_it_started_with_on_another_budget(tmp_path):
    pattern, cache = _corpus(str(tmp_path)), str(tmp_path / "c")
    row = shufflepoint.Shards(pattern, cache_dir=cache, progress=False)._access.decoded_row_bytes()
    big, small = 16 * ROWS * row, int(1.5 * ROWS * row)
    saved = _run(pattern, cache, big, "save")  # the default block: 320 rows fit half the budget, 256
    whole = _run(pattern, cache, big, "whole")  # never stopped: the epoch the saved run reads
    assert saved["block"] == whole["block"] == 256 and not saved["warnings"]
    assert saved["rest"] == whole["rest"][5:]
    resumed = _run(pattern, cache, small, "load", json.dumps(saved["state"]))  # its own default would be 16
    assert resumed["block"] == 256
    assert resumed["rest"] == whole["rest"][5:]  # exact: the order the run started with
    assert any("decoded ~" in w and "shuffle_block=16" in w for w in resumed["warnings"])
    fresh = _run(pattern, cache, small, "whole")
    assert fresh["block"] == 16 and fresh["rest"] != whole["rest"]  # a new run on this budget: its own block


def test_a_block_of_the_callers_own_that_differs_from_the_states_is_refused_by_name(tmp_path):
    corpus = shufflepoint.Shards(_corpus(str(tmp_path)), cache_dir=str(tmp_path / "c"), progress=False)
    saved = shufflepoint.DataLoader(corpus, batch_size=8, seed=3, shuffle_block=64)
    next(iter(saved))
    state = saved.state_dict()
    chosen = shufflepoint.DataLoader(corpus, batch_size=8, seed=3, shuffle_block=128)
    with pytest.raises(shufflepoint.StateError, match=r"'shuffle_block': found 64\n  expected: 128 .*\n.*\n"
                                                  r"  fix: build the loader with shuffle_block=64 to resume this run"):
        chosen.load_state_dict(state)
    assert chosen.state_dict()["cursor"] == 0  # nothing changed
    adopting = shufflepoint.DataLoader(corpus, batch_size=8, seed=3)  # left to the default: adopts 64
    adopting.load_state_dict(state)
    assert adopting.state_dict() == state


def test_a_batch_across_two_blocks_keeps_the_groups_it_still_needs(tmp_path, budget, monkeypatch):
    """A budget holding a block and a half: a batch that ends one block (one shard) and starts the
    next reads the old shard first, so what the new one evicts is done with: every group once."""
    monkeypatch.setattr(parquet_reader, "_UNIT_ROWS", 1)
    corpus = shufflepoint.Shards(_corpus(str(tmp_path)), cache_dir=str(tmp_path / "c"), progress=False)
    budget(int(1.6 * ROWS * corpus._access.decoded_row_bytes()))
    loader = shufflepoint.DataLoader(corpus, batch_size=12, seed=5, shuffle_block=ROWS)  # a shard a block
    ids, decoded = _epoch_decodes(loader, monkeypatch)
    assert sorted(ids) == list(range(SHARDS * ROWS))
    assert len(decoded) == len(set(decoded)) == SHARDS * ROWS // GROUP

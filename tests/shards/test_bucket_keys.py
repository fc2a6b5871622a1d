"""``DataLoader(corpus, buckets="field")``: a ``Shards`` corpus's keys read from a field once, kept in its
cache folder, and every batch one bucket of them; a sample without a usable key named."""

import json
import os

import numpy as np
import pytest

import shufflepoint
from shufflepoint._shards.counting import bucket_keys


def corpus(folder, keys):
    os.makedirs(folder, exist_ok=True)
    rows = [{"id": i, "ratio": key} for i, key in enumerate(keys)]
    for shard in range(0, len(rows), 7):
        with open(os.path.join(folder, f"part-{shard:05d}.jsonl"), "w") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows[shard:shard + 7]))
    return opened(folder)


def opened(folder):
    return shufflepoint.Shards(os.path.join(folder, "*.jsonl"), cache_dir=os.path.join(folder, "cache"),
                               progress=False)


def test_a_corpus_s_keys_are_read_once_and_every_batch_is_one_bucket(tmp_path, monkeypatch):
    keys = np.random.default_rng(1).integers(0, 3, 60).tolist()
    data = corpus(str(tmp_path / "c"), keys)
    loader = shufflepoint.DataLoader(data, 4, seed=2, buckets="ratio")
    batches = [batch["id"].tolist() for batch in loader]
    assert batches and all(len({keys[i] for i in batch}) == 1 for batch in batches)
    assert [p for p in os.listdir(tmp_path / "c" / "cache") if p.startswith("buckets-")]

    def unread(*args):
        raise AssertionError("the kept keys were read again")

    monkeypatch.setattr(bucket_keys, "read_keys", unread)
    again = shufflepoint.DataLoader(opened(str(tmp_path / "c")), 4, seed=2, buckets="ratio")
    assert [batch["id"].tolist() for batch in again] == batches
    assert again.state_dict()["buckets"] == loader.state_dict()["buckets"]


def test_a_sample_without_a_usable_key_is_named(tmp_path):
    keys = [0, 1, 2, -1, 0, 1, 2, 0]
    with pytest.raises(ValueError, match=r"buckets: sample 3: found 'ratio' = -1\n  expected: an int in \[0, 2"):
        shufflepoint.DataLoader(corpus(str(tmp_path / "a"), keys), 2, buckets="ratio")
    with pytest.raises(ValueError, match=r"buckets: sample 0: found no field 'size' \(keys \['id', 'ratio'\]\)"):
        shufflepoint.DataLoader(corpus(str(tmp_path / "b"), [0, 1]), 2, buckets="size")

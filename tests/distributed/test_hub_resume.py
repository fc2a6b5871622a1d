"""A Hub dataset taken by name (``Shards.from_hub``) from the local stand-in of the Hub's API
(tests/hub_server.py), read by the real huggingface_hub client in real, fresh processes: ``HF_ENDPOINT``
points the client at it, as a user's environment points it at the Hub.

- resume exactness on 2 and on 3 ranks (same world, ``num_workers`` 2, SIGKILL after a checkpoint, a storm of
  HTTP 429 answers to the first reads, each retried with backoff), and
  elastic 2 -> 3 and 3 -> 2 (every row of the interrupted epoch once), while the branch the run started on
  moves under it (a commit that changes the card, not the data: the same corpus, resumed exactly);
- ``Packed`` rows of a Hub dataset's documents (docs/hub.md's recipe in small): resumed row for row on 2 ranks,
  and on 3 ranks each row of the interrupted epoch once;
- bytes per node: 2 simulated nodes (each its own token, counted by the stand-in, and its own cache
  folder) each fetch about half of the dataset's bytes in an epoch, by range, not the whole dataset;
- the listing: one tree listing per node (per cache folder), not per process.

The shared checks are test_shards_resume.py's. ``make test-hub``.
"""

from __future__ import annotations

import json
import os
import random
import string
import uuid

import pytest
from test_shards_resume import check_elastic, check_same_world

from shufflepoint._tools.launch import launch

pytestmark = [pytest.mark.hub, pytest.mark.timeout(900)]
pytest.importorskip("huggingface_hub")
LAUNCH_TIMEOUT = 240
WORKER = os.path.join(os.path.dirname(__file__), "workers", "shards_worker.py")
SHARDS, ROWS, GROUP = 24, 120, 30
CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*/*.parquet
---
# FineWeb-like: a text column, dumps in folders
"""


def fineweb_like(seed: int = 5) -> tuple[dict[str, bytes], list[int]]:
    """{path: bytes} of SHARDS Parquet files of ROWS rows (``id``, ~300 bytes of ``text``) in row groups of
    GROUP, in two dump folders; and the ids."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    files, ids = {}, []
    for shard in range(SHARDS):
        block = list(range(shard * ROWS, (shard + 1) * ROWS))
        text = ["".join(rng.choices(string.ascii_letters, k=300)) for _ in block]
        out = io.BytesIO()
        pq.write_table(pa.table({"id": block, "text": text}), out, row_group_size=GROUP, compression="none")
        files[f"data/CC-MAIN-2024-{10 + shard % 2}/{shard:03d}.parquet"] = out.getvalue()
        ids.extend(block)
    return files, ids


def tokenized(seed: int = 8) -> dict[str, bytes]:
    """{path: bytes} of 6 Parquet files of pre-tokenized documents (``input_ids``: 5-60 tokens, every token id
    unique in the corpus, so a packed row names its tokens), in row groups of 20."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    files, token = {}, 1
    for shard in range(6):
        documents = []
        for _ in range(40):
            length = rng.randint(5, 60)
            documents.append(list(range(token, token + length)))
            token += length
        out = io.BytesIO()
        pq.write_table(pa.table({"input_ids": documents}), out, row_group_size=20)
        files[f"data/{shard:03d}.parquet"] = out.getvalue()
    return files


def scenario(name, save_at, **kwargs):
    return {"name": name, "corpus": None, "batch_size": 8, "seed": 29, "epochs": 2, "save_at": save_at,
            "shuffle_block": 60, **kwargs}


@pytest.fixture(scope="module")
def runs(hub_server, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hub"))
    name = "org/fineweb-" + uuid.uuid4().hex[:6]
    hub_server.create(name)
    files, ids = fineweb_like()
    first = hub_server.commit(name, {"README.md": CARD.encode(), **files})
    env = {"HF_ENDPOINT": hub_server.url, "HF_HUB_CACHE": os.path.join(out, "hf-cache"), "HF_HUB_OFFLINE": "0",
           "HF_TOKEN": ""}

    def go(mode, scenarios, nproc, **kwargs):
        return launch([WORKER, mode, out, json.dumps(scenarios)], nproc, env=env, timeout=LAUNCH_TIMEOUT, **kwargs)

    # Two simulated nodes: one rank each, its own token (the stand-in counts bytes per token) and cache folder.
    node = {"kind": "hub", "name": name, "columns": ["id", "text"],
            "storage_options": {"token": "node-{rank}"}, "cache_dir": os.path.join(out, "node-{rank}")}
    hub_server.reset()
    go("save", [dict(scenario("bytes", [1, 0], reference=False), corpus=node)], 2).check()
    measured = {"bytes": dict(hub_server.bytes), "corpus": sum(len(d) for d in files.values()),
                "tree": hub_server.requests("/tree/"), "api": hub_server.requests("/api/")}
    corpus = {"kind": "hub", "name": name, "columns": ["id"], "cache_dir": os.path.join(out, "cache"), "retries": 8}
    tokens_name = "org/tokens-" + uuid.uuid4().hex[:6]
    hub_server.create(tokens_name)
    hub_server.commit(tokens_name, {"README.md": CARD.replace("data/*/*.parquet", "data/*.parquet").encode(),
                                    **tokenized()})
    packed = {"kind": "packed", "seq_len": 32, "eos": 0, "count_workers": 1,
              "source": {"kind": "hub", "name": tokens_name, "cache_dir": os.path.join(out, "cache")}}
    saves = {"two": [dict(scenario("packed", [0, 12]), corpus=packed),
                     dict(scenario("packed_to_three", [1, 6]), corpus=packed),
                     scenario("hub", [1, 5], num_workers=2), scenario("hub_to_three", [0, 9]),
                     scenario("hub_killed", [0, 7], num_workers=2, kill=True)],
             "three": [scenario("hub_three", [0, 6]), scenario("hub_to_two", [1, 4], num_workers=2)]}
    for scenarios in saves.values():
        for s in scenarios:
            s["corpus"] = s["corpus"] or corpus
    hub_server.reset()
    hub_server.fail_next(6, 429, only="/cdn/")  # a 429 storm on the first reads: each is retried with backoff
    result = go("save", saves["two"], 2, kill_when=os.path.join(out, "hub_killed.saved"))
    measured["injected_429"] = hub_server.injected
    measured["tree_one_node"] = hub_server.requests(f"/{name}/tree/")  # 2 processes and their workers, one cache
    measured["lookups_one_node"] = sum(1 for _, path, _ in hub_server.log if path == f"/api/datasets/{name}")
    if not result.killed:
        result.check()
    assert result.killed, "the kill scenario was supposed to be SIGKILLed"
    go("save", saves["three"], 3).check()
    read_before = commits_read(hub_server, name)
    moved = hub_server.commit(name, {"README.md": (CARD + "\nEdited after the run started.\n").encode()})
    hub_server.reset()
    s = {s["name"]: s for scenarios in saves.values() for s in scenarios}
    resume = lambda s, world, **changes: dict(s, source=s["name"], saved_world=world, **changes)  # noqa: E731
    go("resume", [resume(s["hub"], 2), resume(s["hub_killed"], 2, kill=False), resume(s["packed"], 2),
                  resume(s["hub_to_two"], 3, num_workers=0)], 2).check()
    go("resume", [resume(s["hub_three"], 3), resume(s["hub_to_three"], 2, num_workers=2),
                  resume(s["packed_to_three"], 2)], 3).check()
    return out, ids, measured, {"first": first, "moved": moved, "before": read_before,
                                "after": commits_read(hub_server, name)}


def commits_read(hub_server, name: str) -> set[str]:
    """The commits every ``resolve`` request for ``name`` named since the log was last reset."""
    return {path.split("/resolve/", 1)[1].split("/", 1)[0] for _, path, _ in hub_server.log
            if f"/{name}/resolve/" in path}


def test_same_world_and_sigkill_resume_exactly_from_the_hub(runs):
    out, _, _, _ = runs
    for name, world in [("hub", 2), ("hub_killed", 2), ("hub_three", 3)]:
        check_same_world(out, name, world)


def test_elastic_resume_from_the_hub_sees_every_row_once(runs):
    out, ids, _, _ = runs
    check_elastic(out, "hub_to_three", 2, 3, ids)
    check_elastic(out, "hub_to_two", 3, 2, ids)


def test_documents_packed_from_the_hub_resume_row_for_row_and_on_three_ranks_each_row_once(runs):
    """docs/hub.md's recipe in small: a Hub dataset's documents packed into rows of 32 tokens (Packed)."""
    out, _, _, _ = runs
    check_same_world(out, "packed", 2)
    check_elastic(out, "packed_to_three", 2, 3)


def test_each_node_fetches_its_share_by_range_and_lists_once(runs):
    _, _, measured, _ = runs
    per_node, corpus = measured["bytes"], measured["corpus"]
    print(f"\nbytes per node: {per_node} of a {corpus}-byte dataset; tree listings: {measured['tree']}")
    assert set(per_node) == {"node-0", "node-1"}  # every byte was fetched with the node's own token
    for fetched in per_node.values():
        assert 0.35 * corpus < fetched < 0.65 * corpus  # its half (and footers), not the dataset
    assert sum(per_node.values()) < 1.2 * corpus
    # One listing per node, through HfFileSystem's glob: 2 pages of data/ (26 entries, 25 a page) and the look
    # at the repository's root fsspec's glob takes; never one per process or per shard.
    assert measured["tree"] == 2 * 3
    assert measured["tree_one_node"] == 3  # 2 ranks (and 4 DataLoader workers) on one node: one listing
    assert measured["lookups_one_node"] == 1  # and one lookup of main's commit, for the node's start (torchrun)


def test_a_429_storm_in_the_run_was_retried_and_lost_nothing(runs):
    _, _, measured, _ = runs
    assert measured["injected_429"] == 6  # answered to the save run's reads; its scenarios resumed exactly above


def test_every_read_names_the_commit_its_run_resolved_the_branch_to(runs):
    _, _, _, commits = runs
    assert commits["before"] == {commits["first"]}  # every save run, the killed one too, read the first commit
    assert commits["after"] == {commits["moved"]}  # the resumes resolved main again: the card moved, the data not

"""``Packed(Shards(parquet))`` on 2 nodes x 2 ranks over the local S3 server, two epochs: each node downloads
about its share of the corpus once (not the whole corpus to count tokens, nor other shards in the second
epoch: its documents are laid along its ranks' stretches, ``packed_layout``), and the rows are exactly those
of counting every document in one process (the order does not change). Measured: 1.10 and 1.04 of the
share; 1.73 and 1.69 on the code before the layout (each epoch laid anew).

Nodes are simulated by their own cache folder and their own S3 access key: the S3 server's proxy counts
the bytes of every shard GET per key, so per node. Ranks are real processes on Gloo (forked: no second
``import torch``). Without published counts, each rank counts the shards it reads in epoch 0 and the
per-shard totals are exchanged in one ``all_gather_object``. With ``shufflepoint index --tokens``
published, nothing is counted. Run as a script (``python tests/distributed/test_packed_share.py``), it
prints the bytes per node / its share, for any shufflepoint on the path (the number before this change),
and writes each rank's rows to the path given, to compare two versions' orders.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import resource
import sys
import uuid

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from s3_server import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)
SHARDS, SEQ_LEN, BATCH, BLOCK, SEED, EPOCHS = 32, 64, 2, 64, 7, 2
NODES = (("a", 2), ("b", 2))


def parquet_documents(folder: str) -> None:
    """Parquet shards of documents with an ``input_ids`` list column, lognormal lengths (mean ~40 tokens)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(3)
    document = 0
    for shard in range(SHARDS):
        docs = []
        for _ in range(int(rng.integers(20, 40))):
            size = int(min(400, rng.lognormal(3.4, 0.8)))
            docs.append(list(range(document * 1000, document * 1000 + size)))
            document += 1
        pq.write_table(pa.table({"input_ids": docs}), os.path.join(folder, f"part-{shard:05d}.parquet"))


def node_options(base: dict, name: str) -> dict:
    """A node's S3 options: its own access key, so the server's proxy counts its GET bytes apart."""
    return {**base, "key": name}


def _rank(rank: int, world: int, port: int, sources: str, options: dict, cache: str, out: str) -> None:
    import torch.distributed as dist

    import shufflepoint
    from shufflepoint._shards.corpora.packed import packed as packed_module

    counted: list[list[int]] = []  # the document ranges this rank counted (before a read: by share)
    try:
        from shufflepoint._shards.counting import shard_counts
    except ImportError:  # run as a script on a version before per-shard counts
        shard_counts = None
    if shard_counts is not None:
        count = shard_counts.count_ranges
        shard_counts.count_ranges = lambda d, c, ranges, *a: counted.extend(map(list, ranges)) or count(d, c, ranges,
                                                                                                        *a)

    # A read reads on by a window of 2**19 tokens (here the whole corpus), never past its rank's stretch
    # (packed_layout): the default window, so the bytes say so. A version before that (run as a script) reads on.
    if not hasattr(packed_module, "packed_layout"):
        packed_module._WINDOW_TOKENS = 8 * SEQ_LEN
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    corpus = shufflepoint.Shards(sources, cache_dir=cache, storage_options=options, progress=False)
    packed = shufflepoint.Packed(corpus, SEQ_LEN, eos=0, progress=False, count_workers=1)
    loader = shufflepoint.DataLoader(packed, BATCH, seed=SEED, shuffle_block=BLOCK)
    before_reading = list(counted)
    rows = []
    for epoch in range(EPOCHS):  # a second epoch reads the same shards: from the node's cache
        loader.set_epoch(epoch)
        rows += [batch["input_ids"].tolist() for batch in loader]
    kept = getattr(getattr(packed, "_counts", None), "_kept", {})
    with open(out, "w") as f:
        json.dump({"rows": rows, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "documents_kept": int(sum(c.size for c in kept.values())), "documents": len(corpus),
                   "counted": before_reading, "shard_rows": corpus.shard_rows.tolist()}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_job(s3, sources: str, folder: str) -> tuple[dict[str, float], list[dict]]:
    """2 nodes x 2 ranks, ``EPOCHS`` epochs; (bytes each node GOT of shards, each rank's result)."""
    before = s3.counts.snapshot("/part-")
    port, world = free_port(), sum(n for _, n in NODES)
    context = multiprocessing.get_context("fork")
    processes, outs, rank = [], [], 0
    try:
        for name, nproc in NODES:
            for _ in range(nproc):
                out = os.path.join(folder, f"rank{rank}.json")
                args = (rank, world, port, sources, node_options(s3.storage_options, name),
                        os.path.join(folder, f"cache-{name}"), out)
                processes.append(context.Process(target=_rank, args=args))
                outs.append(out)
                rank += 1
        for process in processes:
            process.start()
        for process in processes:
            process.join(240)
            assert process.exitcode == 0, process.exitcode
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    results = []
    for out in outs:
        with open(out) as f:
            results.append(json.load(f))
    after = s3.counts.snapshot("/part-")
    return {name: after.get(name, 0) - before.get(name, 0) for name, _ in NODES}, results


def reference_rows(local: str) -> list[list]:
    """Each rank's rows with every count in memory, counted in this process (a transform keeps the Shards
    from per-shard counts: the way counts were taken before)."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(local, "*.parquet"), cache_dir=os.path.join(local, "..", "ref"),
                                 progress=False, transform=lambda sample: sample)
    packed = shufflepoint.Packed(corpus, SEQ_LEN, eos=0, progress=False)
    world = sum(n for _, n in NODES)
    found = []
    for r in range(world):
        loader = shufflepoint.DataLoader(packed, BATCH, seed=SEED, shuffle_block=BLOCK, rank=r, world_size=world)
        rows = []
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            rows += [b["input_ids"].tolist() for b in loader]
        found.append(rows)
    return found


@pytest.fixture(scope="module")
def corpus(s3_server, tmp_path_factory):
    from shufflepoint._tools.cli import main

    local = str(tmp_path_factory.mktemp("share") / "data")
    parquet_documents(local)
    bucket = "share-" + uuid.uuid4().hex[:8]
    s3_server.create_bucket(bucket)
    s3_server.upload(bucket, local, prefix="docs/")
    sources = f"s3://{bucket}/docs/*.parquet"
    options = json.dumps(s3_server.storage_options)
    assert main(["index", sources, "--storage-options", options, "--cache-dir", local + "-publisher"]) == 0
    size = sum(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local) if n.endswith(".parquet"))
    return {"local": local, "sources": sources, "bytes": size, "options": options}


def shares(got: dict[str, float], corpus_bytes: int) -> dict[str, float]:
    return {name: round(value / (corpus_bytes / len(NODES)), 3) for name, value in got.items()}


@pytest.mark.parametrize("published", [False, pytest.param(True, marks=pytest.mark.examples)],
                         ids=["counted-by-share", "published"])  # published: make test-examples (a lower-level
# test, test_published_counts.py, reads published counts from S3 by range); counted by share: make test
def test_each_node_downloads_about_its_share_and_the_rows_do_not_change(s3_server, corpus, tmp_path, published):
    if published:
        from shufflepoint._tools.cli import main

        assert main(["index", corpus["sources"], "--tokens", "input_ids", "--storage-options", corpus["options"],
                     "--cache-dir", str(tmp_path / "publisher"), "--count-workers", "1"]) == 0
    try:
        got, results = run_job(s3_server, corpus["sources"], str(tmp_path))
    finally:
        if published:
            for name in [k["Key"] for k in s3_server.client().list_objects_v2(
                    Bucket=corpus["sources"][5:].split("/")[0], Prefix="docs/.shufflepoint-index-tokens")["Contents"]]:
                s3_server.delete(corpus["sources"][5:].split("/")[0], name)
    ratio = shares(got, corpus["bytes"])
    print(f"GET bytes per node / its share ({'published' if published else 'counted by share'}): {ratio}")
    # two epochs: before, 2.0 (every node downloaded everything to count), then 1.08 + 0.4 (each epoch laid anew)
    assert all(value <= 1.2 for value in ratio.values()), ratio
    assert [r["rows"] for r in results] == reference_rows(corpus["local"])
    for result in results:  # a process holds the counts of what it read, not of the corpus
        assert result["documents_kept"] < 0.75 * result["documents"], result
    counted = sorted(tuple(r) for result in results for r in result["counted"])
    if published:  # nothing counted: totals from the published file, each read shard's counts by range
        assert counted == []
    else:  # each shard counted by exactly one rank before the exchange
        ends = np.cumsum(results[0]["shard_rows"]).tolist()
        assert counted == [(a, b) for a, b in zip([0] + ends[:-1], ends, strict=True) if b > a]


if __name__ == "__main__":  # the same job for any shufflepoint on the path: python tests/.../test_packed_share.py
    import tempfile

    from s3_server import S3Server
    from shufflepoint._tools.cli import main as cli

    with S3Server() as server, tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "data")
        parquet_documents(local)
        server.create_bucket("share")
        server.upload("share", local, prefix="docs/")
        assert cli(["index", "s3://share/docs/*.parquet", "--storage-options", json.dumps(server.storage_options),
                    "--cache-dir", os.path.join(tmp, "publisher")]) == 0
        total = sum(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local))
        got, results = run_job(server, "s3://share/docs/*.parquet", os.path.join(tmp, f"job{random.random()}"))
        same = [r["rows"] for r in results] == reference_rows(local)
        if len(sys.argv) > 1:  # the rows, to compare two versions' orders
            with open(sys.argv[1], "w") as f:
                json.dump([r["rows"] for r in results], f)
        print(json.dumps({"bytes_per_node": got, "share_bytes": total / len(NODES), "ratio": shares(got, total),
                          "rss_mib": [round(r["rss_mib"]) for r in results], "rows_as_reference": same,
                          "documents_kept": [r["documents_kept"] for r in results],
                          "documents": results[0]["documents"]}))


def _failing_rank(rank: int, port: int, folder: str, queue) -> None:
    import torch.distributed as dist

    import shufflepoint

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    corpus = shufflepoint.Shards(os.path.join(folder, "*.jsonl"), cache_dir=os.path.join(folder, f"c{rank}"),
                                 progress=False)
    packed = shufflepoint.Packed(corpus, 4, progress=False, count_workers=1)
    try:
        shufflepoint.DataLoader(packed, 2, seed=1)
        queue.put((rank, "built"))
    except Exception as error:
        queue.put((rank, f"{type(error).__name__}: {error}"))


def test_a_rank_that_fails_to_count_fails_every_rank_instead_of_a_hang(tmp_path):
    """A bad document in one rank's share: that rank raises its own error, the other a refusal naming it."""
    for shard in range(6):
        lines = [json.dumps({"input_ids": [shard, i, i]}) for i in range(3)]
        if shard == 4:
            lines[1] = json.dumps({"input_ids": [1.5]})
        (tmp_path / f"part-{shard}.jsonl").write_text("\n".join(lines) + "\n")
    context = multiprocessing.get_context("fork")
    queue, port = context.Queue(), free_port()
    processes = [context.Process(target=_failing_rank, args=(r, port, str(tmp_path), queue)) for r in range(2)]
    for process in processes:
        process.start()
    found = dict(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(60)
    errors = sorted(found.values())
    assert errors[0].startswith("RuntimeError: token counts: found rank ") and "failed to count" in errors[0], found
    assert errors[1].startswith("TypeError: ") and "float64" in errors[1], found


def _mixture_rank(rank: int, port: int, folder: str, queue) -> None:
    import torch.distributed as dist

    import shufflepoint
    from shufflepoint._shards.counting import shard_counts

    counted: list[tuple[str, int, int]] = []
    count = shard_counts.count_ranges
    shard_counts.count_ranges = lambda d, c, ranges, *a: counted.extend(
        (d.index.root, a0, b0) for a0, b0 in ranges) or count(d, c, ranges, *a)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    sources = [shufflepoint.Packed(shufflepoint.Shards(os.path.join(folder, name, "*.jsonl"),
                                                       cache_dir=os.path.join(folder, f"c{rank}"), progress=False),
                                   4, progress=False, count_workers=1) for name in ("web", "code")]
    mixture = shufflepoint.Mixture([(sources[0], 0.7), (sources[1], 0.3)])  # asks the lengths: counted here
    loader = shufflepoint.DataLoader(mixture, 2, seed=3)
    next(iter(loader))
    queue.put((rank, sorted(counted), mixture.fingerprint))


def test_a_mixture_of_packed_sources_counts_each_shard_once_across_the_ranks(tmp_path):
    """A Mixture asks its Packed sources' lengths when built, before any loader: the ranks still split the
    counting (contiguous runs of shards) and exchange the totals."""
    for name, shards in (("web", 5), ("code", 3)):
        (tmp_path / name).mkdir()
        for shard in range(shards):
            lines = [json.dumps({"input_ids": list(range(shard + i + 2))}) for i in range(4)]
            (tmp_path / name / f"part-{shard}.jsonl").write_text("\n".join(lines) + "\n")
    context = multiprocessing.get_context("fork")
    queue, port = context.Queue(), free_port()
    processes = [context.Process(target=_mixture_rank, args=(r, port, str(tmp_path), queue)) for r in range(2)]
    for process in processes:
        process.start()
    found = dict((rank, (counted, fingerprint)) for rank, counted, fingerprint in
                 (queue.get(timeout=120) for _ in processes))
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert found[0][1] == found[1][1]  # the same totals, the same fingerprint
    counted = sorted(r for rank in found for r in found[rank][0])
    assert len(counted) == 5 + 3 and len(set(counted)) == 8  # every shard of both corpora counted once
    assert found[0][0] and found[1][0]  # by both ranks

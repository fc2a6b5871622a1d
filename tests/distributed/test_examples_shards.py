"""examples/shards.py and examples/shards_s3.py, run as a user would: stop, run again, compare ids."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
SHARDS, SHARDS_S3 = os.path.join(EXAMPLES, "shards.py"), os.path.join(EXAMPLES, "shards_s3.py")
SHARDS_S3_SHARDS, SHARDS_S3_ROWS = 60, 25  # 1,500 rows: 47 steps an epoch on 2 ranks (batch 16)


def records(prefix, world):
    found = []
    for rank in range(world):
        with open(f"{prefix}.rank{rank}") as f:
            found.append([json.loads(line) for line in f])
    return found


# make test-examples: test_shards_resume.py resumes a disk corpus exactly on 2 ranks in make test, and make
# test-wheel (CI) runs this example from the installed wheel (an epoch, every sample once).
@pytest.mark.examples
def test_the_sharded_example_stops_and_resumes_exactly(tmp_path):
    data, cache = str(tmp_path / "corpus"), {"SHUFFLEPOINT_CACHE": str(tmp_path / "cache")}
    common = ["--data", data, "--epochs", "2"]
    launch([SHARDS, *common, "--checkpoint", str(tmp_path / "a.pt"), "--record", str(tmp_path / "whole")], 2,
           env=cache).check()
    checkpoint, parts = str(tmp_path / "b.pt"), str(tmp_path / "parts")
    launch([SHARDS, *common, "--checkpoint", checkpoint, "--record", parts, "--stop-after-step", "200"], 2,
           env=cache).check()  # 157 steps per epoch: stops in epoch 1
    launch([SHARDS, *common, "--checkpoint", checkpoint, "--record", parts], 2, env=cache).check()
    for whole, resumed in zip(records(tmp_path / "whole", 2), records(parts, 2), strict=True):
        assert resumed == whole and len(whole) == 2 * 157


def parquet_rows(folder, shards, rows):
    """Shards of examples/shards.py's rows ({"id", "x" (8 floats), "y"}, ids 0, 1, ...), written here: a
    launch of that example only to write them cost a torchrun start, and fewer shards read the same way."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    os.makedirs(folder)
    generator = torch.Generator().manual_seed(0)
    for shard in range(shards):
        x = torch.randn(rows, 8, generator=generator)
        ids = list(range(shard * rows, (shard + 1) * rows))
        pq.write_table(pa.table({"id": ids, "x": x.tolist(), "y": x.sum(1).tolist()}),
                       os.path.join(folder, f"part-{shard:05d}.parquet"), row_group_size=10)
    return shards * rows


def test_the_s3_example_resumes_on_three_ranks_each_sample_once(tmp_path, s3_server):
    data, cache = str(tmp_path / "corpus"), {"SHUFFLEPOINT_CACHE": str(tmp_path / "cache")}
    rows = parquet_rows(data, SHARDS_S3_SHARDS, SHARDS_S3_ROWS)
    bucket = "example-" + uuid.uuid4().hex[:8]
    s3_server.upload(bucket, data, prefix="corpus/")
    options = json.dumps({k: v for k, v in s3_server.storage_options.items() if k != "client_kwargs"}
                         | {"client_kwargs": {"region_name": "us-east-1"}})
    common = [SHARDS_S3, "--data", f"s3://{bucket}/corpus/*.parquet", "--endpoint-url", s3_server.endpoint_url,
              "--storage-options", options, "--checkpoint", str(tmp_path / "s3.pt"), "--epochs", "1",
              "--cache", str(tmp_path / "node-cache"), "--record", str(tmp_path / "parts")]
    launch([*common, "--stop-after-step", "20"], 2, env=cache).check()  # right after its checkpoint at 20
    launch(common, 3, env=cache).check()
    before, after = records(tmp_path / "parts", 2), records(tmp_path / "parts", 3)
    seen = Counter(i for rank in before for line in rank[:20] for i in line["ids"])
    seen.update(i for rank in range(3) for line in after[rank][20 if rank < 2 else 0:] for i in line["ids"])
    assert set(seen) == set(range(rows)) and sum(seen.values()) - rows < 3  # only the tail padding repeats

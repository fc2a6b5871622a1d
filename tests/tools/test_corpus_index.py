"""``shufflepoint index`` and ``shufflepoint inspect --verify``: on local files and the local S3 server."""

from __future__ import annotations

import json
import os
import uuid

import numpy as np

from shufflepoint._tools.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tokens(folder, shards=4):
    os.makedirs(folder, exist_ok=True)
    for shard in range(shards):
        np.arange(shard * 100, shard * 100 + 41, dtype=np.uint16).tofile(os.path.join(folder, f"part-{shard}.bin"))


def test_verify_a_bucket_against_its_published_index(s3, tmp_path, capsys):
    name = "verify-" + uuid.uuid4().hex[:8]
    tokens(str(tmp_path / "local"))
    s3.upload(name, str(tmp_path / "local"))
    common = ["--seq-len", "4", "--storage-options", json.dumps(s3.storage_options), "--cache-dir",
              str(tmp_path / "cache")]
    code, out, _ = run(capsys, "index", f"s3://{name}/*.bin", *common)
    assert code == 0 and f"published  : s3://{name}/.shufflepoint-index-" in out and "4 tokens shards" in out
    code, out, _ = run(capsys, "inspect", "--verify", f"s3://{name}/*.bin", *common, "--json", "-")
    report = json.loads(out)
    assert code == 0 and report["findings"] == [] and report["shards"] == 4
    s3.put(name, "part-1.bin", np.arange(900, 941, dtype=np.uint16).tobytes())  # same size, other bytes
    s3.put(name, "part-2.bin", b"\0" * 10)
    s3.delete(name, "part-3.bin")
    s3.put(name, "part-4.bin", b"\0" * 10)
    code, out, _ = run(capsys, "inspect", "--verify", f"s3://{name}/*.bin", *common)
    assert code == 1
    assert "REWRITTEN  : part-1.bin: version " in out
    assert "TRUNCATED  : part-2.bin: 10 bytes now, 82 in the index" in out
    assert "MISSING    : part-3.bin: no such object any more" in out and "NEW        : part-4.bin" in out
    assert "verify: 4 shard(s) differ from the index" in out
    published = f"s3://{name}/" + next(o["Key"] for o in s3.client().list_objects_v2(Bucket=name)["Contents"]
                                       if o["Key"].startswith(".shufflepoint-index-"))
    code, out, _ = run(capsys, "inspect", "--verify", published, *common)  # the sidecar itself
    assert code == 1 and "part-1.bin" in out and "part-4.bin" not in out


def test_verify_local_files_with_checksums(tmp_path, capsys):
    folder = str(tmp_path / "local")
    tokens(folder)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    code, out, _ = run(capsys, "index", os.path.join(folder, "*.bin"), "--seq-len", "4", "--checksum", *cache)
    assert code == 0 and "(sha256 of each recorded)" in out
    code, out, _ = run(capsys, "inspect", "--verify", os.path.join(folder, "*.bin"), "--seq-len", "4", *cache)
    assert code == 0 and "checked: size, version and content (sha256)" in out and "verify: OK" in out
    path = os.path.join(folder, "part-0.bin")
    stat = os.stat(path)
    np.arange(500, 541, dtype=np.uint16).tofile(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # size and mtime kept: only the content tells
    code, out, _ = run(capsys, "inspect", "--verify", os.path.join(folder, "*.bin"), "--seq-len", "4", *cache)
    assert code == 1 and "REWRITTEN  : part-0.bin: content sha256:" in out


def test_verify_without_an_index_or_with_bad_options_is_a_usage_error(tmp_path, capsys):
    folder = str(tmp_path / "local")
    tokens(folder)
    code, _, err = run(capsys, "inspect", "--verify", os.path.join(folder, "*.bin"), "--seq-len", "4",
                       "--cache-dir", str(tmp_path / "empty"))
    assert code == 2 and "no index of" in err and "shufflepoint index SOURCES" in err
    code, _, err = run(capsys, "index", os.path.join(folder, "*.bin"), "--storage-options", "[1]")
    assert code == 2 and "--storage-options: found '[1]', expected a JSON object" in err
    code, _, err = run(capsys, "inspect", "a.json", "b.json")
    assert code == 2 and "expected one (several only with --verify)" in err


def test_index_names_a_missing_option(tmp_path, capsys):
    folder = str(tmp_path / "local")
    tokens(folder)
    code, _, err = run(capsys, "index", os.path.join(folder, "*.bin"), "--cache-dir", str(tmp_path / "c"))
    assert code == 2 and "seq_len: found None; expected: an int >= 1: the tokens reader needs it" in err

"""Storage: sources expanded, objects sized and fetched whole, against a real S3 server over HTTP.

s3fs talks to moto's server through the fault-injecting proxy of ``s3_server.py``: 500s,
throttling and connections dropped mid-body are retried into byte-identical files; a shard that
keeps failing, vanished or changed is a ShardError naming it, and no partial file is left.
"""

from __future__ import annotations

import errno
import hashlib
import io
import multiprocessing
import os
import time

import pytest

from shufflepoint._errors import ShardError
from shufflepoint._shards.storage import faults
from shufflepoint._shards.storage.storage import ObjectInfo, Storage

FAST = {"backoff": 0.001}


def blob(n: int, seed: int = 0) -> bytes:
    out = b""
    while len(out) < n:
        out += hashlib.sha256(f"{seed}-{len(out)}".encode()).digest()
    return out[:n]


@pytest.fixture()
def objects(s3, s3_bucket):
    """Five objects under web/ (one of 300 KB, to cut mid-body), a manifest and a stray file."""
    files = {f"web/part-{i:05d}.jsonl": blob(1000 + 97 * i, seed=i) for i in range(4)}
    files["web/big.bin"] = blob(300_000, seed=9)
    files["web/lists/manifest.txt"] = b"# two shards\n../part-00001.jsonl\n\n  ../part-00003.jsonl  \n"
    files["other/x.jsonl"] = b"{}\n"
    s3.put_files(s3_bucket, files)
    return s3_bucket, files


def _fs_retries(storage: Storage, url: str, retries: int) -> None:
    """s3fs retries a dropped body itself (``S3FileSystem.retries``); 1 lets every drop reach Storage."""
    storage._fs(url).retries = retries


# -- expand ------------------------------------------------------------------------------------
def test_a_list_keeps_its_order_and_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Storage()
    got = storage.expand(["b.jsonl", "s3://bucket/a.jsonl", f"file://{tmp_path}/c.jsonl", "sub/../a.jsonl"])
    assert got == [str(tmp_path / "b.jsonl"), "s3://bucket/a.jsonl", str(tmp_path / "c.jsonl"),
                   str(tmp_path / "a.jsonl")]
    with pytest.raises(ValueError, match=r"sources '.*a\.jsonl': found listed twice\n  expected: each shard once"):
        storage.expand(["a.jsonl", str(tmp_path / "a.jsonl")])


def test_a_local_glob_is_sorted_files_only(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.txt", "sub/d.jsonl"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "dir.jsonl").mkdir()
    storage = Storage()
    assert storage.expand(str(tmp_path / "*.jsonl")) == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert storage.expand(str(tmp_path / "**" / "*.jsonl"))[-1] == str(tmp_path / "sub" / "d.jsonl")
    assert storage.expand(f"file://{tmp_path}/a.*") == [str(tmp_path / "a.jsonl")]
    assert storage.expand(str(tmp_path / "a.jsonl")) == [str(tmp_path / "a.jsonl")]


def test_a_local_manifest_resolves_relative_lines_against_its_folder(tmp_path, monkeypatch):
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "train.txt").write_text(
        "# comment\n\n../a.jsonl\n  shards/b.jsonl \n/abs/c.jsonl\ns3://bucket/d.jsonl\n")
    want = [str(tmp_path / "a.jsonl"), str(tmp_path / "lists" / "shards" / "b.jsonl"), "/abs/c.jsonl",
            "s3://bucket/d.jsonl"]
    assert Storage().expand(str(tmp_path / "lists" / "train.txt")) == want
    monkeypatch.chdir(tmp_path / "lists")
    assert Storage().expand("train.txt") == want  # a bare file name: its folder is the working one


def test_bad_sources_are_value_errors_naming_sources(tmp_path):
    storage = Storage()
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    (tmp_path / "folder").mkdir()
    a_path, a_list = r": found {}\n  expected: a path, URL, glob", r": found {}\n  expected: a non-empty list of paths"
    cases = [("", a_path.format("''")), (5, a_path.format(5)), ([], a_list.format(r"\[\]")),
             (["a", ""], a_list.format(r"\['a', ''\]")), ([3], a_list.format(r"\[3\]")),
             (str(tmp_path / "none-*.jsonl"), r" '.*none-\*\.jsonl': found no files\n  expected: a glob"),
             (str(tmp_path / "missing.parquet"), r" '.*missing\.parquet': found nothing at that path\n"
                                                 r"  expected: a file, glob or manifest"),
             (str(tmp_path / "missing.txt"), r" '.*missing\.txt': found no such manifest"),
             (str(tmp_path / "empty.txt"), r" '.*empty\.txt': found a manifest listing no shard"),
             (str(tmp_path / "folder"), r" '.*folder': found a folder\n  expected: shard files\n  fix: pass a glob")]
    for sources, message in cases:
        with pytest.raises(ValueError, match=f"sources{message}"):
            storage.expand(sources)  # type: ignore[arg-type]


def test_an_s3_glob_lists_full_urls_and_their_sizes(s3, objects):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    urls = storage.expand(f"s3://{bucket}/web/part-*.jsonl")
    assert urls == [f"s3://{bucket}/web/part-{i:05d}.jsonl" for i in range(4)]
    before = s3.faults.requests
    infos = [storage.info(u) for u in urls]  # from the listing: no request per shard
    assert s3.faults.requests == before
    assert [i.size for i in infos] == [len(files[u.split("/", 3)[3]]) for u in urls]
    assert infos[0].version == hashlib.md5(files["web/part-00000.jsonl"]).hexdigest()  # the ETag
    assert storage.expand(f"s3://{bucket}/**/*.jsonl")[-1] == f"s3://{bucket}/web/part-00003.jsonl"
    with pytest.raises(ValueError, match=r"sources 's3://.*/web/\*\.parquet': found no files\n"):
        storage.expand(f"s3://{bucket}/web/*.parquet")
    with pytest.raises(ValueError, match=r"sources 's3://no-such-bucket-here/\*\.jsonl': found no files\n"):
        storage.expand("s3://no-such-bucket-here/*.jsonl")


def test_an_s3_manifest_resolves_relative_lines_to_urls(s3, objects):
    bucket, _ = objects
    storage = Storage(s3.storage_options, **FAST)
    s3.fail_next(2)  # reading the manifest is retried too
    assert storage.expand(f"s3://{bucket}/web/lists/manifest.txt") == [
        f"s3://{bucket}/web/part-00001.jsonl", f"s3://{bucket}/web/part-00003.jsonl"]
    with pytest.raises(ValueError, match=r"sources 's3://.*/web/lists/missing\.txt': found no such manifest\n"):
        storage.expand(f"s3://{bucket}/web/lists/missing.txt")


# -- info --------------------------------------------------------------------------------------
def test_info_of_a_local_file_and_a_missing_one(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")
    info = Storage().info(str(tmp_path / "a.bin"))
    assert info == ObjectInfo(3, str(os.stat(tmp_path / "a.bin").st_mtime_ns))
    with pytest.raises(ShardError, match=r"missing\.bin: not found"):
        Storage().info(str(tmp_path / "missing.bin"))


def test_info_over_http_retries_500s_and_names_a_missing_object(s3, objects):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    url = f"s3://{bucket}/web/part-00002.jsonl"
    s3.fail_next(3)
    assert storage.info(url).size == len(files["web/part-00002.jsonl"])
    assert s3.faults.injected["fail"] >= 3
    with pytest.raises(ShardError, match=r"web/nope\.jsonl: not found"):
        storage.info(f"s3://{bucket}/web/nope.jsonl")
    with pytest.raises(ShardError, match=r"folder, not a shard"):
        storage.info(f"s3://{bucket}/web")


# -- fetch -------------------------------------------------------------------------------------
def test_fetch_is_byte_identical_through_500s_and_throttling(s3, objects, tmp_path):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    url = f"s3://{bucket}/web/big.bin"
    s3.fail_next(2)
    storage.fetch(url, str(tmp_path / "a"), 300_000)
    s3.fail_next(2, status=503)
    storage.fetch(url, str(tmp_path / "b"), 300_000)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == files["web/big.bin"]
    assert s3.faults.injected["fail"] == 4


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_connection_dropped_mid_body_is_retried_into_an_identical_file(s3, objects, tmp_path, reset):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    url = f"s3://{bucket}/web/big.bin"
    s3.drop_next(2, reset=reset)  # s3fs's own retries may take these
    storage.fetch(url, str(tmp_path / "a"), 300_000)
    _fs_retries(storage, url, 1)
    s3.drop_next(3, reset=reset)  # these reach Storage's loop
    storage.fetch(url, str(tmp_path / "b"), 300_000)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == files["web/big.bin"]
    assert s3.faults.injected["drop"] == 5


def test_a_retry_resumes_after_the_chunks_already_written(s3, objects, tmp_path):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    storage.chunk_bytes = 64 << 10
    url = f"s3://{bucket}/web/big.bin"
    _fs_retries(storage, url, 1)
    s3.faults.log.clear()
    s3.drop_next(1, after=2)  # the third chunk is cut
    storage.fetch(url, str(tmp_path / "got"), 300_000)
    assert (tmp_path / "got").read_bytes() == files["web/big.bin"]
    ranges = [r for method, path, r in s3.faults.log if method == "GET" and path.endswith("big.bin")]
    assert ranges == ["bytes=0-65535", "bytes=65536-131071", "bytes=131072-196607", "bytes=131072-196607",
                      "bytes=196608-262143", "bytes=262144-299999"]


def test_more_failures_than_retries_is_an_error_naming_the_shard(s3, objects, tmp_path):
    bucket, _ = objects
    storage = Storage(s3.storage_options, retries=2, **FAST)
    url = f"s3://{bucket}/web/part-00001.jsonl"
    s3.fail_next(100)
    with pytest.raises(ShardError, match=r"part-00001\.jsonl: downloading failed after 3 attempts: OSError.*"
                                         r"Internal Server Error") as caught:
        storage.fetch(url, str(tmp_path / "got"), 1097)
    assert caught.value.shard == url and s3.faults.injected["fail"] == 3
    assert not (tmp_path / "got").exists()  # never a partial file
    s3.reset()
    _fs_retries(storage, url, 1)
    s3.drop_next(100)
    with pytest.raises(ShardError, match=r"big\.bin: downloading failed after 3 attempts: ClientPayloadError"):
        storage.fetch(f"s3://{bucket}/web/big.bin", str(tmp_path / "got"), 300_000)
    assert not (tmp_path / "got").exists()


def test_an_object_deleted_after_listing_is_vanished_at_once(s3, objects, tmp_path):
    bucket, _ = objects
    storage = Storage(s3.storage_options, retries=5, backoff=5.0)  # a retry would sleep >= 2.5 s
    urls = storage.expand(f"s3://{bucket}/web/part-*.jsonl")
    s3.delete(bucket, "web/part-00002.jsonl")
    started = time.monotonic()
    with pytest.raises(ShardError, match=r"part-00002\.jsonl: vanished") as caught:
        storage.fetch(urls[2], str(tmp_path / "got"), storage.info(urls[2]).size)
    assert caught.value.shard == urls[2] and time.monotonic() - started < 2.5
    assert not (tmp_path / "got").exists()


@pytest.mark.parametrize("new,kind", [(b"short", "truncated"), (blob(5000), "another size")])
def test_an_object_rewritten_with_another_size_is_an_error_naming_it(s3, objects, tmp_path, new, kind):
    bucket, _ = objects
    storage = Storage(s3.storage_options, retries=5, backoff=5.0)  # a retry would sleep >= 2.5 s
    url = f"s3://{bucket}/web/part-00003.jsonl"
    size = storage.info(url).size
    s3.put(bucket, "web/part-00003.jsonl", new)
    started = time.monotonic()
    with pytest.raises(ShardError, match=rf"part-00003\.jsonl: rewritten since it was indexed: the object is "
                       rf"{len(new)} bytes now, {size} in the index \({kind}\)"):
        storage.fetch(url, str(tmp_path / "got"), size)
    assert time.monotonic() - started < 2.5 and not (tmp_path / "got").exists()  # not retried: it will not heal


class _ShortReads(Storage):
    """A backend whose body ends early without an error (``cut`` attempts), size reported right."""

    def __init__(self, data: bytes, cut: int, **kwargs):
        super().__init__(**kwargs)
        self.data, self.cut, self.opened = data, cut, 0

    def _open(self, url):
        self.opened += 1
        body = io.BytesIO(self.data[: len(self.data) // 2] if self.opened <= self.cut else self.data)
        body.size = len(self.data)
        return body


def test_a_body_ending_early_is_resumed_or_reported_truncated(tmp_path):
    data = blob(10_000)
    short = _ShortReads(data, cut=1, retries=2, **FAST)
    short.fetch("mock://b/x.bin", str(tmp_path / "a"), len(data))
    assert (tmp_path / "a").read_bytes() == data and short.opened == 2
    with pytest.raises(ShardError, match=r"mock://b/x\.bin: truncated: got 5000 bytes, expected 10000 "
                                         r"\(downloading failed after 3 attempts\)"):
        _ShortReads(data, cut=99, retries=2, **FAST).fetch("mock://b/x.bin", str(tmp_path / "b"), len(data))
    assert not (tmp_path / "b").exists()


def test_local_paths_and_file_urls_fetch_without_fsspec(tmp_path, monkeypatch):
    (tmp_path / "a.bin").write_bytes(blob(3000))
    monkeypatch.setitem(__import__("sys").modules, "fsspec", None)  # an import would fail
    storage = Storage(**FAST)
    storage.fetch(str(tmp_path / "a.bin"), str(tmp_path / "copy1"), 3000)
    storage.fetch(f"file://{tmp_path}/a.bin", str(tmp_path / "copy2"), 3000)
    assert (tmp_path / "copy1").read_bytes() == (tmp_path / "copy2").read_bytes() == blob(3000)
    with pytest.raises(ShardError, match=r"a\.bin: rewritten since it was indexed: the object is 3000 bytes now, "
                       r"4000 in the index \(truncated\)"):
        storage.fetch(str(tmp_path / "a.bin"), str(tmp_path / "copy3"), 4000)
    with pytest.raises(ShardError, match=r"gone\.bin: vanished"):
        storage.fetch(str(tmp_path / "gone.bin"), str(tmp_path / "copy4"), 1)
    with pytest.raises(ImportError, match=r"pip install 'shufflepoint\[s3\]'"):
        storage.info("s3://bucket/a.bin")


def test_a_memory_glob_and_fetch(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe({"/sp-test/a.bin": b"aaa", "/sp-test/b.bin": b"bbbb"})
    storage = Storage(**FAST)
    urls = storage.expand("memory://sp-test/*.bin")
    assert [storage.info(u).size for u in urls] == [3, 4] and all(u.startswith("memory://") for u in urls)
    storage.fetch(urls[1], str(tmp_path / "b"), 4)
    assert (tmp_path / "b").read_bytes() == b"bbbb"


def _fetch_in_child(storage, url, dest, size, queue):
    try:
        storage.fetch(url, dest, size)
        queue.put(("ok", storage._fs(url) is not None))
    except BaseException as error:  # reported to the parent
        queue.put(("error", repr(error)))


def test_a_forked_child_makes_its_own_filesystem(s3, objects, tmp_path):
    bucket, files = objects
    storage = Storage(s3.storage_options, **FAST)
    url = f"s3://{bucket}/web/part-00000.jsonl"
    parent_fs = storage._fs(url)
    storage.fetch(url, str(tmp_path / "parent"), 1000)  # the parent's client and loop are live
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_fetch_in_child, args=(storage, url, str(tmp_path / "child"), 1000, queue))
    child.start()
    assert queue.get(timeout=30) == ("ok", True)
    child.join(10)
    assert (tmp_path / "child").read_bytes() == files["web/part-00000.jsonl"]
    assert storage._fs(url) is parent_fs and [pid for pid, _ in storage._filesystems] == [os.getpid()]


# -- which faults are transient ----------------------------------------------------------------
def test_faults_are_classified_by_what_retrying_can_fix():
    botocore = pytest.importorskip("botocore.exceptions")
    aiohttp = pytest.importorskip("aiohttp")

    def client_error(status, code):
        return botocore.ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Get")

    wrapped = OSError(errno.EREMOTEIO, "Internal Server Error")
    wrapped.__cause__ = client_error(500, "500")
    transient = [wrapped, client_error(503, "SlowDown"), client_error(400, "RequestTimeout"),
                 aiohttp.ClientPayloadError("Response payload is not completed"), ConnectionResetError(),
                 TimeoutError(), botocore.ReadTimeoutError(endpoint_url="x"),
                 botocore.EndpointConnectionError(endpoint_url="x"), OSError(errno.EBUSY, "Service Unavailable"),
                 faults.Truncated(1, 2)]
    permanent = [PermissionError("AccessDenied"), client_error(403, "AccessDenied"), OSError(errno.EINVAL, "bad"),
                 botocore.NoCredentialsError(), IsADirectoryError()]
    assert [faults.kind(e) for e in transient] == ["transient"] * len(transient)
    assert [faults.kind(e) for e in permanent] == ["permanent"] * len(permanent)
    assert faults.kind(FileNotFoundError("k")) == "missing"
    assert faults.kind(TypeError("a bug")) == "bug"


def test_a_permanent_fault_is_not_retried_and_a_bug_is_raised_as_is(tmp_path):
    calls = []

    def denied():
        calls.append(1)
        raise PermissionError("AccessDenied")

    storage = Storage(retries=5, **FAST)
    with pytest.raises(ShardError, match=r"s3://b/k: downloading failed: PermissionError: AccessDenied \(not "
                                         r"retried"):
        storage._retrying("s3://b/k", "downloading", denied)
    assert calls == [1]
    with pytest.raises(TypeError, match="a bug"):
        storage._retrying("s3://b/k", "downloading", lambda: (_ for _ in ()).throw(TypeError("a bug")))
    with pytest.raises(ValueError, match="retries"):
        Storage(retries=-1)

"""The corpus index and its sidecars: counted once, reused while shards are unchanged, checked on read."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import sidecar


def fake_corpus(sizes):
    """info and count_rows over an in-memory corpus {url: (size, version, rows)}; counts the calls."""
    calls: list[str] = []

    def info(url):
        size, version, _ = sizes[url]
        return size, version

    def count_rows(url, size, version):
        calls.append(url)
        assert (size, version) == sizes[url][:2]
        return sizes[url][2], ""

    return info, count_rows, calls


def urls(n, root="s3://bucket/corpus"):
    return [f"{root}/part-{i:05d}.jsonl" for i in range(n)]


def test_build_counts_every_shard_and_reuses_a_known_index():
    corpus = {u: (100 + i, f"etag{i}", 10 + i) for i, u in enumerate(urls(50))}
    info, count_rows, calls = fake_corpus(corpus)
    built = _index.build(list(corpus), reader="jsonl", options={}, info=info, count=count_rows,
                         threads=4, progress=False)
    assert built.root == "s3://bucket/corpus"
    assert built.rows.tolist() == [10 + i for i in range(50)]
    assert [built.url(i) for i in range(50)] == list(corpus)
    assert sorted(calls) == sorted(corpus)
    changed = dict(corpus)
    changed[urls(50)[7]] = (999, "etag-new", 3)
    info_changed, count_changed, calls = fake_corpus(changed)
    again = _index.build(list(changed), reader="jsonl", options={}, info=info_changed, count=count_changed,
                         known=[built], threads=4, progress=False)
    assert calls == [urls(50)[7]]  # only the rewritten shard is opened again
    assert again.content_hash != built.content_hash
    assert "part-00007.jsonl changed (17 rows, 107 bytes -> 3 rows, 999 bytes)" in _index.changed_shards(built, again)


def test_the_content_hash_ignores_the_root_but_not_versions_rows_sizes_names_or_options():
    corpus = {u: (100, "v1", 10) for u in urls(3)}
    moved = {u.replace("s3://bucket", "/mnt/mirror"): (100, "v1", 10) for u in corpus}
    base = _index.build(list(corpus), reader="jsonl", options={}, info=lambda u: corpus[u][:2],
                        count=lambda u, size, version: (10, ""), progress=False)
    mirror = _index.build(list(moved), reader="jsonl", options={}, info=lambda u: moved[u][:2],
                          count=lambda u, size, version: (10, ""), progress=False)
    assert base.content_hash == mirror.content_hash  # the same versions under another root
    copied = {u: (100, "mtime", 10) for u in moved}
    copy = _index.build(list(copied), reader="jsonl", options={}, info=lambda u: copied[u][:2],
                        count=lambda u, size, version: (10, ""), progress=False)
    assert copy.content_hash != base.content_hash
    assert "every shard has another version: the corpus was copied or moved (s3://bucket/corpus when saved, " \
           "/mnt/mirror/corpus now)" in _index.changed_shards(base, copy)
    one = dict(corpus)
    one[urls(3)[1]] = (100, "v2", 10)
    rewritten = _index.build(list(one), reader="jsonl", options={}, info=lambda u: one[u][:2],
                             count=lambda u, size, version: (10, ""), progress=False)
    assert rewritten.content_hash != base.content_hash
    assert _index.changed_shards(base, rewritten) == (
        "part-00001.jsonl was rewritten (version v1 when saved, v2 now; the same size and rows, other bytes)")
    other_options = _index.build(list(corpus), reader="jsonl", options={"columns": ["a"]},
                                 info=lambda u: corpus[u][:2], count=lambda u, size, version: (10, ""), progress=False)
    assert other_options.content_hash != base.content_hash
    assert "the reader changed" in _index.changed_shards(base, other_options)
    fewer = _index.CorpusIndex(base.root, "jsonl", {}, base.shards[:2])
    assert "part-00002.jsonl is gone" in _index.changed_shards(base, fewer)
    assert "part-00002.jsonl is new" in _index.changed_shards(fewer, base)
    swapped = _index.CorpusIndex(base.root, "jsonl", {}, (base.shards[1], base.shards[0], base.shards[2]))
    assert swapped.content_hash != base.content_hash
    assert _index.changed_shards(base, swapped) == "the same shards in another order"


@pytest.mark.parametrize("given,root", [
    (["/data/a/x.parquet", "/data/a/y.parquet"], "/data/a"),
    (["/data/a/x.parquet", "/data/ab/y.parquet"], "/data"),
    (["s3://b/c4/en/1.json", "s3://b/c4/de/2.json"], "s3://b/c4"),
    (["x.jsonl"], ""),
])
def test_common_root_stops_at_a_folder(given, root):
    assert _index.common_root(given) == root
    assert [_index.join(root, _index.relative(root, u)) for u in given] == given


def _folder_by_folder_root(urls):
    """common_root as it was written before it went by the urls' min and max: each url's folder, then
    their common prefix shortened until every folder is it or under it."""
    folders = [u.rsplit("/", 1)[0] if "/" in u else "" for u in urls]
    prefix = os.path.commonprefix(folders)
    while prefix and not all(f == prefix or f.startswith(prefix.rstrip("/") + "/") for f in folders):
        prefix = prefix[:-1]
    return prefix.rstrip("/")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "/", "//", "ab", "s3://", "x.bin", "a/", "/b"]), max_size=6)
                .map("".join), min_size=1, max_size=5))
def test_common_root_by_min_and_max_is_the_folder_by_folder_root(urls):
    root = _index.common_root(urls)
    assert root == _folder_by_folder_root(urls)
    assert all(u.startswith(root + "/") for u in urls) or not root


def test_sidecars_round_trip_and_refuse_edits(tmp_path):
    corpus = {u: (100, "v", 5) for u in urls(4)}
    built = _index.build(list(corpus), reader="jsonl", options={}, info=lambda u: corpus[u][:2],
                         count=lambda u, size, version: (5, ""), progress=False)
    cache = str(tmp_path / "cache")
    written = sidecar.save(built, cache, "k1")
    assert len(written) == 2  # a remote corpus: no sidecar beside the data
    assert sidecar.load_latest(cache, "k1", built.root) == built
    assert sidecar.load_by_hash(cache, built.content_hash) == built
    assert sidecar.load_latest(cache, "other", built.root) is None
    assert sorted(os.listdir(cache)) == ["corpus-k1.idx", f"index-{built.content_hash}.idx"]
    os.remove(os.path.join(cache, "corpus-k1.idx"))  # a format-2 JSON sidecar, as shufflepoint <= 0.4 wrote it
    path = os.path.join(cache, "corpus-k1.json")
    sidecar.write_json(path, built.to_json())
    assert sidecar.load_latest(cache, "k1", built.root) == built
    assert sidecar.load_latest(cache, "k1", built.root).read_as == 2
    value = json.load(open(path))
    value["shards"][0][3] = 6  # a row count edited by hand
    json.dump(value, open(path, "w"))
    with pytest.raises(ValueError, match="found a content_hash that does not match its shards\n"):
        sidecar.load_latest(cache, "k1", built.root)
    open(path, "w").write("{not json")
    with pytest.raises(ValueError, match=r"found an unreadable corpus index\n.*\n  why: .+\n  fix: delete it"):
        sidecar.load_latest(cache, "k1", built.root)
    json.dump({"format": "shufflepoint-index", "version": 99}, open(path, "w"))
    with pytest.raises(ValueError, match=r"found index version 99\n  expected: one of "):
        sidecar.load_latest(cache, "k1", built.root)


def test_a_local_corpus_gets_a_sidecar_beside_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    corpus = {str(data / f"{i}.jsonl"): (10, "m", 1) for i in range(2)}
    built = _index.build(list(corpus), reader="jsonl", options={}, info=lambda u: corpus[u][:2],
                         count=lambda u, size, version: (1, ""), progress=False)
    written = sidecar.save(built, str(tmp_path / "cache"), "k")
    assert str(data / ".shufflepoint-index-k.idx") in written
    assert sidecar.load_latest(str(tmp_path / "elsewhere"), "k", str(data)) == built


def _build_once(cache, out, barrier):
    barrier.wait()
    with sidecar.building(cache, "shared"):
        known = sidecar.load_latest(cache, "shared", "")
        if known is None:
            with open(out, "a") as f:
                f.write(f"{os.getpid()}\n")
            index = _index.CorpusIndex("s3://b", "jsonl", {}, (_index.ShardRecord("a", 1, "v", 1),))
            sidecar.save(index, cache, "shared")


def test_only_one_of_several_processes_builds_the_index(tmp_path):
    cache, out = str(tmp_path / "cache"), str(tmp_path / "builders")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    processes = [context.Process(target=_build_once, args=(cache, out, barrier)) for _ in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    assert len(open(out).read().split()) == 1
    assert not [name for name in os.listdir(cache) if name.startswith(".tmp-")]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shards=st.integers(1, 12), checksums=st.booleans())
def test_a_rebuild_counts_exactly_the_shards_that_changed_and_names_them(data, shards, checksums):
    """Any mix of resized, rewritten (same size), deleted and new shards: the rebuild counts only the
    changed and new ones, reads the ``more_known`` index only when the first left one uncounted, and
    ``changed_shards`` names each change."""
    names = urls(shards)
    corpus = {u: (100 + i, f"v{i}", 5 + i) for i, u in enumerate(names)}

    def count(url, size, version):
        return now[url][2], ("sha256:" + version if checksums else "")

    now = corpus
    first = _index.build(names, reader="jsonl", options={}, info=lambda u: now[u][:2], count=count,
                         checksums=checksums, progress=False)
    change = data.draw(st.lists(st.sampled_from(["same", "resized", "rewritten", "deleted"]), min_size=shards,
                                max_size=shards))
    added = data.draw(st.integers(0, 2))
    now = {}
    for url, what in zip(names, change, strict=True):
        size, version, rows = corpus[url]
        if what == "resized":
            now[url] = (size + 1, version + "b", rows + 1)
        elif what == "rewritten":
            now[url] = (size, version + "b", rows)
        elif what == "same":
            now[url] = (size, version, rows)
    for extra in urls(shards + added)[shards:]:
        now[extra] = (7, "new", 1)
    listed = list(now)
    if not listed:
        return
    counted, asked = [], []

    def recount(url, size, version):
        counted.append(url)
        return count(url, size, version)

    def more():
        asked.append(True)
        return [first]

    again = _index.build(listed, reader="jsonl", options={}, info=lambda u: now[u][:2], count=recount,
                         more_known=more, checksums=checksums, progress=False)
    expected = {u for u, what in zip(names, change, strict=True) if what in ("resized", "rewritten")}
    expected |= set(urls(shards + added)[shards:])
    assert set(counted) == expected
    assert asked == [True]  # known=() left every shard uncounted
    assert again.rows.tolist() == [now[u][2] for u in listed]
    assert (again.content_hash == first.content_hash) == (listed == names and expected == set())
    if again.root == first.root:
        told = _index.changed_shards(first, again, limit=100)
        for url, what in zip(names, change, strict=True):
            name = _index.relative(first.root, url)
            if what == "deleted":
                assert f"{name} is gone" in told
            elif what == "resized":
                assert f"{name} changed (" in told
            elif what == "rewritten" and "every shard has another version" not in told:
                assert f"{name} was rewritten" in told
    reused = _index.build(listed, reader="jsonl", options={}, info=lambda u: now[u][:2], count=recount,
                          known=[again], more_known=more, checksums=checksums, progress=False)
    assert reused == again and asked == [True]  # nothing left uncounted: the more_known index is not read

"""The node cache (hit/miss, byte limit, LRU and release, many processes, SIGKILL mid-download) and
the background prefetcher that fills it."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import signal
import threading
import time

import pytest

from shufflepoint._errors import ShardError
from shufflepoint._shards.storage.cache import NodeCache, _key
from shufflepoint._shards.storage.prefetch import Prefetcher
from shufflepoint._shards.storage.storage import Storage

FORK = multiprocessing.get_context("fork")


def writer(data: bytes, calls: list[str] | None = None):
    def fetch(dest: str) -> None:
        if calls is not None:
            calls.append(dest)
        with open(dest, "wb") as f:
            f.write(data)
    return fetch


def tmp_files(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".tmp-")]


# -- one process -------------------------------------------------------------------------------
def test_a_miss_fetches_once_then_hits(tmp_path):
    cache = NodeCache(str(tmp_path / "c"))
    calls: list[str] = []
    path = cache.path_for("s3://b/a.jsonl", "v1", 5, writer(b"hello", calls))
    assert open(path, "rb").read() == b"hello" and path.endswith(".jsonl.shard") and len(calls) == 1
    assert os.path.dirname(calls[0]) == str(tmp_path / "c")  # the temporary file sits beside its entry
    os.utime(path, (1, 1))
    assert cache.path_for("s3://b/a.jsonl", "v1", 5, writer(b"XXXXX", calls)) == path and len(calls) == 1
    assert os.stat(path).st_mtime > 1  # a hit is a use: LRU order
    other = cache.path_for("s3://b/a.jsonl", "v2", 3, writer(b"new", calls))  # another version: another entry
    assert other != path and len(calls) == 2 and cache.bytes_used() == 8 and len(cache.entries()) == 2
    assert not tmp_files(tmp_path / "c")


def test_a_failed_or_short_download_leaves_no_entry_and_no_temporary_file(tmp_path):
    cache = NodeCache(str(tmp_path / "c"))

    def broken(dest):
        with open(dest, "wb") as f:
            f.write(b"z" * 40)
        raise ConnectionError("dropped")

    with pytest.raises(ConnectionError):
        cache.path_for("s3://b/half", "v", 100, broken)
    with pytest.raises(ShardError, match=r"s3://b/short: downloaded 40 bytes, the index says 100"):
        cache.path_for("s3://b/short", "v", 100, writer(b"z" * 40))
    assert not os.path.exists(cache.entry("s3://b/half", "v")) and not os.path.exists(cache.entry("s3://b/short", "v"))
    assert not tmp_files(tmp_path / "c") and cache.bytes_used() == 0
    assert open(cache.path_for("s3://b/half", "v", 3, writer(b"abc")), "rb").read() == b"abc"


def test_the_byte_limit_evicts_least_recently_used_and_released_first(tmp_path):
    cache = NodeCache(str(tmp_path / "c"), max_bytes=300)
    for i in range(3):
        cache.path_for(f"s3://b/{i}", "v", 100, writer(b"x" * 100))
        time.sleep(0.01)
    cache.path_for("s3://b/0", "v", 100, writer(b"?"))  # a hit: 0 is now the most recent
    cache.path_for("s3://b/3", "v", 100, writer(b"y" * 100))
    alive = [i for i in range(4) if os.path.exists(cache.entry(f"s3://b/{i}", "v"))]
    assert alive == [0, 2, 3] and cache.bytes_used() == 300
    cache.release("s3://b/3", "v")  # used last, but this node is done with it
    cache.path_for("s3://b/4", "v", 100, writer(b"z" * 100))
    alive = [i for i in range(5) if os.path.exists(cache.entry(f"s3://b/{i}", "v"))]
    assert alive == [0, 2, 4]
    locks = {n for n in os.listdir(tmp_path / "c") if n.endswith(".lock")}
    assert locks == {"evict.lock"} | {_key(f"s3://b/{i}", "v") + ".lock" for i in alive}  # evicted: lock gone too


def test_a_shard_larger_than_the_limit_is_served_alone(tmp_path):
    cache = NodeCache(str(tmp_path / "c"), max_bytes=250)
    cache.path_for("s3://b/small", "v", 100, writer(b"s" * 100))
    big = cache.path_for("s3://b/big", "v", 1000, writer(b"B" * 1000))
    assert open(big, "rb").read() == b"B" * 1000
    assert [p for _, _, p in cache.entries()] == [big]


def test_an_evicted_shard_stays_readable_where_it_is_open_or_mapped(tmp_path):
    import mmap

    cache = NodeCache(str(tmp_path / "c"), max_bytes=100)
    path = cache.path_for("s3://b/a", "v", 100, writer(b"a" * 100))
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cache.path_for("s3://b/b", "v", 100, writer(b"b" * 100))
        assert not os.path.exists(path)
        assert f.read() == b"a" * 100 and mapped[:] == b"a" * 100
        mapped.close()


def test_downloads_in_flight_reserve_room_and_dead_ones_are_swept(tmp_path):
    cache = NodeCache(str(tmp_path / "c"), max_bytes=300)
    for i in range(2):
        cache.path_for(f"s3://b/{i}", "v", 100, writer(b"x" * 100))
    live_key, dead_key = "a" * 32, "d" * 32
    open(tmp_path / "c" / f".tmp-{live_key}-150-xyz", "wb").close()  # another process is downloading 150 bytes
    open(tmp_path / "c" / f".tmp-{dead_key}-900-xyz", "wb").close()  # its writer died: lock free
    with cache._locked(live_key):  # held as by that other process
        cache.path_for("s3://b/2", "v", 100, writer(b"y" * 100))
    assert tmp_files(tmp_path / "c") == [f".tmp-{live_key}-150-xyz"]
    assert cache.bytes_used() == 100  # 100 (new) + 150 (reserved) fit in 300 only without the other two


# -- many processes ----------------------------------------------------------------------------
def _fetch_same(directory, log, barrier, queue):
    cache = NodeCache(directory)
    barrier.wait()

    def fetch(dest):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        with open(dest, "wb") as f:
            for i in range(50):
                f.write(bytes([i]) * 2000)
                time.sleep(0.002)  # slow enough that the others arrive while it runs

    path = cache.path_for("s3://b/shared.bin", "v1", 100_000, fetch)
    with open(path, "rb") as f:
        queue.put(hashlib.sha256(f.read()).hexdigest())


def test_processes_asking_for_one_shard_at_once_fetch_it_once(tmp_path):
    barrier, queue = FORK.Barrier(4), FORK.Queue()
    log = str(tmp_path / "log")
    processes = [FORK.Process(target=_fetch_same, args=(str(tmp_path / "c"), log, barrier, queue)) for _ in range(4)]
    for p in processes:
        p.start()
    digests = [queue.get(timeout=30) for _ in processes]
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    expected = hashlib.sha256(b"".join(bytes([i]) * 2000 for i in range(50))).hexdigest()
    assert digests == [expected] * 4
    assert len(open(log).read().splitlines()) == 1


def _killed_mid_fetch(directory, started):
    def fetch(dest):
        with open(dest, "wb") as f:
            f.write(b"half" * 100)
            f.flush()
            started.set()
            time.sleep(60)  # SIGKILLed here

    NodeCache(directory).path_for("s3://b/k.bin", "v", 1000, fetch)


def test_a_fetcher_sigkilled_mid_write_leaves_no_entry_and_the_next_fetches_cleanly(tmp_path):
    directory = str(tmp_path / "c")
    started = FORK.Event()
    child = FORK.Process(target=_killed_mid_fetch, args=(directory, started))
    child.start()
    assert started.wait(20)
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    cache = NodeCache(directory)
    assert child.exitcode == -signal.SIGKILL and len(tmp_files(directory)) == 1
    assert not os.path.exists(cache.entry("s3://b/k.bin", "v")) and cache.entries() == []
    calls: list[str] = []
    path = cache.path_for("s3://b/k.bin", "v", 1000, writer(b"k" * 1000, calls))
    assert open(path, "rb").read() == b"k" * 1000 and len(calls) == 1
    assert not tmp_files(directory)  # the dead one was swept


def _churn(directory, seed, queue):
    cache = NodeCache(directory, max_bytes=5 * 1000)
    rng = random.Random(seed)
    bad = 0
    for _ in range(40):
        shard = rng.randrange(12)
        data = bytes([shard]) * 1000
        for _attempt in range(3):  # evicted between path_for and open: ask again (see cache.py)
            try:
                with open(cache.path_for(f"s3://b/{shard}", "v", 1000, writer(data)), "rb") as f:
                    bad += f.read() != data
                break
            except FileNotFoundError:
                continue
        else:
            bad += 1
    queue.put(bad)


def test_processes_sharing_a_small_cache_always_read_whole_shards(tmp_path):
    queue = FORK.Queue()
    processes = [FORK.Process(target=_churn, args=(str(tmp_path / "c"), seed, queue)) for seed in range(3)]
    for p in processes:
        p.start()
    assert [queue.get(timeout=60) for _ in processes] == [0, 0, 0]
    for p in processes:
        p.join(30)
    assert NodeCache(str(tmp_path / "c")).bytes_used() <= 5 * 1000 and not tmp_files(tmp_path / "c")


# -- prefetch ----------------------------------------------------------------------------------
@pytest.fixture()
def remote(s3, s3_bucket, tmp_path):
    """Six shards in S3, a Storage, a NodeCache and a lookup(url) -> local path, as the dataset has."""
    files = {f"p/{i}.bin": bytes([i]) * (1000 + i) for i in range(6)}
    urls = s3.put_files(s3_bucket, files)
    storage = Storage(s3.storage_options, retries=1, backoff=0.001)
    infos = {u: storage.info(u) for u in urls}
    cache = NodeCache(str(tmp_path / "c"))

    def lookup(url):
        info = infos[url]
        return cache.path_for(url, info.version, info.size, lambda dest: storage.fetch(url, dest, info.size))

    return urls, files, cache, lookup


def test_scheduled_shards_land_in_the_cache(s3, remote):
    urls, files, cache, lookup = remote
    prefetcher = Prefetcher(lookup, max_ahead=4)
    prefetcher.schedule(urls[:4] + urls[:2])  # duplicates are skipped
    assert prefetcher.wait(20)
    assert len(cache.entries()) == 4 and prefetcher.errors == {}
    requests = s3.faults.requests
    for url in urls[:4]:  # the foreground finds them there: no request
        assert open(lookup(url), "rb").read() == files[url.split("/", 3)[3]]
    assert s3.faults.requests == requests
    prefetcher.close()


def test_a_background_failure_is_kept_and_surfaces_on_the_foreground_read(s3, s3_bucket, remote, capfd):
    urls, _, cache, lookup = remote
    s3.delete(s3_bucket, urls[5].split("/", 3)[3])
    prefetcher = Prefetcher(lookup, max_ahead=2)
    prefetcher.schedule([urls[5], urls[4]])
    assert prefetcher.wait(20)
    assert isinstance(prefetcher.errors[urls[5]], ShardError) and len(cache.entries()) == 1
    assert capfd.readouterr().err == ""  # nothing printed by the thread
    with pytest.raises(ShardError, match=r"5\.bin: vanished"):
        lookup(urls[5])
    prefetcher.close()


def test_closed_threads_are_joined_after_their_current_lookup_and_queued_keys_reported():
    """``schedule`` says which keys it queued (the others were in flight or done); ``join`` after ``close`` waits
    for the lookup in flight and drops the rest (what the exit hook of read-ahead relies on)."""
    gate, calls = threading.Event(), []

    def lookup(url: str) -> str:
        calls.append(url)
        gate.wait(10)
        return url

    prefetcher = Prefetcher(lookup, max_ahead=8, threads=1)
    assert prefetcher.schedule(["a", "b", "a"]) == ["a", "b"]
    assert prefetcher.schedule(["b", "c"]) == ["c"]
    time.sleep(0.1)
    prefetcher.close()
    prefetcher.join(0.2)
    assert prefetcher._threads[0].is_alive()  # still in its lookup of "a"
    gate.set()
    prefetcher.join(5)
    assert not prefetcher._threads[0].is_alive() and calls == ["a"]


def test_at_most_max_ahead_are_outstanding_and_done_ones_are_skipped():
    gate, calls = threading.Event(), []

    def lookup(url):
        calls.append(url)
        gate.wait(10)
        return url

    prefetcher = Prefetcher(lookup, max_ahead=3, threads=2)
    prefetcher.schedule([f"u{i}" for i in range(10)])
    assert not prefetcher.wait(0.05)
    assert len(prefetcher._pending) == 3
    gate.set()
    assert prefetcher.wait(10)
    prefetcher.schedule(["u0", "u1", "u2", "u3"])  # only u3 is new
    assert prefetcher.wait(10)
    assert sorted(calls) == ["u0", "u1", "u2", "u3"]
    prefetcher.close()


def _use_parent_prefetcher(prefetcher, queue):
    prefetcher.schedule(["x"])  # the parent's copy: no threads here, so nothing happens
    prefetcher.close()
    mine = Prefetcher(lambda url: url, max_ahead=1)
    mine.schedule(["y"])
    queue.put((prefetcher.wait(1), mine.wait(10)))


def test_a_forked_copy_is_inert_and_the_child_makes_its_own():
    gate = threading.Event()
    prefetcher = Prefetcher(lambda url: gate.wait(10) and url, max_ahead=2)
    prefetcher.schedule(["busy"])  # a thread is mid-lookup while we fork
    queue = FORK.Queue()
    child = FORK.Process(target=_use_parent_prefetcher, args=(prefetcher, queue))
    child.start()
    assert queue.get(timeout=20) == (True, True)
    child.join(10)
    assert child.exitcode == 0
    gate.set()
    assert prefetcher.wait(10)
    prefetcher.close()


def test_a_rank_marks_first_out_the_shards_it_is_done_with_for_the_epoch(s3, s3_bucket, tmp_path):
    """Mid-epoch, the node cache's first-out entries (``release``) are shards whose rows this rank has
    all been served and will not read again this epoch; the shards still ahead are never among them."""
    import numpy as np

    import shufflepoint

    rows = 2000  # windows of 4 tokens a shard; the loader announces chunks of up to 8,192 indices
    for k in range(12):
        s3.put(s3_bucket, f"tok/part-{k:03d}.bin", (np.arange(rows * 4 + 1) + k).astype(np.uint16).tobytes())
    corpus = shufflepoint.Shards(f"s3://{s3_bucket}/tok/*.bin", seq_len=4, dtype="uint16",
                                 storage_options=s3.storage_options, cache_dir=str(tmp_path), progress=False)
    loader = shufflepoint.DataLoader(corpus, 256, seed=3, shuffle_block=rows)
    batches = iter(loader)
    served = [next(batches) for _ in range(60)]  # 15,360 of 24,000 windows
    assert len(served) == 60
    state = loader.state_dict()
    ahead = shufflepoint.DataLoader(corpus, 256, seed=3, shuffle_block=rows)
    ahead.load_state_dict(state)
    from shufflepoint._loading.deal import rank_index_chunks

    rest = ahead._position.rest()[0]  # the rest of the epoch from the state, as the loader deals it
    still_to_read = {corpus.shard_of(i)[0] for chunk in rank_index_chunks(ahead._position.orders.get(0, rest), rest, 0)
                     for i in chunk}
    assert still_to_read and len(still_to_read) < 12
    cache = corpus._access.node_cache()
    released = {s for s in range(12)  # a whole entry, or a partial one (a .bin read by range, _shards/storage/ranged)
                for path in (cache.entry(corpus.index.url(s), corpus.index.shards[s].version),
                             cache.partial(corpus.index.url(s), corpus.index.shards[s].version)[0])
                if os.path.exists(path) and os.stat(path).st_mtime_ns == 0}
    assert released, "no shard was marked done"
    assert not released & still_to_read, f"shards still ahead were marked done: {released & still_to_read}"


def test_a_shard_is_marked_done_once_two_later_chunks_no_longer_hold_it(s3, s3_bucket, tmp_path):
    """The rule itself: a shard of the chunk before the current one, in neither the current one nor the
    one just announced, is released (first out); nothing else is."""
    import numpy as np

    import shufflepoint

    rows = 10
    for k in range(6):
        s3.put(s3_bucket, f"tok/part-{k:03d}.bin", (np.arange(rows * 4 + 1) + k).astype(np.uint16).tobytes())
    corpus = shufflepoint.Shards(f"s3://{s3_bucket}/tok/*.bin", seq_len=4, dtype="uint16",
                                 storage_options=s3.storage_options, cache_dir=str(tmp_path), progress=False)
    for index in range(0, 6 * rows, rows):
        corpus[index]  # every shard in the cache, used now
    cache = corpus._access.node_cache()

    def released() -> set[int]:
        return {s for s in range(6)  # a whole entry, or a partial one (a .bin read by range, _shards/storage/ranged)
                for path in (cache.entry(corpus.index.url(s), corpus.index.shards[s].version),
                             cache.partial(corpus.index.url(s), corpus.index.shards[s].version)[0])
                if os.path.exists(path) and os.stat(path).st_mtime_ns == 0}

    def rows_of(*shards: int) -> list[int]:
        return [s * rows + r for s in shards for r in (0, rows - 1)]

    steps = [(rows_of(0, 1), set()), (rows_of(1, 2), set()), (rows_of(3), {0}), (rows_of(4), {0, 1, 2}),
             (rows_of(3, 5), {0, 1, 2})]
    for chunk, expected in steps:
        corpus.prefetch(np.array(chunk))
        access = corpus._access
        for ahead in (access._prefetcher, access._ranged_ahead and access._ranged_ahead.prefetcher):
            assert ahead is None or ahead.wait(30)  # whole shards, or (the default for .bin) their ranges read ahead
        assert released() == expected, chunk

"""Where shards live: local paths or any fsspec URL, listed, sized and fetched whole, with retries.

Object stores fail transiently (500s, throttling, a connection dropped mid-body, timeouts); each
call is retried with exponential backoff and jitter, and a download resumes where the last
attempt broke off. A download is accepted only with exactly the bytes the index recorded. A shard
that is gone, changed, or keeps failing after the retries is a ``ShardError`` naming it: a sample
is never skipped, and no partial file is ever left behind. The retries here come on top of the
backend's own (botocore's, s3fs's), which stay as the user configured them.

fsspec is imported only when a URL needs it (the ``[s3]``/``[gcs]``/``[fsspec]`` extras); local
paths and ``file://`` never touch it. fsspec filesystems hold sockets and an event loop thread,
so each process (DataLoader workers are forked) makes its own: they are keyed by pid.

Words: docs/glossary.md (shard, byte range, storage deadline).
"""

from __future__ import annotations

import contextlib
import glob as _glob
import os
import posixpath
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from stat import S_ISREG
from typing import IO, Any, NamedTuple, TypeVar, cast

from shufflepoint import _settings as settings
from shufflepoint._errors import Plain, ShardError, refusal
from shufflepoint._shards.index.integrity import stream_checksum
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.faults import (
    NoAnswer,
    Truncated,
    Unanswered,
    changed,
    check_version,
    describe,
    kind,
    out_of_range,
    rate_limited,
    retry_after,
    vanished,
    within,
)

T = TypeVar("T")
_MAX_DELAY_S = 30.0
PUBLISHED_PREFIX = ".shufflepoint-index"  # index sidecars beside a corpus are never shards
_EXTRAS = ("pip install 'shufflepoint[s3]' (s3://), 'shufflepoint[gcs]' (gs://), 'shufflepoint[hf]' (hf://) or "
           "'shufflepoint[fsspec]'")


class ObjectInfo(NamedTuple):
    """What the storage says about one object: its size and a version that changes when it is
    rewritten (ETag, generation or mtime_ns; "" when the backend reports none). A named tuple, not a
    frozen dataclass: a listing makes one per object (1e5 shards: ~0.1 CPU-s of dataclass ``__init__``)."""

    size: int
    version: str


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def _local(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _is_glob(text: str) -> bool:
    # In an http(s) URL a "?" starts the query string, not a wildcard.
    magic = "*[" if text.startswith(("http://", "https://")) else "*?["
    return any(c in text for c in magic)


def _path_part(url: str) -> str:
    return url.split("?", 1)[0] if url.startswith(("http://", "https://")) else url


class Storage:
    """Lists, sizes and fetches shards. ``storage_options`` go to fsspec; each call is retried up
    to ``retries`` times, sleeping ~``backoff * 2**attempt`` seconds (jittered) in between."""

    chunk_bytes = 8 << 20  # one ranged GET per chunk; a retry resumes after the last whole chunk

    def __init__(self, storage_options: dict[str, Any] | None = None, retries: int = 5,
                 backoff: float = 0.2) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(refusal("retries", retries, "an int >= 0", "pass how many times to retry a read"))
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            raise ValueError(refusal("backoff", backoff, "seconds >= 0", "pass the first retry's wait in seconds"))
        self.storage_options = dict(storage_options or {})
        self.retries, self.backoff = retries, float(backoff)
        self._filesystems: dict[tuple[int, str], Any] = {}
        self._listed: dict[str, ObjectInfo] = {}  # what a listing already told us, by URL
        # endpoint -> when the first request it left unanswered began (cleared by any answer): a later request
        # shares that request's deadline, so requests made in turn (a read-ahead's, then the batch's) do not
        # each wait the whole deadline for an endpoint already known silent
        self._silent: dict[str, float] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_filesystems"] = {}  # never across processes
        state["_silent"] = {}
        state["_listed"] = {}  # only the index build needs it; a worker need not carry it
        return state

    # -- fsspec ------------------------------------------------------------------------------
    def _fs(self, url: str) -> Any:
        protocol = url.split("://", 1)[0]
        key = (os.getpid(), protocol)
        found = self._filesystems.get(key)
        if found is None:
            try:
                import fsspec
            except ImportError:
                raise ImportError(refusal(f"reading {url!r}", Plain("no fsspec installed"), "fsspec installed",
                                          _EXTRAS)) from None
            options = {"skip_instance_cache": True, **self.storage_options}  # ours alone: no shared stale cache
            if protocol in ("s3", "s3a"):  # every request bounded (botocore waits 60 s a read, then retries)
                timeout = max(1.0, settings.storage_deadline() / 8)
                options["config_kwargs"] = {"connect_timeout": timeout, "read_timeout": timeout,
                                            **(options.get("config_kwargs") or {})}
            try:
                found = fsspec.filesystem(protocol, **options)
            except ImportError as error:
                raise ImportError(refusal(f"reading {url!r}", Plain(f"no fsspec backend for {protocol!r}"),
                                          "fsspec's backend for it installed", _EXTRAS, why=str(error))) from None
            except ValueError as error:
                raise ValueError(refusal(f"sources {url!r}", Plain(f"the protocol {protocol!r}"), "a protocol fsspec "
                                         "knows", "check the URL", why=str(error))) from None
            self._filesystems[key] = found
        return found

    def _retrying(self, url: str, what: str, call: Callable[[], T],
                  missing: Callable[[], Exception] | None = None, bounded: bool = True) -> T:
        """``call()``, retried on transient faults; anything else is raised at once. All attempts together take
        at most ``SHUFFLEPOINT_STORAGE_DEADLINE`` seconds: an attempt still unanswered then (``bounded``: the call
        runs in a thread of its own and is left to the backend's timeouts) or no time left for another is a
        ShardError naming the endpoint and the request. A whole download (``bounded=False``) is bounded per
        request by the read timeout ``_fs`` sets, and between its attempts by the deadline."""
        deadline, endpoint = settings.storage_deadline(), self.endpoint(url)
        silent = self._silent.get(endpoint)
        started, last = self._clock_of(silent)
        attempts, tried, out_of_time = self.retries + 1, 0, False
        for attempt in range(attempts):
            left = deadline - (time.monotonic() - started)
            if left <= 0 and silent is not None and attempt == 0:
                left = deadline / 8  # one short try: the endpoint may answer again
            elif left <= 0:
                out_of_time = True
                break
            tried = attempt + 1
            try:
                answer = within(call, left) if bounded and is_remote(url) else call()
                self._silent.pop(endpoint, None)
                return answer
            except Unanswered:
                before = f"; before it: {describe(last)}" if last is not None else ""
                last, out_of_time = TimeoutError(f"attempt {tried} still unanswered at the deadline{before}"), True
                break
            except ShardError:
                raise
            except Exception as error:
                found = kind(error)
                if found == "missing":
                    raise (missing() if missing else vanished(url, what)) from error
                if found == "bug":
                    raise
                if found == "permanent":
                    raise ShardError(url, f"{what} failed: {describe(error)} (not retried: not a transient "
                                          "fault)") from error
                last = error
                if attempt + 1 < attempts:
                    backoff = min(_MAX_DELAY_S, self.backoff * 2 ** attempt) * (0.5 + random.random())
                    pause = max(backoff, min(_MAX_DELAY_S, retry_after(error) or 0.0))
                    if pause >= deadline - (time.monotonic() - started):
                        out_of_time = True  # no time left for another attempt
                        break
                    time.sleep(pause)
        if out_of_time and not (last is not None and rate_limited(last)):
            self._silent.setdefault(endpoint, started)
            raise NoAnswer(url, self._unanswered(url, what, deadline, tried, last)) from last
        if isinstance(last, Truncated):
            raise ShardError(url, f"{last} ({what} failed after {attempts} attempts)") from last
        if last is not None and rate_limited(last):
            raise ShardError(url, f"rate limited: {what} was answered HTTP 429 (too many requests) {tried} times, "
                                  "with backoff in between; wait and resume, send fewer requests at once (fewer "
                                  "processes or read-ahead), or use a token with a higher limit (Hub: HF_TOKEN); "
                                  f"raise retries= to wait longer ({describe(last)})") from last
        raise ShardError(url, f"{what} failed after {attempts} attempts: {describe(last)}") from last

    @staticmethod
    def _clock_of(silent: float | None) -> tuple[float, BaseException | None]:
        """(when a request's deadline counts from, the error it starts with): now, or, for an endpoint already
        silent, the deadline of the first request it left unanswered."""
        if silent is None:
            return time.monotonic(), None
        ago = time.monotonic() - silent
        return silent, TimeoutError(f"an earlier request to this endpoint got no answer ({ago:.1f} s ago)")

    def endpoint(self, url: str) -> str:
        """The endpoint requests for ``url`` go to, as the storage options say (or the protocol's default)."""
        options = self.storage_options
        client = options.get("client_kwargs")
        found = options.get("endpoint_url") or (client.get("endpoint_url") if isinstance(client, dict) else None)
        protocol = url.split("://", 1)[0]
        return str(found) if found else f"{protocol}'s default endpoint"

    def _unanswered(self, url: str, what: str, deadline: float, tried: int, last: BaseException | None) -> str:
        return (f"{what} got no answer within {deadline:g} s ({tried} attempt{'s' * (tried != 1)})\n"
                f"  endpoint: {self.endpoint(url)}\n  request: {what} {url}\n  last error: {describe(last)}\n"
                f"  fix: check that the endpoint is up and answers from this node (storage_options' endpoint_url), "
                f"or set {settings.STORAGE_DEADLINE} to wait longer (seconds; now {deadline:g})")

    # -- listing -----------------------------------------------------------------------------
    def expand(self, sources: str | Sequence[str]) -> list[str]:
        """The shard URLs of a list (kept in order), a glob (sorted), a manifest (``.txt``: one path
        or URL a line, relative to the manifest's folder) or a single file. Local paths come back
        absolute, remote ones as full URLs."""
        if isinstance(sources, (list, tuple)):
            return self._listed_sources(sources)
        if not isinstance(sources, str) or not sources:
            raise ValueError(refusal("sources", sources, "a path, URL, glob, manifest or a list of them",
                                     "pass where the shards are, e.g. 'data/*.parquet'"))
        if _is_glob(sources):
            return self._glob(sources)
        if _path_part(sources).endswith(".txt"):
            return self._manifest(sources)
        if not is_remote(sources):
            path = _local(sources)
            if os.path.isdir(path):
                raise ValueError(refusal(f"sources {sources!r}", Plain("a folder"), "shard files",
                                         f"pass a glob such as {os.path.join(sources, '*.parquet')!r}, a list or a "
                                         "manifest"))
            if not os.path.isfile(path):
                raise ValueError(refusal(f"sources {sources!r}", Plain("nothing at that path"),
                                         "a file, glob or manifest that exists", "check the path"))
        return self._listed_sources([sources])

    def _listed_sources(self, sources: Sequence[str]) -> list[str]:
        if not sources or not all(isinstance(s, str) and s for s in sources):
            raise ValueError(refusal("sources", sources, "a non-empty list of paths or URLs (str)",
                                     "pass each shard's path or URL as a string"))
        urls = [s if is_remote(s) else os.path.abspath(_local(s)) for s in sources]
        twice = [url for url, n in Counter(urls).items() if n > 1]
        if twice:
            raise ValueError(refusal(f"sources {twice[0]!r}", Plain("listed twice"), "each shard once",
                                     "list it once (use shufflepoint.Mixture to weight a source)"))
        return urls

    def _glob(self, pattern: str) -> list[str]:
        if not is_remote(pattern):
            found = []
            for path in _glob.glob(os.path.abspath(_local(pattern)), recursive=True):  # absolute matches
                try:
                    stat = os.stat(path)
                except FileNotFoundError:
                    continue  # gone since the listing
                if S_ISREG(stat.st_mode):  # one stat per file: kept for info() (1,000 shards: 1,000 fewer)
                    found.append(path)
                    self._listed[path] = ObjectInfo(*_stat(stat))
            found.sort()
        else:
            found = self._remote_glob(pattern)
        if not found:
            raise ValueError(refusal(f"sources {pattern!r}", Plain("no files"), "a glob that matches shard "
                                     "files", "check the pattern"))
        return found

    def _remote_glob(self, pattern: str) -> list[str]:
        protocol = pattern.split("://", 1)[0]
        fs = self._fs(pattern)
        found = self._retrying(pattern, "listing", lambda: fs.glob(pattern, detail=True),
                               missing=lambda: ValueError(refusal(
                                   f"sources {pattern!r}", Plain("no files"), "a glob that matches shard files",
                                   "check the pattern", why="no such bucket or folder")))
        fs.invalidate_cache()  # later looks at one object (open, info) must ask the storage, not the listing
        urls = []
        for path, detail in sorted(found.items()):
            if detail.get("type", "file") != "file" or path.rsplit("/", 1)[-1].startswith(PUBLISHED_PREFIX):
                continue  # a folder, or the index published beside the corpus: not a shard
            url = path if "://" in path else f"{protocol}://{path}"
            self._listed[url] = ObjectInfo(int(detail["size"]), version_of(detail))
            urls.append(url)
        return urls

    def _manifest(self, manifest: str) -> list[str]:
        if is_remote(manifest):
            fs = self._fs(manifest)
            missing = ValueError(refusal(f"sources {manifest!r}", Plain("no such manifest"),
                                         "a manifest that exists", "check the path"))
            data: bytes = self._retrying(manifest, "reading the manifest", lambda: fs.cat_file(manifest),
                                         missing=lambda: missing)
            folder = _path_part(manifest).rsplit("/", 1)[0]
        else:
            try:
                with open(_local(manifest), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                raise ValueError(refusal(f"sources {manifest!r}", Plain("no such manifest"),
                                         "a manifest that exists", "check the path")) from None
            folder = os.path.dirname(os.path.abspath(_local(manifest)))
        lines = [line.strip() for line in data.decode("utf-8-sig").splitlines()]
        entries = [_resolve(folder, line) for line in lines if line and not line.startswith("#")]
        if not entries:
            raise ValueError(refusal(f"sources {manifest!r}", Plain("a manifest listing no shard"),
                                     "one path or URL a line", "list the shards in it, one a line"))
        return self._listed_sources(entries)

    def remember(self, url: str, info: ObjectInfo) -> None:
        """What a listing kept elsewhere (the node's copy of a Hub listing) says of ``url``: no request for it."""
        self._listed[url] = info

    def retrying(self, url: str, what: str, call: Callable[[], T]) -> T:
        """``call()`` with this storage's retries (``_retrying``): a ShardError naming ``url`` when they run out."""
        return self._retrying(url, what, call)

    # -- one object ----------------------------------------------------------------------------
    def info(self, url: str) -> ObjectInfo:
        """Size and version of one object (from the listing when a glob listed it)."""
        listed = self._listed.get(url)
        if listed is not None:
            return listed
        if hub.is_hub(url):
            found = self._retrying(url, "looking it up", lambda: hub.HubFiles(self.storage_options).info(url))
            if found is None:
                raise ShardError(url, "not found: no such file at that commit of the Hub repository")
            return ObjectInfo(*found)
        if not is_remote(url):
            try:
                stat = os.stat(_local(url))
            except FileNotFoundError:
                raise ShardError(url, "not found: no such file") from None
            if not S_ISREG(stat.st_mode):  # the stat in hand, not a second one (1,000 shards: 2 ms)
                raise ShardError(url, "is a folder, not a shard file")
            return ObjectInfo(*_stat(stat))
        fs = self._fs(url)
        detail = self._retrying(url, "looking it up", lambda: fs.info(url),
                                missing=lambda: ShardError(url, "not found: no such object in the storage"))
        if detail.get("type", "file") != "file":
            raise ShardError(url, f"is a folder, not a shard file: pass a glob such as {url.rstrip('/') + '/*'!r}")
        return ObjectInfo(int(detail["size"]), version_of(detail))

    def fetch(self, url: str, dest: str, size: int, version: str = "") -> None:
        """Download the whole object to the local path ``dest``: exactly ``size`` bytes of the
        object at ``version`` (when the index knows one), or a ShardError (and no ``dest``). A retry
        resumes after the bytes already written."""
        try:
            with open(dest, "wb") as out:
                self._retrying(url, "downloading", lambda: self._fetch_once(url, out, size, version), bounded=False)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)
            raise

    def local_path(self, url: str, size: int, version: str) -> str:
        """The path of a local shard, after checking that it is still the file the index recorded
        (size, and mtime_ns as its version): a ShardError naming what changed otherwise."""
        path = _local(url)
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            raise ShardError(url, "vanished: it was in the index but the file is gone") from None
        check_version(url, size, version, *_stat(stat))
        return path

    def open_local(self, url: str, size: int, version: str) -> tuple[int, str]:
        """A read descriptor of a local shard and its path, checked against the index by the descriptor's
        own ``fstat`` (``local_path`` less one lookup of the path: a resume's first batch opens ~110 shards)."""
        path = _local(url)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ShardError(url, "vanished: it was in the index but the file is gone") from None
        try:
            check_version(url, size, version, *_stat(os.fstat(fd)))
        except BaseException:
            os.close(fd)
            raise
        return fd, path

    @contextlib.contextmanager
    def ranges(self, url: str, size: int, version: str,
               what: str = "reading its metadata") -> Iterator[Callable[[int, int], bytes]]:
        """``read(start, end)`` of one object at the recorded (size, version), for the few bytes
        of metadata a format keeps (a Parquet footer, an .npy header): indexing without a download.
        Each read is retried; a changed object is a ShardError."""
        if not is_remote(url):
            with open(self.local_path(url, size, version), "rb") as local:
                yield lambda start, end: _read_at(local, start, end)
            return
        if hub.is_hub(url):  # one ranged GET per range, pinned to the commit in the URL
            files = hub.HubFiles(self.storage_options)
            yield lambda start, end: self._retrying(url, what, lambda: _hub_range(files, url, start, end, size))
            return
        fs = self._fs(url)
        opened: list[IO[bytes]] = []
        if _is_s3(fs):  # one request per range: the GET's own response says the object's size and version
            yield lambda start, end: self._retrying(url, what, lambda: _s3_range(fs, url, start, end, size, version))
            return

        def read(start: int, end: int) -> bytes:
            def once() -> bytes:
                if not opened:  # s3fs: a HEAD, then every read If-Match its ETag
                    source = fs.open(url, "rb", block_size=max(1, end - start), cache_type="none")
                    check_version(url, size, version, *_reported(source))
                    opened.append(source)
                try:
                    return _read_at(opened[0], start, end)
                except Exception:
                    opened.pop().close()  # the retry looks the object up again (it may have changed)
                    raise
            data: bytes = self._retrying(url, what, once)
            return data

        try:
            yield read
        finally:
            for source in opened:
                source.close()

    def read_small(self, url: str) -> bytes | None:
        """A whole small object (a published index), or None when there is none."""
        if not is_remote(url):
            try:
                with open(_local(url), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        fs = self._fs(url)
        try:
            data: bytes = self._retrying(url, "reading", lambda: fs.cat_file(url),
                                         missing=lambda: FileNotFoundError(url))
        except FileNotFoundError:
            return None
        return data

    def checksum(self, url: str, seen: Callable[[int], None] | None = None) -> str:
        """``sha256:<hex>`` of the object as it is now, streamed (``seen(bytes)`` after each chunk)."""
        def once() -> str:
            with self._open(url) as source:
                return stream_checksum(source, seen)
        found: str = self._retrying(url, "hashing", once)
        return found

    def write_small(self, url: str, data: bytes) -> None:
        """Put a small object (publishing an index beside a remote corpus)."""
        fs = self._fs(url)
        self._retrying(url, "writing", lambda: fs.pipe_file(url, data))

    def _open(self, url: str) -> IO[bytes]:
        if not is_remote(url):
            return open(_local(url), "rb")
        if hub.is_hub(url):
            return self._hub_stream(url, self.info(url).size)
        source: IO[bytes] = self._fs(url).open(url, "rb", block_size=self.chunk_bytes, cache_type="none")
        return source

    def _hub_stream(self, url: str, size: int) -> IO[bytes]:
        """A pinned Hub file of ``size`` bytes, read front to back by ranged GETs (no lookup: the index knows it)."""
        return cast(IO[bytes], hub.HubStream(hub.HubFiles(self.storage_options), url, size))

    def _fetch_once(self, url: str, out: IO[bytes], size: int, version: str) -> None:
        with self._hub_stream(url, size) if hub.is_hub(url) else self._open(url) as source:
            reported, now = _reported(source) if is_remote(url) else _stat(os.fstat(source.fileno()))
            if isinstance(reported, int):
                check_version(url, size, version, reported, now)
            limit = size if isinstance(reported, int) else size + 1  # a stream of unknown size: see it overrun
            done = _resume(source, out)
            while done <= size:
                chunk = source.read(min(self.chunk_bytes, limit - done) or 1)
                if not chunk:
                    break
                out.write(chunk)
                done += len(chunk)
        out.flush()
        if done > size:
            raise ShardError(url, changed(done, size, more=True))
        if done < size:
            raise Truncated(done, size)  # a body that ended early: retried, resuming at ``done``


def _reported(source: Any) -> tuple[int | None, str]:
    """(size, version) an fsspec file reports from its HEAD (s3fs, gcsfs, http: ``details``)."""
    details = getattr(source, "details", None)
    size = getattr(source, "size", None)
    return (size if isinstance(size, int) else None), (version_of(details) if isinstance(details, dict) else "")


def _is_s3(fs: Any) -> bool:
    try:
        from s3fs import S3FileSystem
    except ImportError:
        return False
    return isinstance(fs, S3FileSystem)


def _s3_range(fs: Any, url: str, start: int, end: int, size: int, version: str) -> bytes:
    """Bytes [start, end) of an S3 object by one ranged GET, checked against the (size, version) the
    index recorded from the response's own Content-Range and ETag: the HEAD an fsspec file makes
    first (s3fs's ``open``) doubled the requests of a read by range, and on a fresh node each of its
    round trips is waited for. A changed object is a ShardError; its bytes are dropped unread."""
    from fsspec.asyn import sync

    bucket, key, version_id = fs.split_path(url)

    async def get() -> tuple[int | None, str, bytes]:
        # private: s3fs's public reads (open, cat_file) return the bytes without the response's Content-Range
        # and ETag, and open() sends a HEAD first; one GET that returns both goes through its retrying _call_s3
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key,  # private: see above
                                     Range=f"bytes={start}-{end - 1}",
                                     **({"VersionId": version_id} if version_id else {}))
        try:
            total = str(response.get("ContentRange", "")).rpartition("/")[2]
            found = (int(total) if total.isdigit() else None), str(response.get("ETag", "")).strip('"')
            if found[0] != size or (version and found[1] and found[1] != version):
                return *found, b""
            return *found, await response["Body"].read()
        finally:
            response["Body"].close()

    try:
        found_size, found_version, data = cast(tuple[int | None, str, bytes], sync(fs.loop, get))
    except Exception as error:
        if not out_of_range(error):
            raise
        now = fs.info(url, refresh=True)  # a range past the end: the object is shorter than indexed
        check_version(url, size, version, int(now["size"]), version_of(now))
        raise
    check_version(url, size, version, found_size, found_version)
    if len(data) != end - start:
        raise Truncated(start + len(data), end)
    return data


def _hub_range(files: hub.HubFiles, url: str, start: int, end: int, size: int) -> bytes:
    """Bytes [start, end) of a pinned Hub file, checked against the recorded size by the response's own
    Content-Range (the commit in the URL pins the content: its blob cannot change under it)."""
    found_size, data = files.read(url, start, end)
    check_version(url, size, "", found_size, "")
    if len(data) != end - start:
        raise Truncated(start + len(data), end)
    return data


def _stat(stat: os.stat_result) -> tuple[int, str]:
    """A local file's (size, version): its mtime_ns is what a rewrite changes."""
    return stat.st_size, str(stat.st_mtime_ns)


def _read_at(source: IO[bytes], start: int, end: int) -> bytes:
    source.seek(start)
    data = source.read(end - start)
    if len(data) != end - start:
        raise Truncated(start + len(data), end)
    return data


def _resume(source: IO[bytes], out: IO[bytes]) -> int:
    """Continue after the bytes an earlier attempt wrote, or start again if the source cannot seek."""
    done = out.tell()
    if done:
        try:
            source.seek(done)
        except (OSError, ValueError):
            out.seek(0)
            out.truncate()
            done = 0
    return done


def _resolve(folder: str, line: str) -> str:
    """A manifest line: a URL or absolute path as is, else relative to the manifest's folder."""
    if "://" in line or os.path.isabs(line):
        return line
    if "://" not in folder:
        return os.path.normpath(os.path.join(folder, line))
    protocol, rest = folder.split("://", 1)
    return f"{protocol}://{posixpath.normpath(posixpath.join(rest, line))}"


def version_of(detail: dict[str, Any]) -> str:
    for key in ("generation", "ETag", "etag", "mtime", "LastModified", "last_modified", "Last-Modified", "created",
                "blob_id"):  # blob_id: a Hub file's git object id
        if detail.get(key) is not None:
            return str(detail[key]).strip('"')
    return ""

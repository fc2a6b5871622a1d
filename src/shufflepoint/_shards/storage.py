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
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import os
import posixpath
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from shufflepoint._core.errors import ShardError

T = TypeVar("T")
_MAX_DELAY_S = 30.0
_EXTRAS = "pip install 'shufflepoint[s3]' (s3://), 'shufflepoint[gcs]' (gs://) or 'shufflepoint[fsspec]'"


@dataclass(frozen=True)
class ObjectInfo:
    """What the storage says about one object: its size and a version that changes when it is
    rewritten (ETag, generation or mtime_ns; "" when the backend reports none)."""

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
            raise ValueError(f"retries: found {retries!r}, expected an int >= 0")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
            raise ValueError(f"backoff: found {backoff!r}, expected seconds >= 0")
        self.storage_options = dict(storage_options or {})
        self.retries, self.backoff = retries, float(backoff)
        self._filesystems: dict[tuple[int, str], Any] = {}
        self._listed: dict[str, ObjectInfo] = {}  # what a listing already told us, by URL

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_filesystems"] = {}  # never across processes
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
                raise ImportError(f"reading {url} needs fsspec: {_EXTRAS}") from None
            options = {"skip_instance_cache": True, **self.storage_options}  # ours alone: no shared stale cache
            try:
                found = fsspec.filesystem(protocol, **options)
            except ImportError as error:
                raise ImportError(f"reading {url} needs fsspec's {protocol!r} backend: {_EXTRAS} ({error})") from None
            except ValueError as error:
                raise ValueError(f"sources: {url} has a protocol fsspec does not know ({error})") from None
            self._filesystems[key] = found
        return found

    def _retrying(self, url: str, what: str, call: Callable[[], T],
                  missing: Callable[[], Exception] | None = None) -> T:
        """``call()``, retried on transient faults; anything else is raised at once."""
        attempts = self.retries + 1
        last: BaseException | None = None
        for attempt in range(attempts):
            try:
                return call()
            except ShardError:
                raise
            except Exception as error:
                kind = _kind(error)
                if kind == "missing":
                    raise (missing() if missing else _vanished(url, what)) from error
                if kind == "bug":
                    raise
                if kind == "permanent":
                    raise ShardError(url, f"{what} failed: {_describe(error)} (not retried: not a transient "
                                          "fault)") from error
                last = error
                if attempt + 1 < attempts:
                    time.sleep(min(_MAX_DELAY_S, self.backoff * 2 ** attempt) * (0.5 + random.random()))
        if isinstance(last, _Truncated):
            raise ShardError(url, f"{last} ({what} failed after {attempts} attempts)") from last
        raise ShardError(url, f"{what} failed after {attempts} attempts: {_describe(last)}") from last

    # -- listing -----------------------------------------------------------------------------
    def expand(self, sources: str | Sequence[str]) -> list[str]:
        """The shard URLs of a list (kept in order), a glob (sorted), a manifest (``.txt``: one path
        or URL a line, relative to the manifest's folder) or a single file. Local paths come back
        absolute, remote ones as full URLs."""
        if isinstance(sources, (list, tuple)):
            return self._listed_sources(sources)
        if not isinstance(sources, str) or not sources:
            raise ValueError(f"sources: found {sources!r}, expected a path, URL, glob, manifest or a list of them")
        if _is_glob(sources):
            return self._glob(sources)
        if _path_part(sources).endswith(".txt"):
            return self._manifest(sources)
        if not is_remote(sources):
            path = _local(sources)
            if os.path.isdir(path):
                raise ValueError(f"sources: found the folder {sources!r}, expected shard files: pass a glob such "
                                 f"as {os.path.join(sources, '*.parquet')!r}, a list or a manifest")
            if not os.path.isfile(path):
                raise ValueError(f"sources: found {sources!r}, which is no file, glob or manifest (not found)")
        return self._listed_sources([sources])

    def _listed_sources(self, sources: Sequence[str]) -> list[str]:
        if not sources or not all(isinstance(s, str) and s for s in sources):
            raise ValueError(f"sources: found {sources!r}, expected a non-empty list of paths or URLs (str)")
        urls = [s if is_remote(s) else os.path.abspath(_local(s)) for s in sources]
        twice = [url for url, n in Counter(urls).items() if n > 1]
        if twice:
            raise ValueError(f"sources: {twice[0]} is listed twice; each shard may appear once (use "
                             "shufflepoint.Mixture to weight a source)")
        return urls

    def _glob(self, pattern: str) -> list[str]:
        if not is_remote(pattern):
            found = sorted(os.path.abspath(p) for p in _glob.glob(_local(pattern), recursive=True)
                           if os.path.isfile(p))
        else:
            found = self._remote_glob(pattern)
        if not found:
            raise ValueError(f"sources: the glob {pattern!r} matched no files")
        return found

    def _remote_glob(self, pattern: str) -> list[str]:
        protocol = pattern.split("://", 1)[0]
        fs = self._fs(pattern)
        found = self._retrying(pattern, "listing", lambda: fs.glob(pattern, detail=True),
                               missing=lambda: ValueError(f"sources: the glob {pattern!r} matched no files "
                                                          "(no such bucket or folder)"))
        fs.invalidate_cache()  # later looks at one object (open, info) must ask the storage, not the listing
        urls = []
        for path, detail in sorted(found.items()):
            if detail.get("type", "file") != "file":
                continue
            url = path if "://" in path else f"{protocol}://{path}"
            self._listed[url] = ObjectInfo(int(detail["size"]), _version(detail))
            urls.append(url)
        return urls

    def _manifest(self, manifest: str) -> list[str]:
        if is_remote(manifest):
            fs = self._fs(manifest)
            missing = ValueError(f"sources: the manifest {manifest} does not exist")
            data: bytes = self._retrying(manifest, "reading the manifest", lambda: fs.cat_file(manifest),
                                         missing=lambda: missing)
            folder = _path_part(manifest).rsplit("/", 1)[0]
        else:
            try:
                with open(_local(manifest), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                raise ValueError(f"sources: the manifest {manifest} does not exist") from None
            folder = os.path.dirname(os.path.abspath(_local(manifest)))
        lines = [line.strip() for line in data.decode("utf-8-sig").splitlines()]
        entries = [_resolve(folder, line) for line in lines if line and not line.startswith("#")]
        if not entries:
            raise ValueError(f"sources: the manifest {manifest} lists no shard (one path or URL a line expected)")
        return self._listed_sources(entries)

    # -- one object ----------------------------------------------------------------------------
    def info(self, url: str) -> ObjectInfo:
        """Size and version of one object (from the listing when a glob listed it)."""
        listed = self._listed.get(url)
        if listed is not None:
            return listed
        if not is_remote(url):
            try:
                stat = os.stat(_local(url))
            except FileNotFoundError:
                raise ShardError(url, "not found: no such file") from None
            if not os.path.isfile(_local(url)):
                raise ShardError(url, "is a folder, not a shard file")
            return ObjectInfo(stat.st_size, str(stat.st_mtime_ns))
        fs = self._fs(url)
        detail = self._retrying(url, "looking it up", lambda: fs.info(url),
                                missing=lambda: ShardError(url, "not found: no such object in the storage"))
        if detail.get("type", "file") != "file":
            raise ShardError(url, f"is a folder, not a shard file: pass a glob such as {url.rstrip('/') + '/*'!r}")
        return ObjectInfo(int(detail["size"]), _version(detail))

    def fetch(self, url: str, dest: str, size: int) -> None:
        """Download the whole object to the local path ``dest``: exactly ``size`` bytes, or a
        ShardError (and no ``dest``). A retry resumes after the bytes already written."""
        try:
            with open(dest, "wb") as out:
                self._retrying(url, "downloading", lambda: self._fetch_once(url, out, size))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)
            raise

    def _open(self, url: str) -> IO[bytes]:
        if not is_remote(url):
            return open(_local(url), "rb")
        source: IO[bytes] = self._fs(url).open(url, "rb", block_size=self.chunk_bytes, cache_type="none")
        return source

    def _fetch_once(self, url: str, out: IO[bytes], size: int) -> None:
        with self._open(url) as source:
            reported = os.fstat(source.fileno()).st_size if not is_remote(url) else getattr(source, "size", None)
            if isinstance(reported, int) and reported != size:
                raise ShardError(url, _changed(reported, size))
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
            raise ShardError(url, _changed(done, size, more=True))
        if done < size:
            raise _Truncated(done, size)  # a body that ended early: retried, resuming at ``done``


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


def _vanished(url: str, what: str) -> ShardError:
    return ShardError(url, f"vanished: {what} found no such object, though it was listed or indexed before; "
                           "it was deleted or moved: rebuild the index (delete its sidecar) if the corpus changed")


def _changed(found: int, size: int, more: bool = False) -> str:
    kind = "truncated" if found < size else "changed"
    what = f"more than {size} bytes" if more else f"{found} bytes now"
    return (f"{kind}: the object is {what}, expected {size}: it was rewritten since the index was built; "
            "rebuild the index (delete its sidecar) and restart the epoch")


class _Truncated(OSError):
    """Fewer bytes than recorded, with no error from the backend: retried, then a ShardError."""

    def __init__(self, got: int, size: int) -> None:
        super().__init__(f"truncated: got {got} bytes, expected {size}")


# -- which faults are worth retrying -----------------------------------------------------------
# Recognised by class name along the MRO and the cause chain, so botocore, aiohttp, urllib3,
# requests and google are never imported here (and a fault wrapped by s3fs in an OSError is still seen).
_TRANSIENT_NAMES = frozenset({
    "TimeoutError", "ConnectionError", "IncompleteRead", "RemoteDisconnected", "FSTimeoutError", "FileExpired",
    "ClientPayloadError", "ClientConnectionError", "ServerDisconnectedError", "ServerTimeoutError",  # aiohttp
    "HTTPClientError", "ResponseStreamingError", "IncompleteReadError", "ResponseParserError",  # botocore
    "ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError",
    "ProtocolError", "ChunkedEncodingError", "TransportError",  # urllib3, requests, google-auth
    "SSLEOFError", "SSLZeroReturnError",
    "ServiceUnavailable", "TooManyRequests", "InternalServerError", "BadGateway", "GatewayTimeout",  # google
})
_TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                              "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequestsException",
                              "BandwidthLimitExceeded", "RequestThrottled"})
_TRANSIENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "EIO", "EREMOTEIO", "EBUSY", "EAGAIN", "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE",
    "ENETUNREACH", "ENETDOWN", "ENETRESET", "EHOSTUNREACH", "EHOSTDOWN") if hasattr(errno, name))
_STORAGE_MODULES = frozenset({"aiohttp", "botocore", "aiobotocore", "s3fs", "gcsfs", "fsspec", "google", "urllib3",
                              "requests", "adlfs", "azure", "http", "ssl", "socket"})


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _status(error: BaseException) -> int | None:
    """The HTTP status an error carries (aiohttp ``status``, gcsfs ``code``, botocore ``response``)."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status if isinstance(status, int) else None
    for name in ("status", "status_code", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def _transient(error: BaseException) -> bool:
    if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__):
        return True
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return True
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error", {}).get("Code") in _TRANSIENT_CODES:
        return True
    status = _status(error)
    return status is not None and (status >= 500 or status in (408, 429))


def _kind(error: BaseException) -> str:
    """"missing", "transient" (retry), "permanent" (a ShardError now) or "bug" (raised as is)."""
    if isinstance(error, FileNotFoundError) or (isinstance(error, OSError) and error.errno == errno.ENOENT):
        return "missing"
    if isinstance(error, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return "permanent"
    if isinstance(error, _Truncated) or any(_transient(e) for e in _chain(error)):
        return "transient"
    if isinstance(error, OSError) or type(error).__module__.split(".", 1)[0] in _STORAGE_MODULES:
        return "permanent"
    return "bug"


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "no attempt was made"
    text = f"{type(error).__name__}: {error}"
    cause = error.__cause__
    if cause is not None and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text


def _version(detail: dict[str, Any]) -> str:
    for key in ("generation", "ETag", "etag", "mtime", "LastModified", "last_modified", "created"):
        if detail.get(key) is not None:
            return str(detail[key]).strip('"')
    return ""

"""A real S3-compatible server on 127.0.0.1 for the tests, with a fault-injecting proxy in front.

Nothing is monkeypatched: moto's server mode runs as a subprocess (a real HTTP server), s3fs
talks to it over HTTP through a small stdlib proxy that forwards every request, except when told
to misbehave. Use it through the ``s3_server`` (session) or ``s3`` (faults reset around each
test) fixtures of ``tests/conftest.py``, or directly::

    with S3Server() as s3:                    # or S3Server().start() ... .stop()
        urls = s3.upload("bucket", "local/folder", prefix="web/")   # or s3.put_files(bucket, {key: bytes})
        storage = Storage(s3.storage_options)  # s3fs -> proxy -> moto
        s3.fail_next(3)        # the next 3 requests through the proxy: HTTP 500 InternalError
        s3.fail_next(2, 503)   # ... or 503 SlowDown (throttling)
        s3.drop_next(2)        # the next 2 GETs with a body: headers + half the body, then the
                               # connection is closed (reset=True: closed with a TCP RST)
        s3.fail_next(1, only="part-00003")  # only requests whose path contains this text count
        s3.drop_next(1, after=2)  # let 2 GETs through, then drop one
        s3.faults.injected     # {"fail": n, "drop": n} injected so far; s3.faults.requests: all requests;
                               # s3.faults.log: the latest (method, path, Range header)
        s3.reset()             # forward everything again, counters at 0
        s3.counts.snapshot("/part-")  # GET body bytes per S3 access key (of paths containing "/part-")
        s3.counts.reset()
        s3.shape(latency_s=0.03, bytes_per_s=100e6)  # each GET's body after 30 ms, at 100 MB/s per
                               # connection: an object store's round trip and rate (the benchmarks)

The proxy (``CountingProxy``) adds up the body bytes of every GET it answers per S3 access key and
path: a client that signs with its own key (``storage_options["key"]``; moto accepts any) is one
counted node, which is how the locality tests and benchmarks tell simulated nodes apart.

Attributes: ``endpoint_url`` (through the proxy), ``direct_url`` (moto itself, never faulty),
``storage_options`` (for s3fs: credentials, the proxy endpoint, botocore's own retries off, so
500s reach shufflepoint's retry loop instead of being absorbed below it). s3fs itself still
retries a dropped body (``S3FileSystem.retries``, 5) before its caller sees it: drop more GETs
than that, or set ``retries = 1`` on the s3fs instance, to reach the caller's retries.
``client()`` is a boto3 client straight to moto (setup and tampering never meet the faults):
``create_bucket``, ``upload``, ``put``, ``put_files``, ``delete``.
"""

from __future__ import annotations

import atexit
import collections
import http.client
import http.server
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

_ERRORS = {500: ("InternalError", "We encountered an internal error. Please try again."),
           503: ("SlowDown", "Please reduce your request rate.")}
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length", "expect",
               "te", "trailer", "upgrade"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Faults:
    """What the proxy does to the next requests; shared by its handler threads. ``log`` keeps the
    latest requests as (method, path, Range header or "")."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.injected = {"fail": 0, "drop": 0}
        self.log: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=10_000)
        self.latency_s, self.bytes_per_s = 0.0, 0.0  # the link's shape for GETs (``S3Server.shape``)
        self.clear()

    def clear(self) -> None:
        with self.lock:
            self.fail, self.fail_status, self.fail_only, self.fail_after = 0, 500, None, 0
            self.drop, self.drop_reset, self.drop_only, self.drop_after = 0, False, None, 0

    def take(self, kind: str, path: str) -> bool:
        """Whether this request gets fault ``kind`` ("fail" or "drop"); counts it if so."""
        with self.lock:
            only = getattr(self, kind + "_only")
            if getattr(self, kind) <= 0 or (only is not None and only not in path):
                return False
            if getattr(self, kind + "_after") > 0:  # let this one through first
                setattr(self, kind + "_after", getattr(self, kind + "_after") - 1)
                return False
            setattr(self, kind, getattr(self, kind) - 1)
            self.injected[kind] += 1
            return True


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection is closed after this
    # The headers and a small body are two writes: with Nagle's algorithm the body waited for the client's
    # delayed ACK of the headers, ~40 ms on every small GET (a byte range), 13x what moto itself takes.
    disable_nagle_algorithm = True
    upstream: int
    faults: Faults

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        with self.faults.lock:
            self.faults.requests += 1
            self.faults.log.append((self.command, self.path, self.headers.get("Range", "")))
        body = self._body()
        if self.faults.take("fail", self.path):
            self._error(self.faults.fail_status)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        drop = (self.command == "GET" and response.status in (200, 206) and len(data) > 1
                and self.faults.take("drop", self.path))
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", response.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if not drop:
            self._send(data)
            return
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self._cut()

    def _send(self, data: bytes) -> None:
        """The body, over the link's shape: a GET's first byte after ``latency_s``, then at most
        ``bytes_per_s`` on this connection (sleeps: the proxy's CPU is not what is shaped)."""
        latency, rate = self.faults.latency_s, self.faults.bytes_per_s
        if self.command != "GET" or (latency <= 0 and rate <= 0):
            self.wfile.write(data)
            return
        start = time.monotonic() + latency
        time.sleep(latency)
        for at in range(0, len(data), 1 << 16):
            self.wfile.write(data[at:at + (1 << 16)])
            if rate > 0:
                time.sleep(max(0.0, start + (at + (1 << 16)) / rate - time.monotonic()))

    def _error(self, status: int) -> None:
        code, message = _ERRORS.get(status, ("InternalError", "injected by the test proxy"))
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
                "<RequestId>shufflepoint-test-proxy</RequestId></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _cut(self) -> None:
        """Close the connection mid-body: a FIN, or with ``drop_reset`` a TCP RST."""
        self.close_connection = True
        if self.faults.drop_reset:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815


class GetCounts:
    """GET body bytes and GETs per (access key, path), added by the proxy's handler threads; read per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._bytes: collections.Counter[tuple[str, str]] = collections.Counter()
        self._gets: collections.Counter[tuple[str, str]] = collections.Counter()

    def add(self, key: str, path: str, size: int) -> None:
        with self.lock:
            self._bytes[key, path] += size
            self._gets[key, path] += 1

    def snapshot(self, only: str | None = None) -> dict[str, int]:
        """Bytes per access key so far, of the paths containing ``only`` (all paths: None)."""
        return self._per_key(self._bytes, only)

    def gets(self, only: str | None = None) -> dict[str, int]:
        """GETs per access key so far, of the paths containing ``only``."""
        return self._per_key(self._gets, only)

    def total(self, only: str | None = None) -> int:
        return sum(self.snapshot(only).values())

    def _per_key(self, counter: collections.Counter[tuple[str, str]], only: str | None) -> dict[str, int]:
        found: collections.Counter[str] = collections.Counter()
        with self.lock:
            for (key, path), value in counter.items():
                if only is None or only in path:
                    found[key] += value
        return dict(found)

    def reset(self) -> None:
        with self.lock:
            self._bytes.clear()
            self._gets.clear()


def access_key(authorization: str) -> str:
    """The access key an AWS SigV4 ``Authorization`` header names ("?" when unsigned)."""
    if "Credential=" not in authorization:
        return "?"
    return authorization.split("Credential=", 1)[1].split("/", 1)[0]


class CountingProxy(_Proxy):
    """The proxy, counting the body bytes of every GET it answers per access key and path (``counts``)."""

    counts: GetCounts

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "content-length" and self.command == "GET":
            self.counts.add(access_key(self.headers.get("Authorization", "")), self.path.split("?", 1)[0],
                            int(value))
        super().send_header(keyword, value)


class S3Server:
    """moto's S3 server as a subprocess plus the fault-injecting proxy; see the module docstring."""

    def __init__(self) -> None:
        self.port, self.proxy_port = free_port(), free_port()
        self.direct_url = f"http://127.0.0.1:{self.port}"
        self.endpoint_url = f"http://127.0.0.1:{self.proxy_port}"
        self.faults = Faults()
        self.counts = GetCounts()
        self._process: subprocess.Popen[bytes] | None = None
        self._proxy: http.server.ThreadingHTTPServer | None = None
        self._client: Any = None

    @property
    def storage_options(self) -> dict[str, Any]:
        """s3fs options reaching moto through the proxy, with botocore's own retries off."""
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
                "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"},
                                  "connect_timeout": 5, "read_timeout": 20}}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> S3Server:
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION="us-east-1")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(self.stop)  # even if the fixture's teardown never runs
        self._wait_until_up(timeout)
        handler = type("Proxy", (CountingProxy,), {"upstream": self.port, "faults": self.faults,
                                                   "counts": self.counts})
        self._proxy = http.server.ThreadingHTTPServer(("127.0.0.1", self.proxy_port), handler)
        self._proxy.daemon_threads = True
        threading.Thread(target=self._proxy.serve_forever, name="s3-test-proxy", daemon=True).start()
        return self

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self._process.returncode} (port {self.port} taken?)")
            try:
                with urllib.request.urlopen(self.direct_url + "/moto-api/data.json", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not answer on {self.direct_url} within {timeout} s") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------------
    def shape(self, latency_s: float = 0.0, bytes_per_s: float = 0.0) -> None:
        """Shape every GET's body from now on: sent ``latency_s`` after the request, at most ``bytes_per_s``
        per connection (0: unshaped, the default), as an object store's round trip and per-stream rate."""
        self.faults.latency_s, self.faults.bytes_per_s = float(latency_s), float(bytes_per_s)

    def fail_next(self, n: int, status: int = 500, only: str | None = None, after: int = 0) -> None:
        """Answer the next ``n`` requests (whose path contains ``only``, after letting ``after`` of
        them through) with ``status``: 500 InternalError, or 503 SlowDown."""
        with self.faults.lock:
            f = self.faults
            f.fail, f.fail_status, f.fail_only, f.fail_after = n, status, only, after

    def drop_next(self, n: int, reset: bool = False, only: str | None = None, after: int = 0) -> None:
        """Cut the next ``n`` GETs with a body (same ``only``/``after``) after half the body:
        a FIN, or a TCP RST with ``reset``."""
        with self.faults.lock:
            f = self.faults
            f.drop, f.drop_reset, f.drop_only, f.drop_after = n, reset, only, after

    def reset(self) -> None:
        """No more faults nor shape, and the counters (``injected``, ``requests``, ``log``) start again."""
        self.faults.clear()
        self.shape()
        with self.faults.lock:
            self.faults.injected = {"fail": 0, "drop": 0}
            self.faults.requests = 0
            self.faults.log.clear()
        self.counts.reset()

    # -- data, straight to moto ----------------------------------------------------------------
    def client(self) -> Any:
        """A boto3 client straight to moto (made once: boto3 clients are thread-safe)."""
        if self._client is None:
            import boto3

            self._client = boto3.client("s3", endpoint_url=self.direct_url, region_name="us-east-1",
                                        aws_access_key_id="testing", aws_secret_access_key="testing")
        return self._client

    def create_bucket(self, bucket: str) -> None:
        client = self.client()
        if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=bucket)

    def put_files(self, bucket: str, files: dict[str, bytes]) -> list[str]:
        """Create ``bucket`` and put ``{key: data}``; returns the ``s3://`` URLs, in key order."""
        self.create_bucket(bucket)
        client = self.client()
        for key, data in files.items():
            client.put_object(Bucket=bucket, Key=key, Body=data)
        return [f"s3://{bucket}/{key}" for key in sorted(files)]

    def upload(self, bucket: str, folder: str, prefix: str = "") -> list[str]:
        """Create ``bucket`` and put every file of ``folder`` under ``prefix``; returns the URLs."""
        files = {}
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not name.startswith("."):
                with open(path, "rb") as f:
                    files[prefix + name] = f.read()
        return self.put_files(bucket, files)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, bucket: str, key: str) -> None:
        self.client().delete_object(Bucket=bucket, Key=key)

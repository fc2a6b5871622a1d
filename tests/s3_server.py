"""A real S3-compatible server for the tests, with a fault-injecting proxy in front of it.

``S3Server.start()`` runs moto's server mode as a subprocess on 127.0.0.1 (a real HTTP server, read
by s3fs over HTTP: nothing is monkeypatched), and a small threading HTTP proxy on another port that
forwards every request to it, except when told to misbehave:

- ``fail_next(n)``: the next n requests get an S3 ``InternalError`` (HTTP 500);
- ``drop_next(n)``: the next n GETs with a body get the headers and half the body, then the
  connection is closed (a connection dropped mid-shard);
- ``reset()``: back to forwarding everything.

``storage_options`` points s3fs at the proxy with botocore's own retries off, so every fault
reaches shufflepoint's retry loop instead of being hidden below it. ``upload(bucket, files)`` and
``delete(bucket, key)`` go straight to moto.
"""

from __future__ import annotations

import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

_500 = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
        b"<Message>injected by the test proxy</Message></Error>")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Faults:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fail = self.drop = 0
        self.injected = {"fail": 0, "drop": 0}
        self.requests = 0

    def take(self, kind: str) -> bool:
        with self.lock:
            left = getattr(self, kind)
            if left <= 0:
                return False
            setattr(self, kind, left - 1)
            self.injected[kind] += 1
            return True


def _handler(upstream: int, faults: _Faults) -> type[http.server.BaseHTTPRequestHandler]:
    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _forward(self) -> None:
            with faults.lock:
                faults.requests += 1
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if faults.take("fail"):
                self.send_response(500)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(_500)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(_500)
                self.close_connection = True
                return
            connection = http.client.HTTPConnection("127.0.0.1", upstream, timeout=30)
            connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in ("connection", "content-length"):
                    connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body or b"")))
            connection.endheaders(body)
            response = connection.getresponse()
            data = response.read()
            connection.close()
            drop = self.command == "GET" and len(data) > 1 and response.status in (200, 206) and faults.take("drop")
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("connection", "content-length", "transfer-encoding"):
                    self.send_header(name, value)
            length = response.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data[: len(data) // 2] if drop else data)
            self.wfile.flush()
            self.close_connection = True
            if drop:
                self.connection.shutdown(socket.SHUT_RDWR)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    return Proxy


class S3Server:
    def __init__(self) -> None:
        self.port, self.proxy_port = free_port(), free_port()
        self.direct_url = f"http://127.0.0.1:{self.port}"
        self.endpoint_url = f"http://127.0.0.1:{self.proxy_port}"
        self.faults = _Faults()
        self._process: subprocess.Popen[bytes] | None = None
        self._proxy: http.server.ThreadingHTTPServer | None = None

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"key": "testing", "secret": "testing", "skip_instance_cache": True, "use_listings_cache": False,
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
                "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}

    def start(self) -> S3Server:
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
        self._process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                          str(self.port)], env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError("moto server did not start within 30 s")
        self._proxy = http.server.ThreadingHTTPServer(("127.0.0.1", self.proxy_port),
                                                      _handler(self.port, self.faults))
        self._proxy.daemon_threads = True
        threading.Thread(target=self._proxy.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)

    def fail_next(self, n: int) -> None:
        self.faults.fail = n

    def drop_next(self, n: int) -> None:
        self.faults.drop = n

    def reset(self) -> None:
        self.faults.fail = self.faults.drop = 0

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.direct_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def upload(self, bucket: str, folder: str, prefix: str = "") -> list[str]:
        """Create ``bucket`` and put every file of ``folder`` under ``prefix``; returns the URLs."""
        client = self.client()
        if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
            client.create_bucket(Bucket=bucket)
        urls = []
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not name.startswith("."):
                key = f"{prefix}{name}"
                client.upload_file(path, bucket, key)
                urls.append(f"s3://{bucket}/{key}")
        return urls

    def delete(self, bucket: str, key: str) -> None:
        self.client().delete_object(Bucket=bucket, Key=key)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

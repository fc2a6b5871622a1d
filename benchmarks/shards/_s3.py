"""The tests' S3-compatible server (moto in server mode behind a proxy, tests/s3_server.py), with the
proxy counting the body bytes it sends back for GETs: the bytes a loader read from the bucket."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import s3_server  # noqa: E402  (tests/s3_server.py, imported as the tests do)

BUCKET = "bench"


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = 0
        self.gets = 0

    def reset(self) -> None:
        with self.lock:
            self.bytes, self.gets = 0, 0


COUNTER = Counter()


class _CountingProxy(s3_server._Proxy):
    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "content-length" and self.command == "GET":
            with COUNTER.lock:
                COUNTER.bytes += int(value)
                COUNTER.gets += 1
        super().send_header(keyword, value)


def start() -> s3_server.S3Server:
    """moto plus the counting proxy; the caller stops it."""
    s3_server._Proxy = _CountingProxy  # S3Server.start() builds its handler from this name
    return s3_server.S3Server().start()


def upload(server: s3_server.S3Server, folder: Path, prefix: str) -> tuple[str, int]:
    """Every file under ``folder`` to s3://bench/<prefix>/ (sub-folders kept); the URL and the bytes."""
    server.create_bucket(BUCKET)
    client = server.client()
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".shufflepoint")):
        data = path.read_bytes()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(folder)}", Body=data)
        total += len(data)
    return f"s3://{BUCKET}/{prefix}", total

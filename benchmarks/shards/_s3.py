"""The tests' S3-compatible server (moto in server mode behind a proxy, tests/s3_server.py), whose proxy counts
the body bytes it sends back for GETs (``server.counts``): the bytes a loader read from the bucket."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import s3_server  # noqa: E402  (tests/s3_server.py, imported as the tests do)

BUCKET = "bench"


def start() -> s3_server.S3Server:
    """moto plus the tests' counting proxy (``server.counts``: GET bytes per access key); the caller stops it."""
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

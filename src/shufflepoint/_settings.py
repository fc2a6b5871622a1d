"""The ``SHUFFLEPOINT_*`` environment settings, each read when it is used, never at import.

A setting read at import breaks ``import shufflepoint`` on a bad value and cannot change inside a
process (tests had to patch module globals). Each function here reads its variable on every call
(a dictionary lookup), and refuses a bad value by name where it is used.

- ``SHUFFLEPOINT_RANGED_READS`` (``ranged_reads()``): unset, by format (Parquet and token shards by range);
  ``1``, every format that can; ``0``, none (remote shards downloaded whole).
- ``SHUFFLEPOINT_DECODED_BYTES`` (``decoded_bytes()``): the bytes of decoded Parquet row groups one process
  keeps (default 256 MiB).
- ``SHUFFLEPOINT_KEPT_IDS_BYTES`` (``kept_ids_bytes()``): the bytes of decoded token ids a node keeps in its
  cache folder (default 8 GiB).
- ``SHUFFLEPOINT_STORAGE_DEADLINE`` (``storage_deadline()``): the seconds one request to remote storage may
  take, its retries included, before a ``ShardError`` names the endpoint and the request (default 120).
"""

from __future__ import annotations

import os

from shufflepoint._errors import refusal

RANGED_READS = "SHUFFLEPOINT_RANGED_READS"
DECODED_BYTES = "SHUFFLEPOINT_DECODED_BYTES"
KEPT_IDS_BYTES = "SHUFFLEPOINT_KEPT_IDS_BYTES"
STORAGE_DEADLINE = "SHUFFLEPOINT_STORAGE_DEADLINE"
DEFAULT_STORAGE_DEADLINE_S = 120.0
DEFAULT_DECODED_BYTES = 256 << 20
DEFAULT_KEPT_IDS_BYTES = 8 << 30


def ranged_reads() -> bool | None:
    """Whether remote shards are read by byte range: True (every format that can), False (none) or
    None (unset: the default, by format)."""
    text = os.environ.get(RANGED_READS, "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(refusal(RANGED_READS, text, "1 (every format that can read by range), 0 "
                                 "(none: remote shards downloaded whole) or unset (the default: by format)",
                                 "set it to 1 or 0, or unset it"))
    return None if not text else text == "1"


def _bytes(name: str, default: int, what: str) -> int:
    text = os.environ.get(name, "").strip()
    if not text:  # unset or empty
        return default
    value = int(text) if text.isdigit() else -1
    if value < 0:
        raise ValueError(refusal(name, text, f"a number of bytes >= 0 (0 keeps no {what})",
                                 f"set {name} to a number of bytes, or unset it"))
    return value


def decoded_bytes() -> int:
    """The bytes of decoded Parquet row groups one process keeps, all its open files together."""
    return _bytes(DECODED_BYTES, DEFAULT_DECODED_BYTES, "decoded group")


def kept_ids_bytes() -> int:
    """The bytes of decoded token ids a node keeps in its cache folder."""
    return _bytes(KEPT_IDS_BYTES, DEFAULT_KEPT_IDS_BYTES, "decoded token ids")


def storage_deadline() -> float:
    """The seconds one request to remote storage may take, all its attempts together (a listing, a HEAD, a ranged
    GET; a whole download's each chunk), before it is named as failed."""
    text = os.environ.get(STORAGE_DEADLINE, "").strip()
    if not text:
        return DEFAULT_STORAGE_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:  # also NaN
        raise ValueError(refusal(STORAGE_DEADLINE, text, "seconds in (0, 86400], e.g. 120",
                                 f"set {STORAGE_DEADLINE} to a number of seconds, or unset it (120)"))
    return value

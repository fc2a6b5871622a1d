"""The shard formats by name: which reader a ``format=`` means, and which a file's suffix implies.

Suffixes inferred (case-insensitive, a URL's ``?query`` ignored): ``.parquet``/``.pq`` parquet;
``.jsonl``, ``.ndjson`` and their ``.gz``/``.zst``/``.zstd`` forms, and ``.json.gz``/``.json.zst``
(C4 and the Pile ship JSON Lines under those names) jsonl; ``.tar`` webdataset; ``.bin``/``.npy``
tokens; ``.arrow`` arrow. A bare ``.json`` is not inferred: it is as often one document as JSON
Lines, so ``format="jsonl"`` must say so.

Words: docs/glossary.md (shard).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.readers._common import suffix_of
from shufflepoint._shards.readers.arrow import ArrowReader, data_files_in_state, saved_dataset_files
from shufflepoint._shards.readers.base import OpenShard, Reader
from shufflepoint._shards.readers.jsonl import JsonlReader
from shufflepoint._shards.readers.parquet import ParquetReader
from shufflepoint._shards.readers.tokens import TokensReader
from shufflepoint._shards.readers.webdataset import WebDatasetReader

__all__ = ["READERS", "OpenShard", "Reader", "data_files_in_state", "infer_format", "make_reader",
           "saved_dataset_files"]

READERS: dict[str, type[Any]] = {
    cls.name: cls for cls in (ArrowReader, JsonlReader, ParquetReader, TokensReader, WebDatasetReader)
}


def _known() -> str:
    return ", ".join(sorted(READERS))


def make_reader(format: str, **options: Any) -> Reader:
    """The reader named ``format``, built with ``options`` (an option given as None is left out).

    Raises ValueError naming the field: an unknown format, an option that reader does not take, a
    value out of range, or a required option missing (``tokens`` needs ``seq_len``)."""
    cls = READERS.get(format)
    if cls is None:
        raise ValueError(refusal("format", format, f"one of {_known()}", "pass one of these, or leave format unset "
                                 "to infer it from the name"))
    given = {name: value for name, value in options.items() if value is not None}
    takes: tuple[str, ...] = cls.takes
    for name in given:
        if name not in takes:
            what = ", ".join(takes) if takes else "no options"
            raise ValueError(refusal(name, Plain(f"given to the {format} reader"), f"only what it takes: {what}",
                                     f"leave {name} unset for {format} shards"))
    reader: Reader = cls(**given)
    return reader


def infer_format(name: str) -> str:
    """The format a path's or URL's suffix implies; ValueError naming ``format`` when none does."""
    path = suffix_of(name)
    by_length = sorted(((s, f) for f, cls in READERS.items() for s in cls.suffixes), key=lambda p: -len(p[0]))
    for suffix, format in by_length:
        if path.endswith(suffix):
            return format
    hint = " (a .json file may be one document; if it holds one JSON value a line, pass format='jsonl')" \
        if path.endswith(".json") else ""
    raise ValueError(refusal("format", Plain(f"none inferred from the name {name!r}"), "a name ending in a known "
                             "suffix", f"pass format= one of {_known()}", why=hint.strip(" ()") or None))

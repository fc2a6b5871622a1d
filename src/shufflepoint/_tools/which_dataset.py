"""The dataset ``shufflepoint which`` answers over: a factory of the user's, or a corpus's shard sources.

``--dataset train.py:dataset`` (or ``package.module:dataset``) calls ``dataset()`` with no arguments,
as ``shufflepoint audit`` calls its factory, and takes what it returns: the very dataset the run
trained on (a ``Packed`` over a ``Shards``, a ``Mixture``, a list). ``--dataset SOURCES...`` builds
``Shards(SOURCES)`` with ``--format``, ``--columns``, ``--seq-len``, ``--dtype``, ``--cache-dir`` and
``--storage-options``, as ``shufflepoint index`` does. Anything else composed over a corpus needs
the factory.
"""

from __future__ import annotations

import argparse
from typing import Any


class DatasetError(ValueError):
    """The dataset cannot be had: the CLI exits 2."""


def open_dataset(given: list[str], args: argparse.Namespace) -> Any:
    from shufflepoint._tools.audit.config import load_target, parse_target
    from shufflepoint._tools.audit.verdicts import UsageError

    scripts = [text for text in given if text.endswith(".py")]
    if scripts:
        raise DatasetError(f"--dataset: found {scripts[0]!r}, a Python file without a factory; expected "
                           f"{scripts[0]}:NAME, NAME a function of it that returns the training dataset")
    if len(given) == 1 and _looks_like_target(given[0]):
        try:
            factory = load_target(parse_target(given[0], "--dataset"))
        except UsageError as error:
            raise DatasetError(str(error)) from None
        except Exception as error:  # the user's module failed to import: say what and where
            raise DatasetError(f"--dataset: importing {given[0]!r} failed: {type(error).__name__}: {error}") from None
        try:
            return factory()
        except Exception as error:  # the user's factory: any failure is theirs to read
            raise DatasetError(f"--dataset: {given[0]}() raised {type(error).__name__}: {error}") from None
    from shufflepoint._tools import corpus_index

    try:
        return corpus_index.open_corpus(
            corpus_index.sources_of(given), format=args.format, columns=args.columns, seq_len=args.seq_len,
            dtype=args.dtype, options=corpus_index.storage_options(args.storage_options), cache_dir=args.cache_dir,
            verify="version")
    except (ValueError, OSError, ImportError) as error:
        raise DatasetError(f"--dataset: {error}") from None


def _looks_like_target(text: str) -> bool:
    """``file.py:name`` or ``package.module:name``; a URL (``s3://...``) or a path is a source."""
    location, sep, attribute = text.rpartition(":")
    return bool(sep and location and attribute.isidentifier() and "://" not in text)

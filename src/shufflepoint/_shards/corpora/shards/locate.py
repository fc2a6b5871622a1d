"""``locate(index)``: where a dataset index lives, down to the file, the bytes and the tokens.

The loader's ``which(step)`` says which dataset indices a step held; ``locate`` says what they are.
One method on every composition, declared here as ``Locatable``, each answer a dict of JSON values
that nests the answer of the layer below::

    Shards   index -> shard, url, row (+ the format's own address, read from the opened shard:
             JSONL line and bytes, a WebDataset sample's members and their bytes, a token window's
             first token and bytes, a Parquet row group and the row in it, an Arrow record batch)
    Mixture  index -> source, index in that source (+ that source's own ``locate``)
    Packed   index -> epoch, row, the row's token span in the epoch's stream, and its documents,
             each with its token span inside the document (+ the corpus's ``locate`` of it)

Worked, the ``Packed`` example of ``packed.py`` (documents of 3, 5, 2, 4 tokens, seq_len 4, seed
0, epoch 0): row 1 holds tokens [4, 8) of the epoch's stream, ``d1[2:5]`` then ``d3[0:1]``::

    >>> packed.locate(1)                                                # doctest: +SKIP
    {'index': 1, 'epoch': 0, 'row': 1, 'stream_tokens': [4, 8],
     'documents': [{'document': 1, 'tokens': [2, 5]}, {'document': 3, 'tokens': [0, 1]}]}

Offsets inside a document count the ``bos``/``eos`` tokens ``Packed`` frames it with, as ``Packed``
rows do. Locating a ``Shards`` index opens its shard (a remote one is fetched into the node cache),
because JSONL line starts and tar members are only known from the file itself.
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.capabilities import Locatable
from shufflepoint._errors import SampleError, ShardError
from shufflepoint._shards.readers.base import LocatesRows


def below(dataset: Any, index: int) -> dict[str, Any] | None:
    """What a nested dataset says of ``index``: its ``locate`` when it is ``Locatable``, else None
    (a list or a user's dataset: the index is all there is)."""
    return dataset.locate(index) if isinstance(dataset, Locatable) else None


def shard_location(shard: int, url: str, row: int, opened: Any) -> dict[str, Any]:
    """A ``Shards`` answer: the shard's place, plus what the opened shard's reader adds (every built-in
    reader has a ``locate(row)``; a reader without one gives the row alone)."""
    found: dict[str, Any] = {"shard": shard, "url": url, "row": row}
    if isinstance(opened, LocatesRows):
        found.update(opened.locate(row))
    return found


def packed_location(index: int, epoch: int, row: int, seq_len: int, pieces: list[tuple[int, int, int]],
                    dataset: Any) -> dict[str, Any]:
    """A ``Packed`` answer from the row's (document, start, stop) pieces (``Packed.pieces``)."""
    documents = []
    for document, start, stop in pieces:
        entry: dict[str, Any] = {"document": document, "tokens": [start, stop]}
        where = below(dataset, document)
        if where is not None:
            entry["where"] = where
        documents.append(entry)
    return {"index": index, "epoch": epoch, "row": row, "stream_tokens": [row * seq_len, (row + 1) * seq_len],
            "documents": documents}


def mixture_location(index: int, source: int, within: int, dataset: Any) -> dict[str, Any]:
    """A ``Mixture`` answer: the source and the index in it, plus the source's own answer."""
    found: dict[str, Any] = {"index": index, "source": source, "source_index": within}
    where = below(dataset, within)
    if where is not None:
        found["where"] = where
    return found


WHERE = "shufflepoint_where"  # the attribute a corpus transform's exception carries: (url, row) of its sample


def say_where(error: BaseException, url: str, row: int, index: int) -> None:
    """Mark an exception a corpus's ``transform`` raised with its sample's shard and row, keeping its type: an
    attribute (``WHERE``) that ``skip_bad_samples`` records, and a note the traceback shows (Python 3.11+)."""
    if getattr(error, WHERE, None) is not None:
        return  # said by a corpus nested deeper
    try:
        setattr(error, WHERE, (url, row))
    except AttributeError:  # an exception type without attributes of its own
        return
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(f"shufflepoint: shard {url} row {row} (dataset index {index})")


def located_error(error: SampleError, dataset: Any, index: int) -> Exception:
    """A bad sample's error, said where it lives: a ``ShardError`` naming the shard and row when ``dataset``
    can ``locate`` it down to a file (through a ``Mixture`` too), else the ``SampleError`` with its index."""
    where = below(dataset, index)
    while where is not None and "url" not in where:
        where = where.get("where")
    if where is None:
        return SampleError(f"dataset index {index}: {error}")
    return ShardError(str(where["url"]), f"row {where['row']} (dataset index {index}): {error}")

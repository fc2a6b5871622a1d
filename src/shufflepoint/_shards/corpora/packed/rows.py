"""The rows of one ``Packed`` epoch: its table (documents in the ``blocks`` order, where each row's
pieces are), a window of its token stream read at once, and a batch of rows.

A *piece* is one document's part of a row or of a token range: ``(document, start, stop)``, offsets in
the framed document (bos/eos counted). ``EpochTable`` holds an O(blocks) table per epoch plus the last
few blocks' documents; ``pieces`` lists the pieces of one token range as tuples, ``piece_arrays`` finds
the same pieces as three arrays. ``TokenWindow``
is a stretch of the epoch's token stream laid out flat (``window_tokens`` tokens, from a row start):
a run of consecutive rows inside it is one slice of each of its arrays, copied out as int64, with
``position_ids`` the position inside each document capped by the position inside the row. It is
built from one read of its documents' tokens as spans of flat arrays (``ShardsHooks.read_id_spans_ascending``:
a Parquet list column, or the ids kept from an earlier decode, no Python object per document), so a
batch costs a few numpy calls instead of a walk and a read per document.

Worked (``tests/shards/test_packed_window.py`` pins it): documents of 3, 5, 2 and 4 tokens laid as
[d2, d1, d3, d0] (``Packed``'s worked example), seq_len 4. A window from token 0 holds the stream
d2[0:2] d1[0:5] d3[0:4] d0[0:3] with its position in each document ``[0 1 | 0 1 2 3 4 | 0 1 2 3 |
0 1 2]``; row 1 is tokens [4, 8): positions in documents ``[2 3 4 0]``, capped by ``[0 1 2 3]``
(the position in the row): ``[0 1 2 0]``, as ``Packed.pieces`` says (d1[2:5], d3[0:1]).

Words: docs/glossary.md (document, piece, row, block, flat tokens).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from shufflepoint._core.capabilities import ShardedCorpus
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder, _sub_seed, checked_positions
from shufflepoint._shards.corpora.shards.batch import Rows

NAME = "packed"
VERSION = 1
_DOCUMENTS_TAG = 0x5041434B
_CHUNKS_PER_BLOCK = 8  # a dataset without shards is cut in chunks of shuffle_block / 8 documents
_CACHED_BLOCKS = 8


def _cut(pieces: list[tuple[int, int, int]], seq_len: int) -> list[list[tuple[int, int, int]]]:
    """The (document, start, stop) pieces of consecutive rows, cut into rows of ``seq_len`` tokens."""
    rows: list[list[tuple[int, int, int]]] = [[]]
    room = seq_len
    for document, start, stop in pieces:
        while stop - start > room:
            rows[-1].append((document, start, start + room))
            start, room = start + room, seq_len
            rows.append([])
        if stop > start:
            rows[-1].append((document, start, stop))
            room -= stop - start
        if room == 0:
            rows.append([])
            room = seq_len
    return rows[:-1] if not rows[-1] else rows


class PackedBatch(Rows):
    """Rows of a ``Packed`` read as one batch: ``input_ids``, ``position_ids`` and ``labels`` as
    (rows, seq_len) int64 arrays. Item i is the per-row read's dict (tensors that view the arrays);
    ``collate()`` is ``default_collate`` of those dicts, built without a tensor per row."""

    KEYS = ("input_ids", "position_ids", "labels")

    def __init__(self, input_ids: np.ndarray, position_ids: np.ndarray, labels: np.ndarray) -> None:
        self._arrays = (input_ids, position_ids, labels)
        super().__init__([])

    def __len__(self) -> int:
        return int(self._arrays[0].shape[0])

    def __getitem__(self, i: Any) -> Any:
        return {key: torch.from_numpy(array[i]) for key, array in zip(self.KEYS, self._arrays, strict=True)}

    def samples(self) -> list[dict[str, torch.Tensor]]:
        tensors = [torch.from_numpy(array) for array in self._arrays]
        return [dict(zip(self.KEYS, row, strict=True)) for row in zip(*tensors, strict=True)]

    def take(self, order: np.ndarray) -> PackedBatch:
        return PackedBatch(*(array[order] for array in self._arrays))

    def collate(self) -> dict[str, torch.Tensor]:
        if not len(self):
            empty: dict[str, torch.Tensor] = default_collate([])  # torch's error for an empty batch
            return empty
        return {key: torch.from_numpy(array) for key, array in zip(self.KEYS, self._arrays, strict=True)}


class PackedOrder:
    """The ``packed`` order of one epoch: position p -> index ``key * rows + p``, ``key`` the epoch (or, laid
    along the spans stretches, ``packed_stretches.table_key``'s (epoch, stretches), with its own version)."""

    name = NAME

    def __init__(self, rows: int, epoch: int, version: int = VERSION) -> None:
        self.n, self.epoch, self.version = rows, epoch, version

    def index(self, position: int) -> int:
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        positions, flat = checked_positions(positions, self.n)
        found: np.ndarray = (flat + self.epoch * self.n).reshape(positions.shape)
        return found


def document_runs(dataset: Any, counts: Any, shuffle_block: int) -> np.ndarray:
    """The runs of documents the orders permute: a ``Shards`` corpus's shards, else chunks of consecutive
    documents (``shuffle_block / 8`` each) standing in for shards."""
    if isinstance(dataset, ShardedCorpus):
        return np.asarray(dataset.shard_rows, dtype=np.int64)
    documents, chunk = counts.documents, max(1, shuffle_block // _CHUNKS_PER_BLOCK)
    return np.asarray([chunk] * (documents // chunk) + ([documents % chunk] if documents % chunk else []), np.int64)


class EpochTable:
    """One epoch's token stream: documents in the ``blocks`` order, O(blocks) table plus cached blocks.

    ``dataset`` is the ``Packed``'s documents (its ``shard_rows``, where it has them, are the blocks
    order's shards); ``counts`` their framed token counts (``shard_counts``): ``run_tokens`` of a run of
    documents (a shard's total: O(shards) per epoch, no per-document count read) and ``sizes`` of the
    documents of a block read. ``laid``: (stretches, document edges), the order laid along the ``spans``
    deal's stretches (``packed/stretches``)."""

    def __init__(self, dataset: Any, counts: Any, seed: int, shuffle_block: int, epoch: int,
                 laid: tuple[int, np.ndarray] | None = None) -> None:
        rows = document_runs(dataset, counts, shuffle_block)
        seed = _sub_seed(seed, _DOCUMENTS_TAG)
        self._order: BlockOrder | StretchBlockOrder = BlockOrder(rows, seed, epoch, shuffle_block) if laid is None \
            else StretchBlockOrder(rows, seed, epoch, shuffle_block, laid[0], edges=laid[1], pinned_ends=True,
                                   keyed_layout=False)
        self._counts = counts
        stream_start, dataset_start, block_start = self._order.table()  # runs of one shard's documents
        run_documents = np.diff(np.append(stream_start, self._order.n))
        run_tokens = counts.run_tokens(dataset_start, run_documents)
        run_token_start = np.concatenate(([0], np.cumsum(run_tokens))).astype(np.int64)
        opens = np.searchsorted(stream_start, block_start)
        self.block_token_start = run_token_start[opens]
        self.tokens = int(run_token_start[-1])
        # a laid epoch's stretches in tokens (their edges are shard edges: piece starts, or the stream's end)
        self._stretch_tokens = None if laid is None else \
            run_token_start[np.searchsorted(np.append(stream_start, self._order.n), laid[1])]
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def window_limit(self, end: int) -> int:
        """How far a window that must reach token ``end`` may read on: to the end of the stretch that token
        ``end - 1`` lies in, or of its first block where it lies there (a rank whose rows reach past its own
        stretch reads only that pinned block of the next: ``packed/stretches``); unlaid, the stream's end."""
        edges = self._stretch_tokens
        if edges is None:
            return self.tokens
        stretch = int(np.searchsorted(edges, end - 1, side="right")) - 1
        opens = int(np.searchsorted(self.block_token_start, edges[stretch], side="left"))  # its first block
        first_end = int(self.block_token_start[opens + 1]) if opens + 1 < self.block_token_start.size else self.tokens
        return first_end if end <= first_end else int(edges[stretch + 1])

    def block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents of the block in epoch order, their token starts from the block's start)."""
        found = self._blocks.get(block)
        if found is None:
            if len(self._blocks) >= _CACHED_BLOCKS:
                self._blocks.pop(next(iter(self._blocks)))
            start, stop = self._order.block_bounds(block)
            documents = self._order.take(np.arange(start, stop, dtype=np.int64))
            sizes = self._counts.sizes(documents)
            found = self._blocks[block] = (documents, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64))
        return found

    def piece_arrays(self, begin: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (document, start, stop) pieces covering epoch tokens [begin, end), as three int64 arrays: a
        few numpy calls per block instead of a step per document."""
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        block = int(np.searchsorted(self.block_token_start, begin, side="right")) - 1
        while begin < end:
            documents, starts = self.block(block)
            base = int(self.block_token_start[block])
            local, stop = begin - base, min(end - base, int(starts[-1]))
            first = int(np.searchsorted(starts, local, side="right")) - 1
            last = int(np.searchsorted(starts, stop, side="left"))  # documents first..last-1 overlap
            opens, closes = starts[first:last], starts[first + 1:last + 1]
            piece_starts = np.maximum(local - opens, 0)
            piece_stops = np.minimum(stop, closes) - opens
            kept = piece_stops > piece_starts  # empty documents hold no piece
            found.append((documents[first:last][kept], piece_starts[kept], piece_stops[kept]))
            begin, block = base + stop, block + 1
        if not found:
            empty = np.empty(0, np.int64)
            return empty, empty, empty
        return (np.concatenate([f[0] for f in found]).astype(np.int64, copy=False),
                np.concatenate([f[1] for f in found]).astype(np.int64, copy=False),
                np.concatenate([f[2] for f in found]).astype(np.int64, copy=False))

    def pieces(self, begin: int, end: int) -> list[tuple[int, int, int]]:
        """(document, start, stop) pieces covering epoch tokens [begin, end): ``piece_arrays`` as tuples."""
        documents, starts, stops = self.piece_arrays(begin, end)
        return list(zip(documents.tolist(), starts.tolist(), stops.tolist(), strict=True))


class TokenWindow:
    """A stretch ``[begin, end)`` of epoch ``epoch``'s token stream (whole rows of ``seq_len``), flat
    and narrow: ``stream`` (the tokens in their read type: uint16 for a kept corpus of a small
    vocabulary), ``positions`` (position_ids: 0 at each row start and document start, counting up;
    uint16 where ``seq_len`` allows) and ``bounds`` (those zeros, ascending: where labels are ignored).
    A batch copies its rows out as int64 (``rows``), small arrays written while they are in cache: a
    window laid out whole as three int64 arrays cost more (12 MB written cold per 512 rows, measured).
    ``first``/``starts`` (each piece's first token in the window and its offset in its framed document)
    give ``offsets``, each token's offset in its document, for checks. Built by ``build_window``."""

    def __init__(self, epoch: int, begin: int, stream: np.ndarray, seq_len: int,
                 pieces: tuple[np.ndarray, np.ndarray], reuse: TokenWindow | None) -> None:
        self.epoch, self.begin, self.end, self.seq_len = epoch, begin, begin + int(stream.size), seq_len
        self.stream, (self._first, self._starts) = stream, pieces
        opened = self._first[self._starts == 0]  # where documents start, from begin
        # where positions are 0 (a document's or a row's start; one at both is there twice: a span of 0)
        self.bounds = np.sort(np.concatenate((opened, np.arange(0, stream.size, seq_len, dtype=np.int64))))
        counting = np.int32 if stream.size < 2**31 else np.int64
        kind = np.dtype(np.uint16 if seq_len <= 2**16 else counting)  # a position is below seq_len
        held = reuse.positions if reuse is not None else None
        self.positions: np.ndarray = held.base[:stream.size] if held is not None and held.base is not None and \
            held.dtype == kind and held.base.size >= stream.size else _buffer(stream.size, kind)
        starts = np.repeat(self.bounds.astype(counting), np.diff(self.bounds, append=stream.size))
        np.subtract(_counting(stream.size, counting), starts, out=self.positions, casting="unsafe")  # < seq_len

    @property
    def offsets(self) -> np.ndarray:
        """Each token's offset in its framed document (before the cap by the row), for checks."""
        sizes = np.diff(self._first, append=self.stream.size)
        found: np.ndarray = np.arange(self.stream.size, dtype=np.int64) - np.repeat(self._first - self._starts, sizes)
        return found

    def covers(self, epoch: int, begin: int, end: int) -> bool:
        return epoch == self.epoch and self.begin <= begin and end <= self.end

    def rows(self, begin: int, count: int, ignore: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` consecutive rows from token ``begin``: input_ids, position_ids, labels (own int64 copies)."""
        first = begin - self.begin
        stop = first + count * self.seq_len
        shape = (count, self.seq_len)
        input_ids = self.stream[first:stop].astype(np.int64).reshape(shape)
        labels = input_ids.copy()  # ignore where position_ids is 0: at the rows' and the documents' starts
        low, high = np.searchsorted(self.bounds, (first, stop))
        labels.reshape(-1)[self.bounds[low:high] - first] = ignore
        return input_ids, self.positions[first:stop].astype(np.int64).reshape(shape), labels


def _buffer(size: int, kind: Any) -> np.ndarray:
    """A new window array, with room for the usual window (so the next one can reuse it)."""
    return np.empty(max(size, _ARRAY_SIZE), kind)[:size]


_ARRAY_SIZE = 2**19


Window = tuple[TokenWindow, np.ndarray, np.ndarray, list[np.ndarray]]
Spans = tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]
_COUNTING: dict[Any, np.ndarray] = {}
_SAMPLED = 8  # documents of each window returned whole, for the caller's check of the framing


def _counting(size: int, dtype: Any) -> np.ndarray:
    """``np.arange(size, dtype=dtype)``, kept (read-only) for the next window of at most that size."""
    kept = _COUNTING.get(dtype)
    if kept is None or kept.size < size:
        kept = _COUNTING[dtype] = np.arange(size, dtype=dtype)
        kept.flags.writeable = False
    return kept[:size]


def _as_spans(found: list[np.ndarray]) -> Spans:
    """Arrays, one per document, as spans (``ShardsHooks.read_id_spans_ascending``'s form: array k, [0, size))."""
    sizes = np.fromiter((ids.size for ids in found), np.int64, len(found))
    return list(found), np.arange(len(found), dtype=np.int64), np.zeros(len(found), np.int64), sizes


def build_window(table: EpochTable, epoch: int, begin: int, end: int, framing: tuple[int | None, int | None],
                 read: Any, seq_len: int, reuse: TokenWindow | None = None) -> Window | None:
    """The window of tokens ``[begin, end)``: its pieces (``table.piece_arrays``), its documents' tokens read
    at once (``read(ascending documents)``: an array per document, or spans over a few arrays as
    ``ShardsHooks.read_id_spans_ascending`` gives them; None where it cannot) and laid end to end by one
    concatenation of a slice per piece, bos/eos put in by one ``np.insert`` where the framing has them:
    no Python step per document beyond its slice. Also returns the documents in window order, their
    sizes as read and the first few whole (``_SAMPLED``), for the caller's checks."""
    documents, starts, stops = table.piece_arrays(begin, end)
    ascending = np.argsort(documents, kind="stable")
    found = read(documents[ascending])
    if found is None:
        return None
    arrays, source, first, last = found if isinstance(found, tuple) else _as_spans(found)
    read_as = np.empty_like(ascending)
    read_as[ascending] = np.arange(ascending.size)
    source, first, last = source[read_as], first[read_as], last[read_as]
    length = last - first
    bos, eos = framing
    head = int(bos is not None)
    low = np.minimum(np.maximum(starts - head, 0), length)  # each piece's document tokens, bos/eos aside
    high = np.minimum(np.maximum(stops - head, 0), length)
    low += first
    high += first
    if len(arrays) == 1:
        values = arrays[0]
        parts = [values[a:b] for a, b in zip(low.tolist(), high.tolist(), strict=True)]
    else:
        parts = [arrays[i][a:b] for i, a, b in zip(source.tolist(), low.tolist(), high.tolist(), strict=True)]
    if bos is None and eos is None:  # laid out in the values' own type (uint16: a quarter of the bytes), then cast
        kind = np.result_type(*{array.dtype for array in arrays}) if arrays else np.dtype(np.int64)
        kind = kind if kind.kind in "iu" else np.dtype(np.int64)
        size, held = int((high - low).sum()), reuse.stream if reuse is not None else None
        stream = held.base[:size] if held is not None and held.base is not None and held.dtype == kind and \
            held.base.size >= size else _buffer(size, kind)
        if parts:
            np.concatenate(parts, out=stream, casting="same_kind")
    else:  # bos before a piece that opens its document, eos after one that closes it
        body = np.concatenate(parts, dtype=np.int64, casting="same_kind") if parts else np.empty(0, np.int64)
        body_end = np.cumsum(high - low)
        body_start = body_end - (high - low)
        opens = starts == 0 if bos is not None else np.zeros(starts.size, bool)
        closes = stops == length + head + 1 if eos is not None else np.zeros(starts.size, bool)
        where = np.stack((body_start, body_end), axis=1).reshape(-1)  # in stream order: a piece's bos, then its eos
        kept = np.stack((opens, closes), axis=1).reshape(-1)
        marks = np.tile(np.array([bos or 0, eos or 0], np.int64), starts.size)
        stream = np.insert(body, where[kept], marks[kept])
    sizes = stops - starts
    first_token = np.cumsum(sizes) - sizes
    sample = [arrays[i][a:a + n] for i, a, n in zip(source[:_SAMPLED].tolist(), first[:_SAMPLED].tolist(),
                                                     length[:_SAMPLED].tolist(), strict=True)]
    window = TokenWindow(epoch, begin, stream, seq_len, (first_token, starts), reuse)
    return window, documents, length, sample

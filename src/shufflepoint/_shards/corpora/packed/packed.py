"""``shufflepoint.Packed``: documents packed into rows of ``seq_len`` tokens, seekable per epoch.

Each epoch lays the documents end to end in a keyed order (the ``blocks`` order over documents:
shards, or chunks of consecutive documents, permuted, cut into blocks of about ``shuffle_block``
documents, each block permuted), with the optional ``bos``/``eos`` tokens around each document,
and cuts the token stream every ``seq_len`` tokens; the last partial row is dropped. Row p holds
tokens ``[p*L, (p+1)*L)``: the block by binary search over the per-block token starts (O(blocks)
per epoch: a block's token total does not depend on the order inside it), then the documents by a
prefix sum over that block's permuted documents (O(one block)).

Worked, documents of 3, 5, 2 and 4 tokens (no bos/eos), seq_len 4, chunks of 1 document and
shuffle_block 2, seed 0, epoch 0 (``tests/shards/test_packed.py`` pins these values): the epoch
lays the documents as [2, 1, 3, 0] in blocks {2, 1} and {3, 0} (block token starts 0 and 7), so
the stream is d2[0:2] d1[0:5] d3[0:4] d0[0:3], 14 tokens, 3 rows: row 0 = d2[0:2] d1[0:2], row 1
= d1[2:5] d3[0:1], row 2 = d3[1:4] d0[0:1]; d0[1:3] is the dropped tail.

The loader serves rows through the ``packed`` order: position p of epoch e is dataset index
``e * rows_per_epoch + p``, which ``__getitem__`` decodes, so the deal and the state apply to rows.

A batch is read one of two ways. A run of consecutive rows over a corpus that reads token ids as
arrays (Parquet) is a slice of a token window (``packed_rows.TokenWindow``: a stretch of the stream
read at once). Otherwise (``tokenize=``, JSON Lines, scattered rows) its documents are read once
each, and the one document that runs on past the batch is kept for the rank's next batch, which
starts where it ends: each document is tokenized once per epoch per rank.

Words: docs/glossary.md (document, piece, row, token window, flat tokens).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

from shufflepoint._core.capabilities import (
    Identified,
    KeepsShardsOpen,
    OwnOrder,
    PrefetchesDealt,
    Prefetching,
    ReadsAhead,
    ReadsAtDensity,
    ReadsIds,
    ReadsIdsAscending,
    ReadsIdSpansAscending,
    hooks_of,
)
from shufflepoint._errors import Plain, Refused, refusal
from shufflepoint._order import check_int
from shufflepoint._shards.corpora.packed import collate as packed_collate
from shufflepoint._shards.corpora.packed import identity
from shufflepoint._shards.corpora.packed import stretches as packed_stretches
from shufflepoint._shards.corpora.packed.counts import PackedCounts
from shufflepoint._shards.corpora.packed.rows import (
    _SAMPLED,
    NAME,
    VERSION,
    EpochTable,
    PackedBatch,
    PackedOrder,
    TokenWindow,
    _cut,
    build_window,
    document_runs,
)
from shufflepoint._shards.corpora.shards.batch import Columnar
from shufflepoint._shards.corpora.shards.locate import packed_location
from shufflepoint._shards.corpora.shards.shown import shown
from shufflepoint._shards.counting.token_counts import TokenSource, read

IGNORE_INDEX = -100  # the labels value torch's cross_entropy and Hugging Face models skip
_CACHED_EPOCHS = 2
_WINDOW_TOKENS = 2**19  # a token window: 4 MB of tokens and 4 MB of offsets (int64), 512 rows of 1,024
_ONWARD_BATCHES = 16  # a read at most this many batches past the window reads on: the next window is whole
_FRAMING_CHECKED = _SAMPLED  # documents: if the first ones read all start with bos (end with eos), it is doubled
_MAX_INDEX = 2**63 - 1


class Packed(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Rows of exactly ``seq_len`` tokens packed from a map-style dataset of tokenized documents.

    Each item is a dict of int64 tensors of length ``seq_len``: ``input_ids``, ``position_ids`` (0 at
    each document start and at the row start) and ``labels`` (``input_ids`` with -100 wherever
    ``position_ids`` is 0). ``Packed.varlen_collate`` adds the document boundaries that flash-attention
    reads (``cu_seqlens`` and transformers' ``cu_seq_lens_q``/``_k``...), ``Packed.flatten_collate``
    lays a batch out as one ``(1, B*L)`` row (``_shards/corpora/packed/collate.py`` says which path reads what).

    Use it with ``shufflepoint.DataLoader``, which reads it in its own ``packed`` order (the loader's
    ``seed`` and ``shuffle_block``, in documents, key the document order of every epoch)::

        loader = shufflepoint.DataLoader(Packed(corpus, 2048), batch_size=8, seed=1)

    ``len(packed)`` is the rows per epoch (the same every epoch). One ``Packed`` serves one
    (seed, shuffle_block): the first ``epoch_order`` call binds them.

    Args:
        dataset (map-style dataset): the documents, one per index (``Shards``, a Hugging Face
            ``Dataset``, a list of dicts...). Required. A dataset with an epoch order of its own (a
            ``Mixture``) is refused: pack each corpus, then mix the ``Packed`` ones.
        seq_len (int): tokens per row, >= 1. Required. Documents are laid end to end and cut every
            ``seq_len`` tokens; the epoch's last partial row is dropped.
        tokens (str | None): the field of ``dataset[i]`` that holds document i's token ids (a list,
            numpy array or tensor of ints). Default None: ``"input_ids"``. Not with ``tokenize``.
        tokenize (Callable[[Any], Any] | None): ``tokenize(dataset[i])`` returns document i's token ids,
            for text tokenized on the fly (once per document per epoch per rank). Default None: read
            ``tokens``. Needs ``tokenizer``.
        tokenizer (str | None): the identity of ``tokenize`` (``"gpt2@<revision>"``, a hash of its
            vocabulary): it keys the kept token counts and joins the fingerprint, so a resume with
            another tokenizer is refused. Default None; required with ``tokenize``, refused without it.
        bos (int | None): a token id opened every document with; it counts as the document's token.
            Default None: none. Refused when the first documents read already start with it.
        eos (int | None): a token id closing every document, counted as ``bos`` is. Default None: none.
            Refused when the first documents read already end with it.
        progress (bool): show a tqdm bar while the documents' tokens are counted. Default True.
        count_workers (int | None): processes that count a ``Shards`` corpus's tokens, shard by shard
            (counted once and kept in its cache folder, ``token_counts``). Default None: the CPUs this
            process may use. Another dataset is counted in this process.
    """

    order_name = NAME
    order_version = VERSION

    def __init__(self, dataset: Any, seq_len: int, *, tokens: str | None = None,
                 tokenize: Callable[[Any], Any] | None = None, tokenizer: str | None = None,
                 bos: int | None = None, eos: int | None = None, progress: bool = True,
                 count_workers: int | None = None) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(refusal("dataset", Plain(f"a {type(dataset).__name__}"), "a map-style dataset of dicts",
                                    "pass documents as dicts (a sharded corpus: shufflepoint.Shards)"))
        if isinstance(dataset, OwnOrder):
            # LIMIT(packed-own-epoch-order): docs/packing.md#limits-what-is-not-built
            raise TypeError(refusal("dataset", Plain(f"a {type(dataset).__name__} with its own epoch order"),
                                    "a dataset whose documents are the same every epoch", "pack each corpus, then "
                                    "mix the Packed ones (Mixture([(Packed(a, L), wa), (Packed(b, L), wb)]))",
                                    why="its documents change from epoch to epoch; packing it is not built"))
        self.seq_len = check_int("seq_len", seq_len, 1, 2**40)
        self.source = TokenSource.checked(tokens, tokenize, tokenizer)
        for name, value in (("bos", bos), ("eos", eos)):
            if value is not None:
                check_int(name, value, 0, 2**63 - 1)
        if count_workers is not None:
            check_int("count_workers", count_workers, 1, 4096)
        self.dataset, self.bos, self.eos = dataset, bos, eos
        # every document's tokens, counted once; by share once a loader says it (PackedHooks.count_share)
        self._counts = PackedCounts(dataset, self.source, self.seq_len, (bos is not None) + (eos is not None),
                                    count_workers, progress)
        self._bound: tuple[int, int] | None = None
        self._edges: dict[int, np.ndarray] = {}  # stretches -> their document edges
        self._tables: dict[int, EpochTable] = {}  # by key: the epoch, or (epoch, stretches) laid
        self._framing_checked = bos is None and eos is None
        self._held: tuple[int, np.ndarray] | None = None  # (document, its framed tokens): see read_batch
        self._window: TokenWindow | None = None  # a stretch of the token stream read at once: _from_window
        self._no_window = False
        self._reads_window: tuple[Any, Any, Any] | None = None  # (dataset, its hooks reading ids ascending, as spans)

    @property
    def rows_per_epoch(self) -> int:
        """Rows per epoch, ``tokens_per_epoch // seq_len``."""
        return self._counts.rows

    @property
    def tokens_per_epoch(self) -> int:
        """Tokens per epoch, bos and eos counted."""
        return self._counts.tokens

    @property
    def documents(self) -> int:
        """The documents packed (every epoch holds each once)."""
        return self._counts.framed.documents

    def __len__(self) -> int:
        return self.rows_per_epoch

    def _identity(self) -> dict[str, str]:
        """What defines the rows, in parts a refused resume can name (``identity.py``): the documents (the
        dataset's own fingerprint, else its length), what a token is (field or tokenizer), every document's
        token count, and the packing."""
        own = self.dataset.fingerprint if isinstance(self.dataset, Identified) else None
        counts = self._counts.framed
        return {"documents": own or f"len={counts.documents}", "tokens": self.source.identity,
                "counts": counts.digest, "packing": json.dumps(self._packing())}

    @property
    def fingerprint(self) -> str:
        """``packed:<hash of the whole>-<8 hex digits per part of the identity>-<the packing in clear>``,
        e.g. ``...-seq_len=2048,bos=None,eos=2``: so that a refused resume can name the saved values."""
        return identity.fingerprint(self._identity(), self._packing())

    def _packing(self) -> dict[str, int | None]:
        return {"seq_len": self.seq_len, "bos": self.bos, "eos": self.eos}

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int, grid: int | None = None,
                    stretches: int | None = None) -> PackedOrder:
        """Epoch positions -> row indices (``epoch * len(self) + row``); binds (seed, shuffle_block). With
        ``stretches`` (the ``spans`` deal's first world size, from the loader; ``packed_stretches.EVERY_RUN``, each
        run of documents a stretch of its own, from a ``Mixture``) the documents are laid along the stretches
        (``packed/stretches.py``), the index ``((epoch + 1) * 2**20 + stretches - 1) * len(self) + row``. ``grid`` (a
        scheduled dataset's) does not apply."""
        check_int("seed", seed, 0, 2**64 - 1)
        check_int("shuffle_block", shuffle_block, 1, 2**62)
        if stretches is not None:  # a world of ranks, or every run of documents its own (EVERY_RUN: a Mixture's)
            check_int("stretches", stretches, 1, packed_stretches.EVERY_RUN)
        last = (_MAX_INDEX - self.rows_per_epoch) // self.rows_per_epoch
        last = min(packed_stretches.WORLDS - 1, last) if stretches is None else last // packed_stretches.WORLDS - 2
        if check_int("epoch", epoch, 0, 2**62) > last:
            # LIMIT(packed-last-epoch): docs/packing.md#limits-what-is-not-built
            raise Refused("epoch", epoch, f"at most {last}: row indices (epoch x rows per epoch + row, with the "
                          "spans deal's stretches in the epoch's part) stay below 2**63",
                          "read an earlier epoch (set_epoch)")
        if self._bound is not None and self._bound != (seed, shuffle_block):
            raise ValueError(refusal("seed, shuffle_block", (seed, shuffle_block), f"{self._bound}, what this Packed "
                                     "serves for another loader", "build one Packed per loader"))
        hooks = hooks_of(self.dataset) if self._bound is None else None
        if isinstance(hooks, KeepsShardsOpen):  # Shards: a block's shards kept open, as under blocks
            hooks.keep_open_for(shuffle_block)
        self._bound = (seed, shuffle_block)
        return PackedOrder(self.rows_per_epoch, packed_stretches.table_key(epoch, stretches),
                           VERSION if stretches is None else packed_stretches.STRETCHED_VERSION)

    def _table(self, key: int) -> EpochTable:
        """The token stream of the epoch an index's ``key`` names (``_decode``): laid along the stretches or not."""
        if self._bound is None:
            raise RuntimeError(refusal("Packed", Plain("no order yet"), "an order bound by a loader",
                                       "read it through shufflepoint.DataLoader, or call "
                                       "packed.epoch_order(seed, epoch, shuffle_block) first"))
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= _CACHED_EPOCHS:
                self._tables.pop(next(iter(self._tables)))
            epoch, stretches = packed_stretches.epoch_of(key)
            laid = None if stretches is None else (stretches, self._document_edges(stretches))
            found = self._tables[key] = EpochTable(self.dataset, self._counts.framed, *self._bound, epoch, laid)
        return found

    def _document_edges(self, stretches: int) -> np.ndarray:
        """Where the documents' stretches end for ``stretches`` ranks (``packed/stretches``), worked out once."""
        found = self._edges.get(stretches)
        if found is None:
            assert self._bound is not None
            counts = self._counts.framed
            rows = document_runs(self.dataset, counts, self._bound[1])
            starts = np.concatenate(([0], np.cumsum(rows)[:-1])).astype(np.int64)
            found = self._edges[stretches] = packed_stretches.document_edges(
                rows, counts.run_tokens(starts, rows), stretches, self.rows_per_epoch, self.seq_len)
        return found

    def _decode(self, index: Any) -> tuple[int, int]:
        """(key, row) of an index: ``key`` names its epoch (and stretches, laid), ``_table(key)`` its stream."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise IndexError(refusal("Packed index", index, f"an int >= 0 (epoch * {len(self)} + row)",
                                     "pass an index the loader's order gives"))
        key, row = divmod(int(index), self.rows_per_epoch)
        return key, row

    def pieces(self, index: int) -> list[tuple[int, int, int]]:
        """The (document, start, stop) pieces of row ``index``, in order (offsets count bos/eos)."""
        epoch, row = self._decode(index)
        return self._table(epoch).pieces(row * self.seq_len, (row + 1) * self.seq_len)

    def locate(self, index: int) -> dict[str, Any]:
        """Where row ``index`` (``epoch * len(self) + row``) comes from: its token span in the epoch's
        stream and its documents, each with its token span (bos/eos counted) and, for a corpus that
        says so (``Shards``), where the document lives. Needs the loader's order (see ``_table``)."""
        key, row = self._decode(index)
        epoch = packed_stretches.epoch_of(key)[0]
        return packed_location(int(index), epoch, row, self.seq_len, self.pieces(index), self.dataset)

    def rows_pieces(self, indices: Sequence[int]) -> list[list[tuple[int, int, int]]]:
        """``[self.pieces(i) for i in indices]``, with each run of consecutive rows (a batch under
        the ``spans`` deal is one) walked once and cut at the row edges."""
        found: list[list[tuple[int, int, int]]] = []
        run: list[int] = []
        for index in [*indices, None]:
            if index is not None and run and index == run[-1] + 1 and self._decode(index)[1] != 0:
                run.append(int(index))
                continue
            if run:
                epoch, row = self._decode(run[0])
                found += _cut(self._table(epoch).pieces(row * self.seq_len, (row + len(run)) * self.seq_len),
                              self.seq_len)
            run = [int(index)] if index is not None and self._decode(index) else []
        return found

    # The names 0.4 gave them: "segments" now means only the state's [world_size, taken] pairs.
    segments = pieces
    rows_segments = rows_pieces

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """``Prefetching``: fetch in the background what these upcoming indices read, as a rank that reads
        them densely would (``prefetch_dealt`` with density 1.0). The loader calls it; a script need not."""
        self.prefetch_dealt(indices, 1.0)

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None:
        """Pass the documents of upcoming rows, in reading order, to a dataset that reads ahead (``Shards``),
        with this rank's density (``PrefetchesDealt``: its documents lie as densely as its rows)."""
        dataset, hooks = self.dataset, hooks_of(self.dataset)
        idle = isinstance(hooks, ReadsAhead) and not hooks.reads_ahead
        if not isinstance(dataset, Prefetching) or len(indices) == 0 or idle:
            return
        documents = np.asarray([d for row in self.rows_pieces(np.asarray(indices).tolist()) for d, _, _ in row],
                               dtype=np.int64)
        if isinstance(dataset, PrefetchesDealt):
            dataset.prefetch_dealt(documents, density)
        else:
            dataset.prefetch(documents)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, torch.Tensor]]:
        """Rows at these indices; their documents read once, as one batch."""
        return self.read_batch(indices).samples()

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> PackedBatch:
        """The rows at these indices as one batch: (rows, seq_len) arrays, which the loader's collate
        turns into tensors without a tensor per row (``columnar``)."""
        window = self._from_window(indices)
        if window is not None:
            return window
        order = indices.tolist() if isinstance(indices, np.ndarray) else list(indices)  # each checked by _decode
        pieces = self.rows_pieces(order)
        held = self._held
        documents = sorted({d for row in pieces for d, _, _ in row if held is None or d != held[0]})
        texts = dict(zip(documents, self._documents(documents), strict=True))
        if held is not None:
            texts[held[0]] = held[1]
        self._held = None
        if order:  # a rank reads forward: keep the document that runs on past this batch's last row
            document, _, stop = pieces[int(np.argmax(order))][-1]
            self._held = (document, texts[document]) if stop < texts[document].size else None
        return PackedBatch(*self._rows([[(texts[d], start, stop) for d, start, stop in row] for row in pieces]))

    def _from_window(self, indices: Sequence[int] | np.ndarray) -> PackedBatch | None:
        """A run of consecutive rows of one epoch, sliced from the token window (built when it does not
        cover them); None where the rows are not one run or the corpus cannot read flat token ids."""
        dataset = self.dataset
        if self._no_window or len(indices) == 0 or self.source.tokenize is not None or not self._reads_ids(dataset):
            return None
        if set(map(type, indices)) == {int}:  # the loader's batches: Python ints (a bool is not one of them)
            rows = indices if isinstance(indices, list) else list(indices)
        elif all(isinstance(index, (int, np.integer)) and not isinstance(index, bool) for index in indices):
            rows = [int(index) for index in indices]  # a batch: a few ints, cheaper in Python than in numpy
        else:
            return None  # the per-document path says what is wrong with it
        if rows != list(range(rows[0], rows[0] + len(rows))) or rows[0] < 0:
            return None
        epoch, row = self._decode(rows[0])
        if row + len(rows) > self.rows_per_epoch:  # the run crosses an epoch edge
            return None
        begin, end = row * self.seq_len, (row + len(rows)) * self.seq_len
        window = self._window
        if window is None or not window.covers(epoch, begin, end):
            # reading on (from the last window or a few batches past it, as a worker does): a whole window;
            # a read elsewhere (random access) reads only its own rows
            onward = window is not None and window.epoch == epoch and window.begin <= begin <= window.end + \
                _ONWARD_BATCHES * (end - begin)
            rows_per_window = max(1, _WINDOW_TOKENS // self.seq_len) if onward else len(rows)
            stop = min(self.rows_per_epoch * self.seq_len, max(end, begin + rows_per_window * self.seq_len))
            # ... never into another rank's stretch (a laid epoch, packed_layout): its shards are not this node's
            stop = min(stop, max(end, -(-self._table(epoch).window_limit(end) // self.seq_len) * self.seq_len))
            field = str(self.source.field)
            assert self._reads_window is not None  # asked by _reads_ids
            _, ids, spans = self._reads_window
            reads = ids.read_id_spans_ascending if isinstance(spans, ReadsIdSpansAscending) else ids.read_ids_ascending
            self._window = None  # its arrays are written again by the new window (no batch holds them)
            built = build_window(self._table(epoch), epoch, begin, stop, (self.bos, self.eos),
                                 lambda documents: reads(documents, field), self.seq_len, window)
            if built is None:  # the corpus's reader holds no arrays (JSON Lines): asked once
                self._no_window = True
                return None
            window, documents, sizes, sample = built
            wrong = np.flatnonzero(sizes != self._counts.raw.sizes(documents))
            if wrong.size:
                raise self._changed(int(documents[wrong[0]]), int(sizes[wrong[0]]))
            if not self._framing_checked:
                self._check_framing(documents[:_FRAMING_CHECKED].tolist(), sample[:_FRAMING_CHECKED])
            self._window = window
        return PackedBatch(*window.rows(begin, len(rows), IGNORE_INDEX))

    def _reads_ids(self, dataset: Any) -> bool:
        """Whether ``dataset`` reads ids ascending (its hooks' ``ReadsIdsAscending``), asked once per dataset: a
        runtime Protocol's isinstance walks its attributes, ~10 µs a batch."""
        if self._reads_window is None or self._reads_window[0] is not dataset:  # and as spans (Shards)
            hooks = hooks_of(dataset)
            ids = hooks if isinstance(hooks, ReadsIdsAscending) else None
            self._reads_window = (dataset, ids, hooks if isinstance(hooks, ReadsIdSpansAscending) else None)
        return self._reads_window[1] is not None

    def columnar(self) -> Columnar:
        """This ``Packed`` with batches kept as read, for ``shufflepoint.collate`` (the loader's default)."""
        return Columnar(self)

    def _documents(self, documents: list[int]) -> list[np.ndarray]:
        hooks = hooks_of(self.dataset)  # Shards of Parquet: arrays, no int per token (ReadsIds)
        field = self.source.field if self.source.tokenize is None else None
        arrays = hooks.read_ids(documents, field) if field is not None and isinstance(hooks, ReadsIds) else None
        samples = arrays if arrays is not None else read(self.dataset, documents)
        found = []
        counted = self._counts.raw.sizes(np.asarray(documents, dtype=np.int64)).tolist()
        for document, sample, size in zip(documents, samples, counted, strict=True):
            ids = sample if arrays is not None else self.source.ids(sample, document)  # cast once, in _rows
            if ids.size != size:
                raise self._changed(document, ids.size)
            found.append(ids)
        if not self._framing_checked:
            self._check_framing(documents, found)
        return [self._framed(ids) for ids in found]

    def _changed(self, document: int, size: int) -> ValueError:
        what = "tokens" if self.source.tokenize is None else f"tokenize (tokenizer {self.source.tokenizer!r})"
        counted = int(self._counts.raw.sizes(np.array([document]))[0])
        return ValueError(f"{what}: document {document} now holds {size} tokens, {counted} when "
                          "counted; the corpus or the tokenizer changed, build the Packed again")

    def _check_framing(self, documents: list[int], found: list[np.ndarray]) -> None:
        """Refuse a doubled bos (eos): the first documents read already start with bos (end with eos),
        as a tokenizer that adds its own special tokens gives them. Checked once per process."""
        held = [(d, ids) for d, ids in zip(documents, found, strict=True) if ids.size][:_FRAMING_CHECKED]
        for name, value, edge, where in (("bos", self.bos, 0, "start"), ("eos", self.eos, -1, "end")):
            if value is not None and held and all(int(ids[edge]) == value for _, ids in held):
                tokens = f"[{value}, {value}, ...]" if edge == 0 else f"[..., {value}, {value}]"
                raise ValueError(refusal(
                    name, Plain(f"documents that already {where} with {name}={value} (all of the first {len(held)} "
                                "read)"),
                    f"documents without their own {name.upper()} (each is framed as {tokens} otherwise)",
                    "tokenize with add_special_tokens=False, e.g. tokenize=lambda s: tok(s['text'], "
                    f"add_special_tokens=False)['input_ids'], or build the Packed without {name}=",
                    why=f"likely the tokenizer adds its own special tokens (Hugging Face tokenizers do by default): "
                    f"documents {[d for d, _ in held]}"))
        self._framing_checked = bool(held)

    def _framed(self, ids: np.ndarray) -> np.ndarray:
        """A document as it stands in the stream: bos, its tokens, eos."""
        if self.bos is None and self.eos is None:
            return ids
        head = [self.bos] if self.bos is not None else []
        tail = [self.eos] if self.eos is not None else []
        return np.concatenate((np.asarray(head, np.int64), ids, np.asarray(tail, np.int64)))

    def _rows(self, rows: list[list[tuple[np.ndarray, int, int]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows built together, (rows, seq_len) int64 each: one concatenation and one position
        computation for the batch (per row, numpy's call overhead cost more than the tokens)."""
        lengths = np.array([stop - start for row in rows for _, start, stop in row], dtype=np.int64)
        input_ids = np.concatenate([ids[start:stop] for row in rows for ids, start, stop in row]).astype(
            np.int64, copy=False).reshape(len(rows), -1)
        starts = np.cumsum(lengths) - lengths
        position_ids = (np.arange(input_ids.size, dtype=np.int64) - np.repeat(starts, lengths)).reshape(input_ids.shape)
        labels = np.where(position_ids == 0, IGNORE_INDEX, input_ids)
        return input_ids, position_ids, labels

    def __repr__(self) -> str:
        """``Packed(seq_len=2048, documents=1,000, tokens=524,288, rows=256, tokens_from='input_ids',
        bos=None, eos=2, dataset=Shards(...))``, plus the (seed, shuffle_block) a loader bound it to."""
        source = self.source
        tokens_from = f"tokenizer={source.tokenizer!r}" if source.tokenize is not None else f"field={source.field!r}"
        bound = "" if self._bound is None else f", seed={self._bound[0]}, shuffle_block={self._bound[1]:,}"
        counts = self._counts
        counted = (f"documents={counts.framed.documents:,}, tokens={counts.tokens:,}, rows={counts.rows:,}"
                   if not counts.pending else "counts to take by share")  # a repr takes no collective
        return (f"Packed(seq_len={self.seq_len:,}, {counted}, {tokens_from}, bos={self.bos}, eos={self.eos}{bound}, "
                f"dataset={shown(self.dataset)})")

    def _loader_hooks(self) -> PackedHooks:
        """What the loader asks of this ``Packed`` beyond its public surface (``Hooked``)."""
        return PackedHooks(self)

    varlen_collate = staticmethod(packed_collate.varlen_collate)
    flatten_collate = staticmethod(packed_collate.flatten_collate)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tables"] = {}  # rebuilt where the rows are read
        state["_held"] = None
        state["_window"] = None
        state["_reads_window"] = None
        return state


class PackedHooks:
    """What the loader asks of a ``Packed`` beyond its public surface, one object (``_core/capabilities.py``:
    ``CountsShare``, ``LaysOnStretches``, ``ExplainsFingerprint``, ``ReadsAtDensity``)."""

    def __init__(self, packed: Packed) -> None:
        self._packed = packed

    def count_share(self, seed: int, rank: int, world_size: int) -> None:
        """The loader's rank and world size, before it asks the length: counts still to take are taken now, this
        process counting its run of shards (the one it reads under spans) and exchanging the totals
        (``count_share``). The seed (``CountsShare`` passes it) does not enter the share."""
        self._packed._counts.take_share(rank, world_size)

    @property
    def stretched_version(self) -> int:
        """The ``packed`` order's version laid along the spans stretches (``LaysOnStretches``)."""
        return packed_stretches.STRETCHED_VERSION

    def stretched_order(self, seed: int, epoch: int, shuffle_block: int, stretches: int,
                        grid: int | None = None) -> PackedOrder:
        """The epoch's rows laid along the ``spans`` deal's stretches (``Packed.epoch_order``; no grid applies)."""
        return self._packed.epoch_order(seed, epoch, shuffle_block, stretches=stretches)

    def explain_fingerprint(self, saved: str) -> str:
        """Which part of the packing differs from the one a state with fingerprint ``saved`` was taken on."""
        packed = self._packed
        return identity.explain(saved, packed._identity(), packed._packing(), packed.source,
                                packed._counts.framed.digest, packed._bound)

    def read_at_density(self, density: float) -> None:
        """Tell the documents' dataset how densely this rank reads (``ReadsAtDensity``): its documents lie as
        densely as its rows."""
        hooks = hooks_of(self._packed.dataset)
        if isinstance(hooks, ReadsAtDensity):
            hooks.read_at_density(density)

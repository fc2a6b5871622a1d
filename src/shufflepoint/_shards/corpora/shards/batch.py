"""A batch read at once, kept in the shape it was read in, and torch's default collate done on that shape.

A reader's ``take(rows)`` returns one of three batches, each a ``Sequence`` whose item ``i`` is
exactly the sample the per-row path returns (same keys, types and values):

- ``Rows``: a list of samples (JSON Lines, WebDataset, or any mix that fits nothing better);
- ``Columns``: dict samples held as one column per key, numbers as a numpy array (Parquet, Arrow);
- ``Stacked``: equal-shape tensors held as one tensor (token windows).

``collate(batch)`` is ``torch.utils.data.default_collate(list(batch))``, value for value and dtype
for dtype, but built from the columns: no Python object per row for numbers and tensors (a token
window as its own tensor costs about 1 µs, four times the batched read itself). Anything it has no
columnar rule for goes to ``default_collate`` unchanged, so its errors are torch's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import default_collate

from shufflepoint._errors import Plain, refusal

Column = np.ndarray | list[Any]


class Rows(Sequence[Any]):
    """Samples as they are: one Python object per row."""

    def __init__(self, samples: list[Any]) -> None:
        self._samples = samples

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i: Any) -> Any:
        return self._samples[i]

    def samples(self) -> list[Any]:
        return list(self._samples)

    def take(self, order: np.ndarray) -> Rows:
        found = self._samples
        return Rows([found[i] for i in order.tolist()])

    def collate(self) -> Any:
        return default_collate(self.samples())


class Columns(Sequence[dict[str, Any]]):
    """Dict samples as columns: ``names`` in the samples' key order, one column each, a numpy array
    for numbers without nulls (ints, floats, bools) and a list of Python values for the rest."""

    def __init__(self, names: Sequence[str], columns: Sequence[Column], length: int) -> None:
        self.names, self.columns, self._length = tuple(names), list(columns), int(length)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]  # rows by int, no slices
        return {name: (column[i].item() if isinstance(column, np.ndarray) else column[i])
                for name, column in zip(self.names, self.columns, strict=True)}

    def samples(self) -> list[dict[str, Any]]:
        lists = [column.tolist() if isinstance(column, np.ndarray) else column for column in self.columns]
        names = self.names
        return [dict(zip(names, values, strict=True)) for values in zip(*lists, strict=True)] if lists \
            else [{} for _ in range(self._length)]

    def take(self, order: np.ndarray) -> Columns:
        taken: list[Column] = []
        for column in self.columns:
            if isinstance(column, np.ndarray):
                taken.append(column[order])
            else:
                taken.append([column[i] for i in order.tolist()])
        return Columns(self.names, taken, len(order))

    def collate(self) -> Any:
        if not self._length or not self.names:
            return default_collate(self.samples())
        return {name: _collate_column(column) for name, column in zip(self.names, self.columns, strict=True)}


def _collate_column(column: Column) -> Any:
    """default_collate of one key's values: Python ints become int64 (torch.tensor's choice), floats
    float64 (default_collate's), bools bool."""
    if not isinstance(column, np.ndarray):
        return default_collate(column)
    if column.dtype == np.bool_:
        return torch.from_numpy(np.ascontiguousarray(column))
    if column.dtype.kind in "iu":
        return torch.from_numpy(column.astype(np.int64))
    return torch.from_numpy(column.astype(np.float64))


class Stacked(Sequence[torch.Tensor]):
    """Tensors of one shape and dtype, stacked along a first axis: row i is ``tensor[i]``'s values."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    def __getitem__(self, i: int) -> torch.Tensor:  # type: ignore[override]  # rows by int, no slices
        return self.tensor[i].clone()  # its own storage, as the per-row read gives

    def samples(self) -> list[torch.Tensor]:
        return [row.clone() for row in self.tensor]

    def take(self, order: np.ndarray) -> Stacked:
        values = _numpy_of(self.tensor)
        if values is not None:  # numpy: one thread, whatever torch's intra-op pool does (see _numpy_of)
            return Stacked(torch.from_numpy(values[np.asarray(order, np.int64)]))
        # index_select, not tensor[index]: a third of the cost for a batch (advanced indexing's set-up)
        return Stacked(torch.index_select(self.tensor, 0, torch.from_numpy(np.asarray(order, np.int64))))

    def collate(self) -> torch.Tensor:
        if not len(self):
            empty: torch.Tensor = default_collate(self.samples())  # torch's error for an empty batch
            return empty
        return self.tensor.contiguous()


Batch = Rows | Columns | Stacked


def _numpy_of(tensor: torch.Tensor) -> np.ndarray | None:
    """The tensor's values as a numpy view (a CPU tensor numpy can hold), else None.

    A batch's gather and concatenation go through numpy, not ``torch.index_select``/``torch.cat``:
    those hand work above a size to torch's intra-op threads, which on a busy machine wait their turn
    for a core (measured at load 14 on 2 cores: 256 windows of 1,025 tokens, index_select 2.7 ms and
    cat 3.1 ms, numpy 0.55 and 0.36 ms). A loader's batch is small work: one thread does it best.
    """
    if tensor.device.type != "cpu" or tensor.requires_grad:
        return None
    try:
        return tensor.numpy()
    except TypeError:  # bfloat16 and the other dtypes numpy has no type for
        return None


def concat(parts: Sequence[Batch]) -> Batch:
    """One batch of the parts end to end; of their common kind when they agree (same column names in
    the same order, same tensor shape and dtype), else ``Rows``."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, Stacked) for p in parts):
        tensors = [p.tensor for p in parts if isinstance(p, Stacked)]
        if len({(t.shape[1:], t.dtype) for t in tensors}) == 1:
            arrays = [a for a in map(_numpy_of, tensors) if a is not None]
            if len(arrays) == len(tensors):
                return Stacked(torch.from_numpy(np.concatenate(arrays)))
            return Stacked(torch.cat(tensors))
    if all(isinstance(p, Columns) for p in parts):
        columns = [p for p in parts if isinstance(p, Columns)]
        if len({p.names for p in columns}) == 1:
            return Columns(columns[0].names, [_concat_column([p.columns[k] for p in columns])
                                              for k in range(len(columns[0].names))],
                           sum(len(p) for p in columns))
    return Rows([sample for part in parts for sample in part.samples()])


def _concat_column(pieces: list[Column]) -> Column:
    arrays = [p for p in pieces if isinstance(p, np.ndarray)]
    if len(arrays) == len(pieces) and len({a.dtype for a in arrays}) == 1:
        return np.concatenate(arrays)
    joined: list[Any] = []
    for piece in pieces:  # the Python values the rows hold, whatever each piece held them as
        joined.extend(piece.tolist() if isinstance(piece, np.ndarray) else piece)
    return joined


def checked_indices(what: str, indices: Any, length: int, *, many: str | None = None, one: str | None = None,
                    within: str | None = None) -> np.ndarray:
    """Indices as an int64 array, each in ``[0, length)``; the errors of ``dataset[i]``, naming the
    array (``many``: "<what> indices"), an element (``one``: "<what> index") and the range
    (``within``: "<length> rows")."""
    found = np.asarray(indices)
    if found.size == 0:
        return np.empty(0, np.int64)
    if found.ndim != 1 or found.dtype.kind not in "iu":
        raise TypeError(refusal(many or what + " indices", Plain(f"{found.dtype} of shape {found.shape}"),
                                "a list of ints", "pass integer indices"))
    checked = found.astype(np.int64, copy=False)
    if int(checked.view(np.uint64).max()) >= length:  # one reduction: a negative index is 2**63 or more unsigned
        bad = found[(found < 0) | (found >= length)][0]
        raise IndexError(refusal(one or what + " index", int(bad), f"an index in [0, {length}), not out of range "
                                 f"for {within or f'{length} rows'}", "pass indices within the dataset"))
    return checked


def gather(groups: np.ndarray, read: Callable[[int, np.ndarray], Batch]) -> Batch:
    """Rows read group by group, back in the order asked: ``groups[i]`` is the group of the i-th row
    asked for; ``read(group, where)`` reads the rows at positions ``where`` of that group, in order.
    Each group is read once, in the order the batch first asks for it: a batch that ends one block
    of the order and starts the next reads the old block's shards first, so the decoded groups it
    lets go for the new block's are ones this batch is done with (in ascending shard order, a decode
    budget holding a block and a half dropped the old block's groups first, and read them again)."""
    if not groups.size:
        return Rows([])
    if groups[0] == groups[-1] and (groups == groups[0]).all():  # the usual case: a batch inside one shard
        return read(int(groups[0]), np.arange(groups.size))
    by_group = np.argsort(groups, kind="stable")
    sorted_groups = groups[by_group]
    bounds = [0, *(np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1).tolist(), groups.size]
    runs = sorted(zip(by_group[bounds[:-1]].tolist(), sorted_groups[bounds[:-1]].tolist(), bounds[:-1], bounds[1:],
                      strict=True))  # (first place asked, group, run in by_group): by first place
    joined = concat([read(group, by_group[start:stop]) for _, group, start, stop in runs])
    order = np.concatenate([by_group[start:stop] for _, _, start, stop in runs])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return joined.take(inverse)


def collate(samples: Any) -> Any:
    """``torch.utils.data.default_collate``, built from the columns when ``samples`` is a batch read at
    once (what a ``columnar()`` dataset's ``__getitems__`` returns); anything else goes to torch's."""
    if isinstance(samples, (Rows, Columns, Stacked)):
        return samples.collate()
    return default_collate(samples)


class Columnar(torch.utils.data.Dataset[Any]):
    """A dataset whose ``__getitems__`` returns the batch as read (``Rows``/``Columns``/``Stacked``)
    instead of a list, for ``collate`` to build tensors from: ``dataset.columnar()``. A batch is a
    ``Sequence`` of exactly the samples, so any collate that iterates or indexes it still works;
    one that needs a ``list`` should be given the dataset itself. Everything else is the dataset's.

    >>> loader = torch.utils.data.DataLoader(corpus.columnar(), batch_size=256,  # doctest: +SKIP
    ...                                      collate_fn=shufflepoint.collate)
    """

    def __init__(self, dataset: Any, map_samples: Any = None) -> None:
        self.dataset, self.map_samples = dataset, map_samples  # map_samples: a DecodesInBatches dataset's threads

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        batch: Batch = (self.dataset.read_batch(indices) if self.map_samples is None
                        else self.dataset.read_mapped(indices, self.map_samples))
        return batch

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("dataset", "map_samples"):
            raise AttributeError(name)  # not set yet (unpickling): never recurse into the dataset
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"Columnar({self.dataset!r})"

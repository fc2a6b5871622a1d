"""Identity: what a batch *is*, as a list of sample ids (ints or short hash strings), and what each
of its samples *contains*, as a digest (the content check: same ids, other augmentations)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from shufflepoint._tools.audit.verdicts import SampleId


def _hash_bytes(data: bytes) -> str:
    return "h:" + hashlib.blake2b(data, digest_size=8).hexdigest()


def _tensor_ids(tensor: Any) -> list[SampleId]:
    import torch

    tensor = tensor.detach().cpu()
    integer = not (tensor.is_floating_point() or tensor.is_complex()) and tensor.dtype != torch.bool
    if tensor.dim() == 0:
        return [int(tensor.item())] if integer else [_hash_bytes(_tensor_bytes(tensor))]
    if tensor.dim() == 1 and integer:
        return [int(v) for v in tensor.tolist()]
    return [_hash_bytes(_tensor_bytes(row)) for row in tensor]


def _raw(tensor: Any) -> Any:
    """A dense CPU tensor's bytes as a flat uint8 numpy array; any dtype (bfloat16 has no numpy)."""
    import torch

    return tensor.resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8).numpy()


def _tensor_bytes(tensor: Any) -> bytes:
    header = f"{tensor.dtype}{tuple(tensor.shape)}".encode()
    return header + bytes(_raw(tensor).tobytes())


def _object_id(sample: Any) -> SampleId:
    import torch

    if isinstance(sample, bool):
        return _hash_bytes(repr(sample).encode())
    if isinstance(sample, int):
        return sample
    if isinstance(sample, torch.Tensor):
        return _hash_bytes(_tensor_bytes(sample.detach().cpu()))
    return _hash_bytes(repr(sample).encode())


def sample_ids(batch: Any) -> list[SampleId]:
    """The ids of a batch's samples, in order.

    >>> import torch
    >>> sample_ids(torch.tensor([7, 3]))                        # integer tensor: by value
    [7, 3]
    >>> sample_ids((torch.tensor([7, 3]), torch.zeros(2, 4)))  # tuple: its first tensor
    [7, 3]
    >>> sample_ids({"input_ids": torch.tensor([[1, 2], [3, 4]])})[0][:2]   # 2-D: a hash per row
    'h:'
    """
    import torch

    if isinstance(batch, torch.Tensor):
        return _tensor_ids(batch)
    if isinstance(batch, Mapping):
        values = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        if batch and all(isinstance(v, int) and not isinstance(v, bool) for v in batch):
            return list(batch)
        values = list(batch)
    else:
        return [_object_id(batch)]
    for value in values:
        if isinstance(value, torch.Tensor):
            return _tensor_ids(value)
    if isinstance(batch, Mapping):
        for value in values:  # a dict of lists (a datasets-style batch without tensors)
            if isinstance(value, (list, tuple)):
                return [_object_id(v) for v in value]
        return [_object_id(batch)]
    return [_object_id(v) for v in values]


def _per_sample_rows(batch: Any, count: int) -> list[tuple[bytes, Any]]:
    """(header, rows) for every dense tensor or numpy array in a batch of nested dicts, lists and
    tuples whose first dimension is ``count``: the header is its dtype and the shape of one row,
    ``rows`` a (count, bytes per row) uint8 array. Sparse, quantized and object arrays are left out."""
    import numpy as np
    import torch

    if isinstance(batch, torch.Tensor):
        if (batch.dim() == 0 or batch.shape[0] != count or batch.layout != torch.strided or batch.is_nested
                or batch.is_quantized or batch.device.type == "meta"):
            return []
        tensor = batch.detach().cpu()
        header, raw = f"{tensor.dtype}{tuple(tensor.shape[1:])}", _raw(tensor)
    elif isinstance(batch, np.ndarray):
        if batch.ndim == 0 or batch.shape[0] != count or batch.dtype.hasobject:
            return []
        header, raw = f"{batch.dtype.str}{batch.shape[1:]}", np.ascontiguousarray(batch).reshape(-1).view(np.uint8)
    else:
        values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
        return [leaf for value in values for leaf in _per_sample_rows(value, count)]
    return [(header.encode(), raw.reshape(count, raw.size // count))]


def sample_digests(batch: Any, count: int) -> list[str] | None:
    """A digest per sample of what the batch holds for it: row k of every tensor or array whose
    first dimension is the batch's ``count`` samples. None when no tensor has such rows: content
    cannot be told apart per sample, and is not judged.

    A digest reads ``SHAPE:CONTENT``. SHAPE hashes only the dtypes and row shapes, so the judge
    can tell "other values" from "other shapes" (a row padded to its batch's longest sample is
    shaped by the batch, and an elastic resume cuts other batches); CONTENT hashes both.

    >>> import torch
    >>> a = sample_digests({"id": torch.tensor([1, 2]), "x": torch.tensor([[0.5], [0.5]])}, 2)
    >>> b = sample_digests({"id": torch.tensor([1, 2]), "x": torch.tensor([[0.5], [0.7]])}, 2)
    >>> a[0] == b[0], a[1] == b[1]
    (True, False)
    """
    leaves = _per_sample_rows(batch, count) if count >= 1 else []
    if not leaves:
        return None
    shape = hashlib.blake2b(b"|".join(header for header, _ in leaves), digest_size=3).hexdigest()
    digests = []
    for k in range(count):
        digest = hashlib.blake2b(digest_size=8)
        for header, rows in leaves:
            digest.update(header)
            digest.update(rows[k])
        digests.append(f"{shape}:{digest.hexdigest()}")
    return digests

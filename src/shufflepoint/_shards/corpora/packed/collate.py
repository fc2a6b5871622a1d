"""Collates for ``Packed`` rows: the document boundaries in the form each attention path reads.

A row of ``Packed`` holds pieces of several documents; attention must stay inside each piece.
Who reads what (transformers 5.x, ``modeling_flash_attention_utils._flash_attention_forward`` and
``masking_utils.find_packed_sequence_indices``; ``tests/shards/test_packed_attention.py`` runs both):

- flash-attention (``flash_attention_2``/``_3``): at batch size B > 1 only ``cu_seq_lens_q``,
  ``cu_seq_lens_k``, ``max_length_q`` and ``max_length_k``; it infers boundaries from
  ``position_ids`` only when B is 1 (a flattened ``(1, B*L)`` batch).
- sdpa and eager: the per-document mask, built from ``position_ids`` at any B, but only when
  ``attention_mask`` is None and there is no cache (``use_cache=False``).
- FlashAttention's own ``flash_attn_varlen_func``: ``cu_seqlens`` and ``max_seqlen`` over
  ``input_ids.view(-1)``.

So ``varlen_collate`` keeps rows ``(B, L)`` and carries all six keys, and ``flatten_collate`` lays
the rows end to end as one ``(1, B*L)`` row, like ``transformers.DataCollatorWithFlattening`` does
with one sequence per sample (here a sample already holds several).

Worked, rows ``[1000, 1001 | 2000, 2001]`` and ``[2002 | 3000, 3001, 3002]`` (``|`` a document
edge; ``position_ids`` ``[0, 1, 0, 1]`` and ``[0, 0, 1, 2]``): the pieces (``Packed.pieces``) start at 0, 2, 4 and 5
of the flattened batch, so ``cu_seqlens`` is ``[0, 2, 4, 5, 8]`` and ``max_seqlen`` 3; a document
cut by a row edge (2000-2002) is two pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from shufflepoint._errors import Plain, refusal

_PACKED_ROWS = "pass rows of shufflepoint.Packed"

ROW_KEYS = ("input_ids", "position_ids", "labels")


def boundaries(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``cu_seqlens`` (int32: every piece's start in ``position_ids.view(-1)``, then its size) and
    the longest piece, from positions that are 0 at each piece's start."""
    flat = position_ids.reshape(-1)
    if flat.numel() == 0:
        raise ValueError(refusal("position_ids", Plain("an empty batch"), "at least one row of at least one token",
                                 _PACKED_ROWS))
    if int(flat[0]) != 0:
        raise ValueError(refusal("position_ids", Plain(f"{int(flat[0])} at the first token"), "0 (a row starts a "
                                 "piece)", _PACKED_ROWS))
    starts = torch.nonzero(flat == 0).reshape(-1)
    cu_seqlens = torch.cat((starts, torch.tensor([flat.numel()], device=starts.device))).to(torch.int32)
    return cu_seqlens, int(torch.diff(cu_seqlens).max())


def _stacked(samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, Any]:
    if len(samples) == 0:
        raise ValueError(refusal("samples", Plain("none"), "at least one row of shufflepoint.Packed", _PACKED_ROWS))
    missing = [key for key in ("input_ids", "position_ids") if key not in samples[0]]
    if missing:
        raise ValueError(refusal("samples", Plain(f"a row without {missing} (keys {sorted(samples[0])})"), "rows of "
                                 "shufflepoint.Packed (input_ids, position_ids, labels)", _PACKED_ROWS))
    return {key: torch.stack([sample[key] for sample in samples]) for key in samples[0]}


def _with_boundaries(batch: dict[str, Any]) -> dict[str, Any]:
    cu_seqlens, longest = boundaries(batch["position_ids"])
    batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens, longest  # flash_attn_varlen_func's names
    batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = cu_seqlens  # transformers' names
    batch["max_length_q"] = batch["max_length_k"] = longest
    return batch


def varlen_collate(samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, Any]:
    """Rows stacked ``(B, L)``, plus the pieces' boundaries under both names: ``cu_seqlens`` and
    ``max_seqlen`` (``flash_attn_varlen_func``) and ``cu_seq_lens_q``, ``cu_seq_lens_k``,
    ``max_length_q``, ``max_length_k`` (what transformers' flash-attention path reads at any batch
    size). ``model(**batch)`` then keeps attention inside each document under flash-attention, and
    under sdpa/eager too when called with ``use_cache=False`` (the mask comes from ``position_ids``)."""
    return _with_boundaries(_stacked(samples))


def flatten_collate(samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, Any]:
    """Rows laid end to end as one ``(1, B*L)`` row (``input_ids``, ``position_ids``, ``labels``), plus
    the boundaries of ``varlen_collate``: the padding-free form of ``DataCollatorWithFlattening``.
    ``position_ids`` restart at 0 at every piece (so also at every row start), and ``labels`` are
    -100 there, so nothing attends or is predicted across a document or a row edge."""
    batch = _stacked(samples)
    flat = {key: value.reshape(1, -1) if key in ROW_KEYS else value for key, value in batch.items()}
    return _with_boundaries(flat)

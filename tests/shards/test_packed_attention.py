"""Packed batches that a transformers model reads correctly when passed straight (issue 25.1).

A tiny Llama (built from a config) reads ``Packed`` batches through transformers' own attention
dispatch; its logits at every token must equal those of the token's document piece run alone.
Flash-attention runs on CPU: pure-torch kernels stand in for the ``flash_attn`` package, loaded by
patching ``modeling_flash_attention_utils._lazy_imports`` (what transformers calls to load them), so
the path under test is transformers' ``_flash_attention_forward`` choosing between its dense and
varlen kernels from the keys the batch carries.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from shufflepoint._shards.corpora.packed.collate import boundaries
from shufflepoint._shards.corpora.packed.packed import Packed

transformers = pytest.importorskip("transformers")
flash_utils = pytest.importorskip("transformers.modeling_flash_attention_utils")

SEQ_LEN, VOCAB = 16, 97
LENGTHS = [5, 9, 3, 14, 2, 7, 11, 4, 6]  # 61 tokens: 3 rows of 16, documents cut by row edges


def _attend(q, k, v, causal, softmax_scale):
    """One sequence, (L, H, D) each; k and v may have fewer heads (grouped-query attention)."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scale = softmax_scale if softmax_scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float()).to(q.dtype)


def reference_flash(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False):
    """``flash_attn_func``: (B, L, H, D), each row one sequence."""
    return torch.stack([_attend(q[b], k[b], v[b], causal, softmax_scale) for b in range(q.shape[0])])


def reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, dropout_p=0.0,
                     softmax_scale=None, causal=False):
    """``flash_attn_varlen_func``: (total, H, D), sequence i at ``cu_seqlens[i]:cu_seqlens[i + 1]``."""
    assert torch.equal(cu_seqlens_q, cu_seqlens_k) and int(cu_seqlens_q[-1]) == q.shape[0]
    assert max_seqlen_q == int(torch.diff(cu_seqlens_q).max())
    pieces = itertools.pairwise(cu_seqlens_q.tolist())
    return torch.cat([_attend(q[a:b], k[a:b], v[a:b], causal, softmax_scale) for a, b in pieces])


@pytest.fixture
def reference_kernels(monkeypatch):
    """transformers loads these as flash_attention_2's kernels; which of the two ran is counted."""
    calls = {"dense": 0, "varlen": 0}

    def dense(*args, **kwargs):
        calls["dense"] += 1
        return reference_flash(*args, **kwargs)

    def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, dropout_p=0.0,
               softmax_scale=None, causal=False):
        calls["varlen"] += 1
        return reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                softmax_scale, causal)

    def lazy_imports(implementation, attention_wrapper=None, allow_all_kernels=False):
        return dense, varlen, None, flash_utils._pad_input, flash_utils._unpad_input

    monkeypatch.setattr(flash_utils, "_lazy_imports", lazy_imports)
    monkeypatch.setattr(flash_utils, "_loaded_implementation", None)  # load again, through the patch
    yield calls
    flash_utils._loaded_implementation = None  # the next user loads its own kernels


def tiny_llama(attention: str):
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.config._attn_implementation = attention  # set after construction: flash_attn is not installed here
    return model


def packed_rows():
    documents = [{"input_ids": [(7 * d + t) % VOCAB for t in range(n)]} for d, n in enumerate(LENGTHS)]
    packed = Packed(documents, SEQ_LEN, progress=False)
    packed.epoch_order(3, 0, 4)
    return [packed[row] for row in range(len(packed))]


def alone(model, rows):
    """Every segment of every row run as its own sequence, its logits put back in place: (B, L, V)."""
    expected = torch.empty(len(rows), SEQ_LEN, VOCAB)
    for b, row in enumerate(rows):
        edges = boundaries(row["position_ids"])[0].tolist()
        for start, stop in itertools.pairwise(edges):
            with torch.no_grad():
                expected[b, start:stop] = model(input_ids=row["input_ids"][None, start:stop], use_cache=False).logits[0]
    return expected


def test_varlen_collate_is_read_by_transformers_flash_attention_at_batch_size_above_one(reference_kernels):
    model, rows = tiny_llama("flash_attention_2"), packed_rows()
    assert len(rows) == 3 and all(any(row["position_ids"][1:] == 0) for row in rows)  # rows of several pieces
    expected = alone(model, rows)
    batch = Packed.varlen_collate(rows)
    with torch.no_grad():
        logits = model(**batch).logits
    assert reference_kernels["varlen"] > 0
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    # the bug this guards against: the old collate's keys only, and transformers runs the dense kernel over rows
    old = {key: batch[key] for key in ("input_ids", "position_ids", "labels", "cu_seqlens", "max_seqlen")}
    with torch.no_grad():
        crossed = model(**old).logits
    assert (crossed - expected).abs().max() > 1e-2


def test_flatten_collate_is_read_by_flash_attention_and_by_sdpa(reference_kernels):
    rows = packed_rows()
    flat = Packed.flatten_collate(rows)
    assert flat["input_ids"].shape == flat["position_ids"].shape == flat["labels"].shape == (1, 3 * SEQ_LEN)
    for attention in ("flash_attention_2", "sdpa"):
        model = tiny_llama(attention)
        expected = alone(model, rows).reshape(1, -1, VOCAB)
        for batch in (flat, {key: flat[key] for key in ("input_ids", "position_ids", "labels")}):
            with torch.no_grad():
                logits = model(**batch, use_cache=False).logits
            torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_sdpa_reads_the_document_mask_from_position_ids_only_without_a_cache():
    model, rows = tiny_llama("sdpa"), packed_rows()
    expected = alone(model, rows)
    batch = Packed.varlen_collate(rows)
    with torch.no_grad():
        logits = model(**batch, use_cache=False).logits
        cached = model(**batch, use_cache=True).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert (cached - expected).abs().max() > 1e-2  # with a cache, one causal mask over whole rows
    model.train()  # training makes no difference: a config that says use_cache=True makes a cache
    with torch.no_grad():
        assert (model(**batch).logits - expected).abs().max() > 1e-2
        model.config.use_cache = False  # the other way to say it
        torch.testing.assert_close(model(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_the_loss_of_a_packed_batch_is_the_documents_loss():
    """labels are -100 at each segment start, so the model's shifted loss never predicts across an edge."""
    model, rows = tiny_llama("sdpa"), packed_rows()
    batch = Packed.varlen_collate(rows)
    with torch.no_grad():
        loss = model(**batch, use_cache=False).loss
    total, count = 0.0, 0
    for row in rows:
        edges = boundaries(row["position_ids"])[0].tolist()
        for start, stop in itertools.pairwise(edges):
            if stop - start > 1:
                ids = row["input_ids"][None, start:stop]
                with torch.no_grad():
                    total += float(model(input_ids=ids, labels=ids, use_cache=False).loss) * (stop - start - 1)
                count += stop - start - 1
    assert count == int((batch["labels"][:, 1:] != -100).sum())
    assert float(loss) == pytest.approx(total / count, rel=1e-5)


def test_the_collates_carry_both_names_of_the_boundaries():
    rows = packed_rows()
    for collate in (Packed.varlen_collate, Packed.flatten_collate):
        batch = collate(rows)
        assert batch["cu_seqlens"].dtype == torch.int32
        assert torch.equal(batch["cu_seq_lens_q"], batch["cu_seqlens"])
        assert torch.equal(batch["cu_seq_lens_k"], batch["cu_seqlens"])
        assert batch["max_length_q"] == batch["max_length_k"] == batch["max_seqlen"]
        assert int(batch["cu_seqlens"][-1]) == 3 * SEQ_LEN
    with pytest.raises(ValueError, match="samples: found none\n  expected: at least one row"):
        Packed.varlen_collate([])
    with pytest.raises(ValueError, match=r"position_ids: found 3 at the first token\n"
                                         r"  expected: 0 \(a row starts a piece\)"):
        Packed.flatten_collate([{"input_ids": torch.zeros(2), "position_ids": torch.tensor([3, 4])}])


def test_the_worked_example_in_the_collate_docstring():
    rows = [{"input_ids": torch.tensor([1000, 1001, 2000, 2001]), "position_ids": torch.tensor([0, 1, 0, 1]),
             "labels": torch.tensor([-100, 1001, -100, 2001])},
            {"input_ids": torch.tensor([2002, 3000, 3001, 3002]), "position_ids": torch.tensor([0, 0, 1, 2]),
             "labels": torch.tensor([-100, -100, 3001, 3002])}]
    stacked, flat = Packed.varlen_collate(rows), Packed.flatten_collate(rows)
    assert stacked["input_ids"].shape == (2, 4) and flat["input_ids"].tolist() == [[1000, 1001, 2000, 2001, 2002,
                                                                                    3000, 3001, 3002]]
    for batch in (stacked, flat):
        assert batch["cu_seqlens"].tolist() == [0, 2, 4, 5, 8] and batch["max_seqlen"] == 3

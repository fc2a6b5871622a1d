"""The audit's pure parts: sample identity, argument parsing, and the judge (hypothesis + cases).

The streams for the properties come from shufflepoint's own plan (the order and the layout the
loader uses), so "EXACTLY_ONCE for a real elastic resume, with its real tail padding" is checked
over many shapes, and every injected fault (a repeated or a missing sample) is caught.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.plan import Layout, StridedCut
from shufflepoint._loading.deal import rank_index_chunks
from shufflepoint._loading.orders import OrderCache
from shufflepoint._tools import audit as _audit
from shufflepoint._tools.audit import (
    DIVERGED,
    DROPPED,
    DUPLICATED,
    EXACT,
    EXACTLY_ONCE,
    ORDER_LOST,
    SAME_GLOBAL_BATCHES,
    SavePoint,
    UsageError,
    judge,
    sample_ids,
    tail_allowance,
)

# ---------------------------------------------------------------------------------------------
# identity


def test_integer_tensor_and_list_count_by_value():
    assert sample_ids(torch.tensor([5, 1, 9])) == [5, 1, 9]
    assert sample_ids([3, 4]) == [3, 4]
    assert sample_ids(torch.tensor(7)) == [7]


def test_tuple_and_dict_count_by_first_tensor():
    assert sample_ids((torch.tensor([2, 3]), torch.randn(2, 4))) == [2, 3]
    assert sample_ids({"label": "x", "idx": torch.tensor([8, 9]), "other": torch.tensor([0, 0])}) == [8, 9]


def test_float_and_2d_tensors_hash_each_row_stably():
    rows = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ids = sample_ids(rows)
    assert len(ids) == 3 and len(set(ids)) == 3 and all(i.startswith("h:") for i in ids)
    assert sample_ids(rows.clone()) == ids  # a stable hash, not id()
    assert sample_ids(rows[1:]) == ids[1:]
    assert sample_ids({"input_ids": torch.tensor([[1, 2], [3, 4]])}) == sample_ids(torch.tensor([[1, 2], [3, 4]]))


def test_anything_else_hashes_each_sample():
    ids = sample_ids(["a cat", "a dog"])
    assert len(set(ids)) == 2 and ids == sample_ids(["a cat", "a dog"])
    assert sample_ids({"text": ["a", "b"]}) == sample_ids(["a", "b"])


# ---------------------------------------------------------------------------------------------
# arguments


@pytest.mark.parametrize("text", ["1", "a:b", "1:2:3", "-1:2", ""])
def test_save_at_must_be_two_integers(text):
    with pytest.raises(UsageError, match="expected EPOCH:STEP"):
        _audit.parse_save_at(text)


def test_save_at_parses():
    assert _audit.parse_save_at("2:0") == SavePoint(2, 0)


@pytest.mark.parametrize("text", ["loaders.py", "module:", ":factory", "pkg.mod:not-an-identifier"])
def test_target_needs_a_location_and_a_factory(text):
    with pytest.raises(UsageError, match="expected path/to/file.py:factory or package.module:factory"):
        _audit.parse_target(text)


def test_target_file_and_module_are_checked(tmp_path):
    with pytest.raises(UsageError, match="file 'nowhere.py' not found"):
        _audit.parse_target("nowhere.py:make")
    with pytest.raises(UsageError, match="module 'no_such_module_xyz' not found"):
        _audit.parse_target("no_such_module_xyz:make")
    script = tmp_path / "pipeline.py"
    script.write_text("def make():\n    return 1\n")
    target = _audit.parse_target(f"{script}:make")
    assert target.is_file and target.module == str(script)
    assert _audit.load_target(target)() == 1
    assert not _audit.parse_target("json:loads").is_file


def test_missing_factory_lists_what_is_there(tmp_path):
    script = tmp_path / "pipeline2.py"
    script.write_text("def make_loader():\n    pass\n")
    with pytest.raises(UsageError, match="has no attribute 'make'; its callables: make_loader"):
        _audit.load_target(_audit.parse_target(f"{script}:make"))


def test_config_rejects_a_save_point_past_the_epochs(tmp_path):
    target = _audit.Target("x.py:f", "x", "f", False)
    with pytest.raises(UsageError, match="epoch 2 is not run with --epochs 2"):
        _audit.AuditConfig(target=target, nproc=2, resume_nproc=2, epochs=2, save_at=SavePoint(2, 0))


# ---------------------------------------------------------------------------------------------
# judge: the seed's cases


def _batches(flat, size):
    return [flat[i:i + size] for i in range(0, len(flat), size)]


EPOCH0 = [[39, 18, 10, 13], [63, 27, 2, 62], [25, 6, 37, 50], [15, 41, 52, 61], [5, 50, 18, 14]]
EPOCH1 = [[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34], [55, 16, 59, 0], [22, 46, 17, 57]]
SEED_SAVE = SavePoint(1, 3)


def test_exact():
    result = judge([[EPOCH0, EPOCH1]], [[EPOCH1[3:]]], SEED_SAVE)
    assert result.verdict == EXACT and result.ranks[0].first_difference is None


def test_the_seeds_bug_is_order_lost_replaying_epoch_0():
    result = judge([[EPOCH0, EPOCH1]], [[EPOCH0[3:]]], SEED_SAVE)
    assert result.verdict == ORDER_LOST
    assert "replays epoch 0's order from batch 3" in result.ranks[0].detail
    difference = result.ranks[0].first_difference
    assert (difference.epoch, difference.batch, difference.expected, difference.got) == (1, 3, EPOCH1[3], EPOCH0[3])


def test_same_position_other_order_is_order_lost():
    shuffled = [[57, 17, 46, 22], [0, 59, 16, 55]]
    result = judge([[EPOCH0, EPOCH1]], [[shuffled]], SEED_SAVE)
    assert result.verdict == ORDER_LOST and "the same samples, shuffled differently" in result.ranks[0].detail


def test_restarting_the_epoch_is_duplicated():
    result = judge([[EPOCH0, EPOCH1]], [[EPOCH1]], SEED_SAVE)
    assert result.verdict == DUPLICATED and "restarted at batch 0 instead of 3: 3 batches twice" in result.summary


def test_skipping_is_dropped():
    result = judge([[EPOCH0, EPOCH1]], [[EPOCH1[4:]]], SEED_SAVE)
    assert result.verdict == DROPPED
    assert judge([[EPOCH0, EPOCH1]], [[[]]], SEED_SAVE).verdict == DROPPED


def test_a_later_epoch_differing_is_diverged():
    epoch2 = [[1, 2, 3, 4], [5, 6, 7, 8]]
    other2 = [[8, 7, 6, 5], [4, 3, 2, 1]]
    result = judge([[EPOCH0, EPOCH1, epoch2]], [[EPOCH1[3:], other2]], SEED_SAVE)
    assert result.verdict == DIVERGED and result.ranks[0].first_difference.epoch == 2


def test_a_later_epoch_replaying_an_earlier_order_is_order_lost():
    # Stock Accelerate with a seedable sampler: epoch e + 1 after the resume gets epoch e's order.
    epoch2 = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]
    result = judge([[EPOCH0, EPOCH1, epoch2]], [[EPOCH1[3:], EPOCH1]], SEED_SAVE)
    assert result.verdict == ORDER_LOST and "replays epoch 1's order" in result.summary


def test_overall_verdict_is_the_most_severe_rank():
    result = judge([[EPOCH0, EPOCH1], [EPOCH0, EPOCH1]], [[EPOCH1[3:]], [EPOCH0[3:]]], SEED_SAVE)
    assert [r.verdict for r in result.ranks] == [EXACT, ORDER_LOST]
    assert result.verdict == ORDER_LOST and "1 of 2 ranks exact" in result.summary


def test_not_reproducible_from_a_fresh_start_is_reported():
    assert _audit.check_reproducible([[EPOCH0, EPOCH1]], [[EPOCH0, EPOCH1[:3]]], SEED_SAVE) is None
    reason = _audit.check_reproducible([[EPOCH0, EPOCH1]], [[EPOCH0, EPOCH0[:3]]], SEED_SAVE)
    assert reason is not None and "not reproducible" in reason


@pytest.mark.parametrize(("remaining", "world", "batch", "drop_last", "expected"), [
    (43, 3, 4, False, (5, 0)), (43, 3, 4, True, (0, 7)), (48, 3, 4, False, (0, 0)), (0, 2, 4, False, (0, 0)),
    (5, 1, 8, False, (3, 0)),
])
def test_tail_allowance(remaining, world, batch, drop_last, expected):
    assert tail_allowance(remaining, world, batch, drop_last) == expected


# ---------------------------------------------------------------------------------------------
# judge: properties over real plans


def plan_streams(n, world, batch, drop_last, seed, epochs, start_cursor=0, first_epoch=0):
    """Each rank's batches per epoch, from first_epoch on (the first one from start_cursor), as the
    shufflepoint loader deals them."""
    layout = Layout(n, world, batch, drop_last)
    orders = OrderCache("feistel", n, seed)
    streams = [[] for _ in range(world)]
    for epoch in range(first_epoch, epochs):
        cursor = start_cursor if epoch == first_epoch else 0
        for rank in range(world):
            start = StridedCut(layout, cursor)
            flat = [i for chunk in rank_index_chunks(orders.get(epoch, start), start, rank) for i in chunk]
            streams[rank].append(_batches(flat, batch))
    return streams


shapes = st.fixed_dictionaries({
    "n": st.integers(1, 70), "world": st.integers(1, 4), "batch": st.integers(1, 5),
    "new_world": st.integers(1, 4), "new_batch": st.integers(1, 5), "drop_last": st.booleans(),
    "seed": st.integers(0, 2**32), "save_epoch": st.integers(0, 1), "step_fraction": st.floats(0, 0.999),
})


def _elastic_case(shape):
    n, world, batch, drop_last = shape["n"], shape["world"], shape["batch"], shape["drop_last"]
    reference = plan_streams(n, world, batch, drop_last, shape["seed"], epochs=2)
    per_epoch = len(reference[0][shape["save_epoch"]])
    step = int(shape["step_fraction"] * per_epoch)
    save = SavePoint(shape["save_epoch"], step)
    cursor = Layout(n, world, batch, drop_last).cursor_after(0, step * batch)
    resumed = plan_streams(n, shape["new_world"], shape["new_batch"], drop_last, shape["seed"], epochs=2,
                           start_cursor=cursor, first_epoch=save.epoch)
    return reference, resumed, save, per_epoch


@settings(max_examples=300, deadline=None)
@given(shapes)
def test_a_real_elastic_resume_is_exactly_once(shape):
    """... and keeps its global batches when world x batch is the same (the strided deal does, in every epoch)."""
    reference, resumed, save, per_epoch = _elastic_case(shape)
    if per_epoch == 0 or shape["new_world"] == shape["world"]:
        return
    result = judge(reference, resumed, save, dataset_length=shape["n"], drop_last=shape["drop_last"],
                   resume_batch_size=shape["new_batch"])
    before, after = shape["world"] * shape["batch"], shape["new_world"] * shape["new_batch"]
    if shape["n"] < 2 * max(before, after):  # a step or two: the streams may not show the global batch
        assert result.verdict in (SAME_GLOBAL_BATCHES, EXACTLY_ONCE), result.summary
    else:
        assert result.verdict == (SAME_GLOBAL_BATCHES if before == after else EXACTLY_ONCE), \
            (result.summary, [e.detail for e in result.epochs])


@settings(max_examples=200, deadline=None)
@given(shapes)
def test_a_real_same_world_resume_is_exact(shape):
    reference, _, save, per_epoch = _elastic_case(shape)
    if per_epoch == 0:
        return
    cursor = Layout(shape["n"], shape["world"], shape["batch"], shape["drop_last"]).cursor_after(
        0, save.step * shape["batch"])
    resumed = plan_streams(shape["n"], shape["world"], shape["batch"], shape["drop_last"], shape["seed"], 2,
                           start_cursor=cursor, first_epoch=save.epoch)
    assert judge(reference, resumed, save, dataset_length=shape["n"]).verdict == EXACT


@settings(max_examples=300, deadline=None)
@given(shapes, st.data())
def test_an_injected_repeat_or_loss_is_caught(shape, data):
    """Padding is allowed only as the sizes say and only in the tail: a repeated sample anywhere
    before a rank's last batch, or one sample lost, is never EXACTLY_ONCE."""
    reference, resumed, save, per_epoch = _elastic_case(shape)
    if per_epoch == 0 or shape["new_world"] == shape["world"]:
        return
    ranks_with_body = [r for r, passes in enumerate(resumed) if len(passes[0]) >= 2]
    fault = data.draw(st.sampled_from(["repeat", "lose"]))
    if fault == "repeat":
        if not ranks_with_body:
            return
        rank = data.draw(st.sampled_from(ranks_with_body))
        first = resumed[rank][0][0]
        resumed[rank][0][0] = first + [first[0]]  # served twice, not in the tail
        expected = DUPLICATED
    else:
        candidates = [r for r, passes in enumerate(resumed) if passes[0] and passes[0][0]]
        if not candidates:
            return
        rank = data.draw(st.sampled_from(candidates))
        lost = resumed[rank][0][0].pop(0)
        others = [s for r in resumed for p in r for b in p for s in b] + [
            s for r in reference for b in r[save.epoch][: save.step] for s in b]
        if lost in others:
            return  # it was padding: losing a repeat loses nothing
        expected = DROPPED
    result = judge(reference, resumed, save, dataset_length=shape["n"], drop_last=shape["drop_last"],
                   resume_batch_size=shape["new_batch"])
    if expected == DROPPED and shape["drop_last"]:
        assert result.verdict in (DROPPED, EXACTLY_ONCE)  # dropping up to the tail is allowed
        if result.verdict == EXACTLY_ONCE:
            epoch = result.epochs[0]
            assert epoch.missing <= epoch.allowed_dropped
        return
    assert result.verdict == expected, (fault, result.summary)


def test_report_and_render_name_the_first_difference(tmp_path):
    config = _audit.AuditConfig(target=_audit.Target("t.py:f", "t", "f", False), nproc=1, resume_nproc=1)
    report = _audit.report_dict(config, judge([[EPOCH0, EPOCH1]], [[EPOCH0[3:]]], SEED_SAVE),
                                {"loader": "L", "dataset_length": 20}, {"total": 1.0})
    assert report["verdict"] == ORDER_LOST and report["exit_code"] == 1 and report["schema_version"] == 1
    text = _audit.render(report)
    assert "first difference: rank 0, epoch 1, batch 3" in text
    assert "[55 16 59 0]" in text and "[15 41 52 61]" in text
    assert text.splitlines()[-1].startswith("verdict: ORDER_LOST")


# -- the content check -----------------------------------------------------------------------------
def _content(ids_by_rank, salt=lambda epoch, sample: ""):
    """Digests shaped like the ids: sample s of epoch e gets 'e:s' plus ``salt(e, s)``."""
    return [[[[f"{e}:{s}{salt(e, s)}" for s in batch] for batch in epoch] for e, epoch in enumerate(rank)]
            for rank in ids_by_rank]


def _resumed_content(resumed, save, salt=lambda epoch, sample: ""):
    return [[[[f"{save.epoch + p}:{s}{salt(save.epoch + p, s)}" for s in batch] for batch in one]
             for p, one in enumerate(rank)] for rank in resumed]


def _judged(reference, resumed, save, reference_content, resumed_content):
    from shufflepoint._tools.audit.content import apply_content, judge_content

    judgement = judge(reference, resumed, save)
    apply_content(judgement, judge_content(reference, reference_content, resumed, resumed_content, save))
    return judgement


def _same_world_streams():
    reference = [[[[0, 1], [2, 3]], [[3, 0], [1, 2]]], [[[4, 5], [6, 7]], [[7, 4], [5, 6]]]]
    save = SavePoint(0, 1)
    resumed = [[rank[0][1:], rank[1]] for rank in reference]
    return reference, resumed, save


def test_equal_content_keeps_the_ids_verdict():
    reference, resumed, save = _same_world_streams()
    judgement = _judged(reference, resumed, save, _content(reference), _resumed_content(resumed, save))
    assert judgement.verdict == EXACT and judgement.content["differing"] == 0
    assert judgement.content["compared"] == 12  # 1 + 2 batches of 2 per rank, 2 ranks


def test_one_changed_sample_is_content_diverged_and_named():
    from shufflepoint._tools.audit import CONTENT_DIVERGED

    reference, resumed, save = _same_world_streams()
    changed = _resumed_content(resumed, save, salt=lambda epoch, sample: "x" if (epoch, sample) == (1, 5) else "")
    judgement = _judged(reference, resumed, save, _content(reference), changed)
    assert judgement.verdict == CONTENT_DIVERGED
    assert judgement.content["differing"] == 1 and judgement.content["examples"] == [{"epoch": 1, "id": 5}]
    assert "order right (EXACT" in judgement.summary and "epoch 1 sample 5" in judgement.summary


def test_an_elastic_resume_with_equal_samples_is_exactly_once():
    reference = [[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]]
    save = SavePoint(0, 1)
    resumed = [[[[2, 6]]], [[[3, 7]]], [[]]]  # 3 new ranks cut the rest differently
    judgement = _judged(reference, resumed, save, _content(reference), _resumed_content(resumed, save))
    assert judgement.verdict == EXACTLY_ONCE and judgement.content["compared"] == 4


def test_wrong_ids_keep_their_verdict_and_content_becomes_a_note():
    reference, resumed, save = _same_world_streams()
    resumed[0][0] = [[3, 2]]
    salt = lambda epoch, sample: "x"  # noqa: E731
    judgement = _judged(reference, resumed, save, _content(reference), _resumed_content(resumed, save, salt))
    assert judgement.verdict == ORDER_LOST and any(note.startswith("content: ") for note in judgement.notes)


def test_no_digests_leave_the_ids_verdict_and_say_so():
    reference, resumed, save = _same_world_streams()
    judgement = _judged(reference, resumed, save, None, None)
    assert judgement.verdict == EXACT and judgement.content["judged"] is False
    no_tensors = [[[None for _batch in epoch] for epoch in rank] for rank in reference]
    judgement = _judged(reference, resumed, save, no_tensors, [[[None for _ in one] for one in r] for r in resumed])
    assert judgement.verdict == EXACT and judgement.content["judged"] is False


def test_sample_digests_follow_rows_of_every_tensor():
    from shufflepoint._tools.audit.identity import sample_digests

    batch = {"id": torch.tensor([1, 2, 3]), "x": torch.zeros(3, 4), "meta": ["a", "b", "c"], "s": torch.tensor(1.0)}
    first = sample_digests(batch, 3)
    batch["x"][2, 1] = 1.0
    second = sample_digests(batch, 3)
    assert first[:2] == second[:2] and first[2] != second[2]
    assert sample_digests(["a", "b"], 2) is None and sample_digests(torch.zeros(3, 2), 2) is None


def test_content_diverged_ranks_below_the_ids_verdicts_and_fails():
    from shufflepoint._tools.audit import CONTENT_DIVERGED, exit_code
    from shufflepoint._tools.audit.verdicts import worst

    assert worst([EXACT, CONTENT_DIVERGED, EXACTLY_ONCE]) == CONTENT_DIVERGED
    assert worst([CONTENT_DIVERGED, DIVERGED]) == DIVERGED and worst([DROPPED, CONTENT_DIVERGED]) == DROPPED
    assert exit_code(CONTENT_DIVERGED) == 1 and exit_code(EXACTLY_ONCE) == 0


def _elastic_streams():
    reference = [[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]]
    return reference, [[[[2, 6]]], [[[3, 7]]], [[]]], SavePoint(0, 1)


def test_an_elastic_resume_with_one_changed_sample_is_content_diverged():
    from shufflepoint._tools.audit import CONTENT_DIVERGED

    reference, resumed, save = _elastic_streams()
    changed = _resumed_content(resumed, save, salt=lambda epoch, sample: "x" if sample == 7 else "")
    judgement = _judged(reference, resumed, save, _content(reference), changed)
    assert judgement.verdict == CONTENT_DIVERGED and judgement.content["examples"] == [{"epoch": 0, "id": 7}]
    assert "order right (EXACTLY_ONCE: every sample once)" in judgement.summary
    assert "1 of 4 resumed samples differ in content (e.g. epoch 0 sample 7)" in judgement.summary


def test_rows_shaped_by_another_batch_are_not_compared_on_an_elastic_resume_only():
    """Digests read SHAPE:CONTENT; a sample padded to another length in a differently cut batch
    has another SHAPE. Elastic: not comparable (counted, noted). Same world: other content."""
    from shufflepoint._tools.audit import CONTENT_DIVERGED

    def digests(streams, first_epoch, padded):
        return [[[[f"{'L2' if s in padded else 'L1'}:{first_epoch + e}-{s}" for s in batch] for batch in one]
                 for e, one in enumerate(rank)] for rank in streams]

    reference, resumed, save = _elastic_streams()
    judgement = _judged(reference, resumed, save, digests(reference, 0, ()), digests(resumed, 0, {6, 7}))
    assert judgement.verdict == EXACTLY_ONCE
    assert (judgement.content["compared"], judgement.content["reshaped"], judgement.content["differing"]) == (2, 2, 0)
    assert any("2 resumed samples not compared" in note for note in judgement.notes)
    reference, resumed, save = _same_world_streams()
    judgement = _judged(reference, resumed, save, digests(reference, 0, ()), digests(resumed, 0, {6}))
    assert judgement.verdict == CONTENT_DIVERGED and judgement.content["reshaped"] == 0
    assert judgement.content["examples"] == [{"epoch": 0, "id": 6}, {"epoch": 1, "id": 6}]


def test_two_fresh_runs_with_other_content_before_the_save_are_named_unreproducible():
    from shufflepoint._tools.audit import CONTENT_DIVERGED
    from shufflepoint._tools.audit.content import apply_content, check_content_reproducible, judge_content

    reference, resumed, save = _same_world_streams()
    reference_content = _content(reference)
    assert check_content_reproducible(reference_content, [[rank[0][:1]] for rank in reference_content], save) is None
    interrupted = [[[list(rank[0][0])]] for rank in reference_content]
    interrupted[1][0][0][1] += "x"  # rank 1, epoch 0, batch 0: the second sample came out otherwise
    reason = check_content_reproducible(reference_content, interrupted, save)
    assert reason is not None and "(rank 1, epoch 0, batch 0)" in reason
    content = judge_content(reference, reference_content, resumed, _resumed_content(resumed, save, lambda e, s: "x"),
                            save)
    content.unreproducible = reason
    judgement = judge(reference, resumed, save)
    apply_content(judgement, content)
    assert judgement.verdict == CONTENT_DIVERGED and judgement.summary.endswith("not reproducible at all")
    assert judgement.content["unreproducible"] == reason


def test_sample_digests_of_any_dtype_and_memory_layout():
    import numpy as np

    from shufflepoint._tools.audit.identity import sample_digests

    ids = torch.tensor([0, 1])
    half = sample_digests((ids, torch.tensor([[1.0, 2.0], [1.0, 2.5]], dtype=torch.bfloat16)), 2)
    assert half is not None and half[0] != half[1]  # bfloat16 has no numpy dtype: read as bytes
    flipped = np.flip(np.arange(6.0).reshape(2, 3), axis=1)  # negative strides
    assert sample_digests((ids, flipped), 2) == sample_digests((ids, np.ascontiguousarray(flipped)), 2)
    as_float, as_int = sample_digests((ids, torch.zeros(2, 2)), 2), sample_digests((ids, torch.zeros(2, 2).int()), 2)
    assert as_float[0] != as_int[0]  # the same bytes as another dtype are other content
    assert as_float[0].split(":")[0] == as_float[1].split(":")[0]  # one layout for the batch
    longer = sample_digests((ids, torch.zeros(2, 3)), 2)
    assert longer[0].split(":")[0] != as_float[0].split(":")[0]  # padded longer: another layout
    assert sample_digests((ids, torch.zeros(2, 2).to_sparse()), 2) == sample_digests(ids, 2)  # sparse: left out


def test_the_runner_judges_content_from_the_phases_records_and_checks_it_under_kill():
    """The runner's plumbing without launches: the records the worker writes (ids in ``epochs`` /
    ``passes``, digests in ``content`` / ``content_passes``), for a --kill audit of one rank."""
    from shufflepoint._tools.audit import CONTENT_DIVERGED
    from shufflepoint._tools.audit.runner import _judge_records

    reference, resumed, save = _same_world_streams()
    reference, resumed = reference[:1], resumed[:1]
    config = _audit.AuditConfig(target=_audit.Target("t.py:f", "t", "f", False), nproc=1, resume_nproc=1,
                                save_at=save, kill=True)
    digests = _content(reference)[0]
    records = [{"epochs": reference[0], "content": digests}]
    interrupted = [{"epochs": [reference[0][0][:1]], "content": [digests[0][:1]]}]
    new = [{"passes": resumed[0], "content_passes": _resumed_content(resumed, save)[0]}]
    judgement = _judge_records(config, {"dataset_length": 4}, records, interrupted, new)
    assert judgement.verdict == EXACT and judgement.content["compared"] == 6
    assert judgement.content["unreproducible"] is None
    interrupted[0]["content"] = [[["other", "0:1"]]]
    new[0]["content_passes"] = _resumed_content(resumed, save, lambda e, s: "x")[0]
    judgement = _judge_records(config, {"dataset_length": 4}, records, interrupted, new)
    assert judgement.verdict == CONTENT_DIVERGED and "(rank 0, epoch 0, batch 0)" in judgement.content["unreproducible"]
    del new[0]["content_passes"]  # a record without digests: judged by ids only
    judgement = _judge_records(config, {"dataset_length": 4}, records, interrupted, new)
    assert judgement.verdict == EXACT and judgement.content == {
        "judged": False, "detail": "not recorded: no tensor in the batches has a row per sample"}


# ---------------------------------------------------------------------------------------------
# same global batches: a resize at a fixed global batch


def _spans_streams(n, layouts, drop_last):
    """(reference, resumed, save): one epoch of positions under ``spans``, uninterrupted on the first
    (world, batch) and resumed after ``batches`` of it on the second, as the loader's cuts deal them."""
    from shufflepoint._core.deals import cut

    (world, batch, batches), (new_world, new_batch) = layouts
    whole = cut(Layout(n, world, batch, drop_last), "spans", 0, [])
    total = whole.samples_per_rank()
    reference = [[_batches(whole.rank_positions(r, 0, total).tolist(), batch)] for r in range(world)]
    cursor, segments = whole.after(batches * batch)
    parts = world if world * batch == new_world * new_batch else new_world  # as the layout history says
    rest = cut(Layout(n, new_world, new_batch, drop_last), "spans", cursor, segments, parts)
    left = rest.samples_per_rank()
    resumed = [[_batches(rest.rank_positions(r, 0, left).tolist(), new_batch)] for r in range(new_world)]
    return reference, resumed, SavePoint(0, batches)


@pytest.mark.parametrize("new_world, new_batch, verdict", [
    (2, 6, SAME_GLOBAL_BATCHES), (3, 4, SAME_GLOBAL_BATCHES), (6, 2, SAME_GLOBAL_BATCHES),
    (3, 3, EXACTLY_ONCE), (2, 5, EXACTLY_ONCE),
])
def test_a_corpus_resized_at_a_fixed_global_batch_keeps_its_global_batches(new_world, new_batch, verdict):
    reference, resumed, save = _spans_streams(531, [(4, 3, 20), (new_world, new_batch)], False)
    result = judge(reference, resumed, save, dataset_length=531, drop_last=False, resume_batch_size=new_batch)
    assert result.verdict == verdict, result.summary
    if verdict == SAME_GLOBAL_BATCHES:
        assert "each of the 25 global batches from epoch 0 on holds the uninterrupted run's samples" in result.summary


def test_a_fixed_global_batch_cut_again_is_exactly_once_with_a_note():
    """The re-deal 0.3 did (the loader without the position's layout): the same sizes, other global batches."""
    from shufflepoint._core.deals import cut

    reference, _, save = _spans_streams(531, [(4, 3, 20), (2, 6)], False)
    whole = cut(Layout(531, 4, 3, False), "spans", 0, [])
    cursor, segments = whole.after(60)
    rest = cut(Layout(531, 2, 6, False), "spans", cursor, segments)  # no canonical parts: re-dealt
    left = rest.samples_per_rank()
    resumed = [[_batches(rest.rank_positions(r, 0, left).tolist(), 6)] for r in range(2)]
    result = judge(reference, resumed, save, dataset_length=531, drop_last=False, resume_batch_size=6)
    assert result.verdict == EXACTLY_ONCE
    assert any("the global batch is the same before and after, but only 0 of the 25" in note for note in result.notes)


def test_a_global_batch_with_a_sample_moved_to_the_next_step_is_not_the_same():
    reference, resumed, save = _spans_streams(531, [(4, 3, 20), (2, 6)], False)
    resumed[0][0][0][0], resumed[1][0][1][0] = resumed[1][0][1][0], resumed[0][0][0][0]
    result = judge(reference, resumed, save, dataset_length=531, drop_last=False, resume_batch_size=6)
    assert result.verdict == EXACTLY_ONCE and "first difference: epoch 0, batch 20" in result.notes[0]

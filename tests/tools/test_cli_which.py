"""``shufflepoint which``: the loader rebuilt from a checkpoint answers every step of a run (before and
after a resize, across epochs) with what each rank received, down to a Packed row's documents; refusals
name the argument. Ranks are simulated in one process here (the arithmetic); real processes under
torchrun are in ``tests/distributed/test_which_cli.py``."""

from __future__ import annotations

import json

import pytest
import torch

import shufflepoint
from shufflepoint._core.older_states import upgraded
from shufflepoint._loading.block_choice import recorded_block
from shufflepoint._tools import cli
from shufflepoint._tools.which import WhichError, _user_fingerprint, answer, render
from shufflepoint._tools.which_checkpoint import Found, read_checkpoint


def run(dataset, legs, **options):
    """Train ``legs`` ((world, batch, steps), ...) with every rank simulated, each leg in fresh loaders
    loading the last state. Returns ({step: {rank: indices}}, the last state)."""
    received, state, step = {}, None, 0
    for world, batch, steps in legs:
        loaders = [shufflepoint.DataLoader(dataset, batch, world_size=world, rank=r, verify_ranks=False, **options)
                   for r in range(world)]
        if state is not None:
            for loader in loaders:
                loader.load_state_dict(state)
        iterators = [iter(loader) for loader in loaders]
        for _ in range(steps):
            batches = []
            for r, loader in enumerate(loaders):
                found = next(iterators[r], None)
                if found is None:  # the epoch ended: the next pass is the next epoch
                    iterators[r] = iter(loader)
                    found = next(iterators[r])
                batches.append(found)
            received[step] = {r: _indices(b) for r, b in enumerate(batches)}
            step += 1
        state = loaders[0].state_dict()
    return received, state


def _indices(batch):
    if isinstance(batch, dict):  # a Packed row's tokens, or a corpus row's id
        return batch["input_ids" if "input_ids" in batch else "id"].tolist()
    return batch.tolist()


def test_every_step_of_a_resized_run_from_its_last_state():
    data = list(range(23))
    received, state = run(data, [(2, 3, 5), (3, 2, 9), (1, 5, 7)], seed=4)
    for step, ranks in received.items():
        found = answer(Found(state, "file", "ckpt.pt"), data, step, locate=False)
        assert {int(r): [e["index"] for e in entries] for r, entries in found["ranks"].items()} == ranks, step
        assert found["loader_steps"] == [step]


def test_the_cli_on_a_torch_save_file(tmp_path, capsys):
    received, state = run(list(range(40)), [(2, 4, 3), (4, 2, 6)], seed=9)
    torch.save({"model": {}, "loader": state}, tmp_path / "ckpt.pt")
    factory = tmp_path / "data.py"
    factory.write_text("def dataset():\n    return list(range(40))\n")
    assert cli.main(["which", str(tmp_path / "ckpt.pt"), "--step", "1", "--rank", "1", "--dataset",
                     f"{factory}:dataset", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranks"] == {"1": [{"index": i, "step": 1} for i in received[1][1]]}
    assert cli.main(["which", str(tmp_path / "ckpt.pt"), "--step", "5", "--dataset", f"{factory}:dataset"]) == 0
    text = capsys.readouterr().out
    assert "rank 3: 2 samples" in text and "from the checkpoint alone" in text
    assert cli.main(["which", str(tmp_path / "ckpt.pt"), "--step", "5", "--rank", "7", "--dataset",
                     f"{factory}:dataset"]) == 2
    assert "--rank: found 7, but step 5 was read by ranks [0, 1, 2, 3]" in capsys.readouterr().err


def test_packed_rows_are_answered_with_their_documents(tmp_path):
    docs = [{"input_ids": list(range(d * 1000, d * 1000 + n))} for d, n in enumerate([5, 17, 3, 9, 30, 2, 11, 8])]
    packed = shufflepoint.Packed(docs, 6, progress=False)
    received, state = run(packed, [(2, 2, 3)], seed=1, shuffle_block=4)
    fresh = shufflepoint.Packed(docs, 6, progress=False)
    for step, ranks in received.items():
        found = answer(Found(state, "file", "ckpt"), fresh, step)
        for r, rows in ranks.items():
            rebuilt = [[t for d in entry["documents"] for t in docs[d["document"]]["input_ids"][slice(*d["tokens"])]]
                       for entry in found["ranks"][str(r)]]
            assert rebuilt == rows
    text = render(answer(Found(state, "file", "ckpt"), fresh, 1))
    first = answer(Found(state, "file", "ckpt"), fresh, 1)["ranks"]["0"][0]["documents"][0]
    assert f"      document {first['document']} tokens [{first['tokens'][0]}, {first['tokens'][1]})" in text


def test_an_hf_trainer_checkpoint_answers_optimizer_steps(tmp_path):
    data = list(range(30))
    received, state = run(data, [(2, 3, 4)], seed=2)  # 4 batches per rank = 2 optimizer steps of GA 2
    found = Found(state, "hf_trainer", "checkpoint-2/shufflepoint_loader.json", trainer_step=2)
    second = answer(found, data, 2, accumulation=2, locate=False)
    assert second["loader_steps"] == [2, 3]
    assert [e["index"] for e in second["ranks"]["0"]] == received[2][0] + received[3][0]
    with pytest.raises(WhichError, match="--accumulation: found 2, but it applies to an HF Trainer checkpoint only"):
        answer(Found(state, "file", "ckpt"), data, 2, accumulation=2)


def test_a_state_of_another_dataset_is_refused_by_name(tmp_path):
    _, state = run(list(range(30)), [(2, 3, 2)], seed=2)
    with pytest.raises(WhichError, match=r"as a resume would refuse it:\n.*n"):
        answer(Found(state, "file", "ckpt"), list(range(31)), 0)


def test_the_run_options_come_back_from_the_state():
    assert recorded_block({"version": 4, "shuffle_block": 512}) == 512
    assert recorded_block({"version": 3, "order": "blocks", "dataset_fingerprint": "shards:abc:blocks=512:mine"}) == 512
    assert recorded_block({"version": 3, "order": "feistel", "dataset_fingerprint": "auto:n=3:ff"}) is None

    class Corpus:
        fingerprint = "shards:abc"

    assert _user_fingerprint("shards:abc:mine", Corpus()) == "mine"
    assert _user_fingerprint("shards:abc", Corpus()) is None
    assert _user_fingerprint("auto:n=3:ff", [1, 2, 3]) == "auto"
    assert _user_fingerprint("v7", [1, 2, 3]) == "v7" and _user_fingerprint(None, []) is None
    old = {"version": 3, "order": "mixture", "dataset_fingerprint": "shards:abc|0:9c2e:blocks=512:grid=24:mine"}
    assert _user_fingerprint(upgraded(old)["dataset_fingerprint"], Corpus()) == "mine"  # as 0.4 wrote it


def test_which_answers_a_scheduled_mixture_resized_to_another_global_batch():
    """The run's global batch (its schedule's grid) comes back from the fingerprint: the answers of a state
    saved after a resize from 2 x 3 to 4 x 2 (with a user fingerprint) are what each rank received."""
    from shufflepoint._shards.corpora.mixture.mixture import Mixture

    def mixture():
        return Mixture([list(range(100)), list(range(1000, 1040))], samples_per_epoch=60,
                       schedule=[(0, [3, 1]), (25, [0, 1])])

    def loaders(world, batch):
        return [shufflepoint.DataLoader(mixture(), batch, seed=5, rank=r, world_size=world, collate_fn=list,
                                        dataset_fingerprint="mine") for r in range(world)]

    first = loaders(2, 3)
    iterators = [iter(loader) for loader in first]
    received = [{r: next(i) for r, i in enumerate(iterators)} for _ in range(4)]
    second = loaders(4, 2)
    with pytest.warns(UserWarning, match="global batch: found 8 rows"):
        for loader in second:
            loader.load_state_dict(first[0].state_dict())
    iterators = [iter(loader) for loader in second]
    received += [{r: next(i) for r, i in enumerate(iterators)} for _ in range(3)]
    state = second[0].state_dict()
    assert state["dataset_fingerprint"].endswith(":mine") and state["grid"] == 6
    data = mixture()
    for step, batches in enumerate(received):
        found = answer(Found(state, "file", "ckpt"), data, step, locate=False)
        indices = {int(r): [e["index"] for e in v] for r, v in found["ranks"].items()}
        assert {r: [data[i] for i in ids] for r, ids in indices.items()} == batches, step


def test_read_checkpoint_then_answer_from_a_json_file(tmp_path):
    received, state = run(list(range(12)), [(3, 1, 6)], seed=0)
    (tmp_path / "s.json").write_text(json.dumps(state))
    found = answer(read_checkpoint(str(tmp_path / "s.json")), list(range(12)), 5, locate=False)
    assert {int(r): [e["index"] for e in v] for r, v in found["ranks"].items()} == received[5]


def test_an_hf_trainer_checkpoint_across_a_resize():
    """2 ranks x 3, GA 2, for 2 optimizer steps (4 batches, cursor 24 of 30); then 1 rank x 3: the Trainer
    places itself at 8 of 10 batches, global_step 4, so its steps 3 and 4 never run; step 5 is loader
    steps 4-5 (the end of epoch 0), step 6 loader steps 6-7 (epoch 1)."""
    data = list(range(30))
    received, state = run(data, [(2, 3, 4), (1, 3, 6)], seed=3)
    found = Found(state, "hf_trainer", "checkpoint-7", trainer_step=7)

    def trained(update):
        result = answer(found, data, update, accumulation=2, locate=False)
        return result["loader_steps"], {int(r): [e["index"] for e in v] for r, v in result["ranks"].items()}

    assert trained(2) == ([2, 3], {r: received[2][r] + received[3][r] for r in (0, 1)})
    assert trained(5) == ([4, 5], {0: received[4][0] + received[5][0]})
    assert trained(6) == ([6, 7], {0: received[6][0] + received[7][0]})
    for skipped in (3, 4):
        with pytest.raises(WhichError, match=f"--step {skipped}: this checkpoint was written before .* never ran"):
            answer(found, data, skipped, accumulation=2)


def test_a_mixture_read_with_its_own_order_and_block(tmp_path):
    def mixture():
        return shufflepoint.Mixture([(list(range(100, 117)), 2), (list(range(500, 509)), 1)], samples_per_epoch=21)

    received, state = run(mixture(), [(2, 2, 4), (3, 1, 9)], seed=6, shuffle_block=7)
    assert state["shuffle_block"] == 7
    fresh = mixture()
    for step, ranks in received.items():
        found = answer(Found(state, "file", "ckpt"), fresh, step)
        for r, samples in ranks.items():
            entries = found["ranks"][str(r)]
            assert [fresh.sources[e["source"]][e["source_index"]] for e in entries] == samples, (step, r)


def test_the_cli_over_shard_sources(tmp_path, capsys):
    from corpus_files import jsonl_corpus

    jsonl_corpus(str(tmp_path / "corpus"), 6, rows=(4, 4))
    sources = str(tmp_path / "corpus" / "*.jsonl")

    def corpus():
        return shufflepoint.Shards(sources, cache_dir=str(tmp_path / "cache"), progress=False)

    received, state = run(corpus(), [(2, 2, 3), (3, 2, 2)], seed=8)
    torch.save({"loader": state}, tmp_path / "ckpt.pt")
    assert cli.main(["which", str(tmp_path / "ckpt.pt"), "--step", "4", "--dataset", sources, "--cache-dir",
                     str(tmp_path / "cache"), "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    for rank, entries in out["ranks"].items():
        assert [corpus()[e["index"]]["id"] for e in entries] == received[4][int(rank)]
        assert all(e["url"].endswith(".jsonl") and e["line"] == e["row"] + 1 for e in entries)
    assert sorted(out["ranks"]) == ["0", "1", "2"]


def test_a_wrong_accumulation_is_caught_by_the_trainers_own_step():
    data = list(range(30))
    _, state = run(data, [(2, 3, 4), (1, 3, 6)], seed=3)
    found = Found(state, "hf_trainer", "checkpoint-7", trainer_step=7)
    with pytest.raises(WhichError, match=r"--accumulation: found 1, but with it .* is optimizer step 14, and "
                                         r"trainer_state.json says 7"):
        answer(found, data, 5, accumulation=1)


def test_the_cli_on_a_dcp_folder_without_locating(tmp_path, capsys):
    import torch.distributed.checkpoint as dcp

    data = list(range(26))
    received, state = run(data, [(2, 3, 2), (3, 2, 5)], seed=12)
    loader = shufflepoint.DataLoader(data, 2, seed=12, world_size=3, rank=0, verify_ranks=False)
    loader.load_state_dict(state)
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": {"w": torch.ones(2)}, "loader": loader}, checkpoint_id=str(tmp_path / "step-7"))
    factory = tmp_path / "data.py"
    factory.write_text("def dataset():\n    return list(range(26))\n")
    for step in (1, 4):
        assert cli.main(["which", str(tmp_path / "step-7"), "--step", str(step), "--no-locate", "--dataset",
                         f"{factory}:dataset", "--json", "-"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["kind"] == "dcp"
        assert {int(r): [e["index"] for e in v] for r, v in out["ranks"].items()} == received[step]


def test_the_text_shows_the_documents_of_a_mixtures_packed_source():
    from shufflepoint._tools.which import _lines

    entry = {"index": 21, "source": 1, "source_index": 1, "where": {
        "index": 1, "epoch": 0, "row": 1, "documents": [{"document": 13, "tokens": [8, 10]},
                                                       {"document": 36, "tokens": [0, 8], "where": {"index": 36,
                                                                                                 "shard": 2}}]}}
    assert _lines(entry, "") == ["21 source=1 source_index=1 -> 1 epoch=0 row=1", "  document 13 tokens [8, 10)",
                                 "  document 36 tokens [0, 8) -> 36 shard=2"]


def test_which_answers_a_mixture_whose_weights_changed_inside_epochs_under_spans():
    """Weights changed inside epoch 0 (2 x 3) and, after a resize to 3 x 2, inside epoch 1: the answers from the
    last state alone (a Mixture built with its first phase only) are what each rank received (``mixture/lays.py``)."""
    from shufflepoint._shards.corpora.mixture.mixture import Mixture

    def mixture():
        return Mixture([list(range(100)), list(range(1000, 1040))], samples_per_epoch=60, schedule=[(0, [3, 1])])

    def loaders(world, batch):
        return [shufflepoint.DataLoader(mixture(), batch, seed=5, rank=r, world_size=world, collate_fn=list,
                                        verify_ranks=False) for r in range(world)]

    received, ranks, state = [], loaders(2, 3), None
    for world, batch, steps, change in ((2, 3, 6, {2: [0, 1]}), (3, 2, 12, {9: [5, 1]})):
        if state is not None:
            ranks = loaders(world, batch)
            for loader in ranks:
                loader.load_state_dict(state)
        iterators = [iter(loader) for loader in ranks]
        for _ in range(steps):
            if ranks[0].step in change:
                for loader in ranks:
                    loader.set_weights(change[ranks[0].step])
            got = {r: next(i, None) for r, i in enumerate(iterators)}
            if got[0] is None:
                iterators = [iter(loader) for loader in ranks]
                got = {r: next(i) for r, i in enumerate(iterators)}
            received.append(got)
        state = ranks[0].state_dict()
    assert [p[0] for p in state["phases"]] == [0, 12, 36 + 3 * 6]
    data = mixture()
    for step, batches in enumerate(received):
        found = answer(Found(state, "file", "ckpt"), data, step, locate=False)
        indices = {int(r): [e["index"] for e in v] for r, v in found["ranks"].items()}
        assert {r: [data[i] for i in ids] for r, ids in indices.items()} == batches, step

"""skip_bad_samples on 2 real processes (Gloo) where the loader cannot exclude and only replaces: a Mixture of
Packed sources with one corrupt record (its corpus transform raises UnicodeDecodeError), and a bucketed image corpus
with one image PIL cannot identify (its corpus transform raises UnidentifiedImageError). For each: the run survives,
every rank keeps the same record, ``which`` tells what each slot served, the stream is the same with 0 and 2 workers,
a SIGKILLed run resumed in new processes continues batch for batch, a resume on 3 ranks serves every sample of the
interrupted epoch in its own slot once, and ``max_skips=0`` stops every rank at the same step with one error naming
the shard and the row."""

import base64
import io
import json
import os
from collections import Counter

import pytest
from PIL import Image

from corpus_files import jsonl_documents
from shufflepoint._tools.launch import launch

pytestmark = pytest.mark.skips  # make test-skips

WORKER = os.path.join(os.path.dirname(__file__), "workers", "skip_groups_worker.py")
SHAPES = [(8, 8), (8, 16), (16, 8)]  # (height, width) of the buckets' images


def documents(folder):
    """Two JSONL token corpora; the bad record is a short document of ``a``: (its id, its shard, its row)."""
    jsonl_documents(os.path.join(folder, "a"), 4, rows=(5, 8), seed=1)
    jsonl_documents(os.path.join(folder, "b"), 3, rows=(5, 8), seed=2)
    for shard in range(4):
        path = os.path.join(folder, "a", f"part-{shard:05d}.jsonl")
        with open(path) as f:
            for row, line in enumerate(f):
                document = json.loads(line)
                if 8 <= len(document["input_ids"]) <= 24 and shard >= 1:
                    return document["id"], path, row
    raise AssertionError("no short document")


def images(folder):
    """A JSONL image corpus (PNG in base64, each image's id in its first two pixels), its bucket keys (the shape),
    and its bad record, a PNG cut short: (keys, (its id, its shard, its row))."""
    os.makedirs(os.path.join(folder, "images"))
    keys, ident = [], 0
    bad = None
    for shard in range(5):
        path = os.path.join(folder, "images", f"part-{shard:05d}.jsonl")
        with open(path, "w") as f:
            for row in range(9):
                key = (ident * 7 + shard) % 3
                height, width = SHAPES[key]
                image = Image.new("L", (width, height), 0)
                image.putpixel((0, 0), ident % 256)
                image.putpixel((1, 0), ident // 256)
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
                data = buffer.getvalue()
                if shard == 3 and row == 4:
                    data, bad = b"\x89PNG not an image", (ident, path, row)
                f.write(json.dumps({"id": ident, "png": base64.b64encode(data).decode()}) + "\n")
                keys.append(key)
                ident += 1
    return keys, bad


@pytest.fixture(scope="module", params=["mixture", "buckets"])
def ran(tmp_path_factory, request):
    kind = request.param
    folder = str(tmp_path_factory.mktemp(kind))
    if kind == "mixture":
        bad = documents(folder)
        spec = {"bad": bad[0]}
    else:
        keys, bad = images(folder)
        spec = {"keys": keys}
    with open(os.path.join(folder, "spec.json"), "w") as f:
        json.dump(spec, f)
    launch([WORKER, "whole", folder, kind], 2).check()
    killed = launch([WORKER, "save", folder, kind], 2, kill_when=os.path.join(folder, f"{kind}.saved"))
    assert killed.killed, "the save run was supposed to be SIGKILLed"
    launch([WORKER, "resume", folder, kind], 2).check()
    launch([WORKER, "three", folder, kind], 3).check()

    def read(name, rank):
        with open(os.path.join(folder, f"{kind}.{name}.r{rank}.json")) as f:
            return json.load(f)

    return kind, bad, spec, read


def test_the_run_survives_and_every_rank_agrees(ran):
    kind, (bad, shard, row), spec, read = ran
    whole = [read("whole0", rank) for rank in range(2)]
    record = whole[0]["skipped"]
    assert record and record == whole[1]["skipped"] == read("whole2", 0)["skipped"]
    for rank in range(2):
        assert read("whole2", rank)["steps"] == whole[rank]["steps"]  # num_workers changes nothing
    for _step, index, replacement, shard_named, row_named, error in record:
        assert shard_named == shard and row_named == row, (shard_named, row_named)
        assert ("UnidentifiedImageError" if kind == "buckets" else "UnicodeDecodeError") in error
        if kind == "buckets":
            assert index == bad and spec["keys"][replacement] == spec["keys"][bad]  # replaced inside its bucket
    epochs = {epoch for epoch, *_ in whole[0]["steps"]}
    assert len({entry[0] for entry in record}) >= len(epochs)  # met again every epoch: replaced, not excluded
    for rank in range(2):
        for _epoch, step, nominal, served, content in whole[rank]["steps"]:
            assert len(content) == len(nominal) == len(served)  # a batch that held a bad sample is full too
            if kind == "buckets":
                assert content == served and bad not in content  # which() names what was served
                assert len({spec["keys"][i] for i in content}) == 1  # one bucket, the replacement too
            skipped_here = [entry for entry in record if entry[0] == step]
            if not skipped_here:
                assert served == nominal
            for entry in skipped_here:
                if entry[1] in nominal:
                    assert len(content) == 2
                    assert entry[2] in served and entry[1] not in served


def test_a_killed_run_resumes_batch_for_batch_in_new_processes(ran):
    _kind, _bad, _spec, read = ran
    for rank in range(2):
        whole = read("whole0", rank)
        joined = read("save", rank)["steps"] + read("resume", rank)["steps"]
        assert joined == whole["steps"]
        assert read("resume", rank)["skipped"] == whole["skipped"]  # the record carried over


def test_a_resume_on_three_ranks_serves_the_interrupted_epoch_once(ran):
    _kind, _bad, _spec, read = ran
    whole = [step for rank in range(2) for step in read("whole0", rank)["steps"]]
    epoch = whole[0][0]
    reference = Counter(i for e, _step, nominal, _served, _content in whole if e == epoch for i in nominal)
    head = [step for rank in range(2) for step in read("save", rank)["steps"]]
    tail = [step for rank in range(3) for step in read("three", rank)["steps"]]
    found = Counter(i for e, _step, nominal, _served, _content in head + tail if e == epoch for i in nominal)
    assert set(found) == set(reference) and all(found[i] >= reference[i] for i in reference)
    last = max(step for e, step, *_ in tail if e == epoch)  # drop_last=False pads the epoch's last global batch
    padded = Counter(i for e, step, nominal, *_ in tail if e == epoch and step == last for i in nominal)
    assert found - reference <= padded and sum((found - reference).values()) < 3 * 2


def test_past_the_limit_every_rank_stops_at_one_step_naming_the_shard_and_row(ran):
    _kind, (_bad, shard, row), _spec, read = ran
    stopped = [read("resume", rank)["stopped"] for rank in range(2)]
    assert stopped[0] == stopped[1]
    step, text = stopped[0]
    first = min(entry[0] for entry in read("whole0", 0)["skipped"])
    assert step == first + 1  # max_skips=0: stopped at the batch of the first skip (received, so counted)
    assert "max_skips=0" in text and f"shard {shard} row {row}" in text, text

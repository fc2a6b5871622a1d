"""Hub datasets as a corpus, against the local stand-in of the Hub's HTTP API (tests/hub_server.py), read by the
real ``huggingface_hub`` client: pinned to a commit, listed once a node, read by range, named refusals.

The resume in fresh processes on 2 and 3 ranks, and the bytes each node fetches: tests/distributed/test_hub_resume.py.
"""

from __future__ import annotations

import glob
import os
import time
import uuid

import pytest

import shufflepoint
from shufflepoint import HubError, ShardError, Shards, StateError

pytestmark = pytest.mark.hub  # make test-hub (~15 s here), not make test
pytest.importorskip("huggingface_hub")
from corpus_files import parquet_corpus  # noqa: E402


def parquet_files(tmp_path, shards, first_id=0, prefix="data/train-", seed=1):
    """{path in the repository: bytes} of ``shards`` Parquet files (``id``, ``text``), and their ids."""
    folder = str(tmp_path / uuid.uuid4().hex[:8])
    ids = parquet_corpus(folder, shards, first_id=first_id, seed=seed)
    files = {}
    for n, path in enumerate(sorted(glob.glob(os.path.join(folder, "*.parquet")))):
        with open(path, "rb") as f:
            files[f"{prefix}{n:05d}.parquet"] = f.read()
    return files, ids


def new_repo(hub, **kwargs):
    name = "org/ds-" + uuid.uuid4().hex[:8]
    hub.create(name, **kwargs)
    return name


def card(yaml):
    return ("---\n" + yaml.strip() + "\n---\n# a dataset\n").encode()


def options(hub, **more):
    return {"endpoint": hub.url, **more}


def all_ids(corpus):
    return sorted(int(corpus[i]["id"]) for i in range(len(corpus)))


def test_a_glob_is_pinned_to_its_commit_listed_once_a_node_and_read_by_range(hub, tmp_path):
    name = new_repo(hub)
    files, ids = parquet_files(tmp_path, 60)
    commit = hub.commit(name, files)
    cache = str(tmp_path / "cache")
    corpus = Shards(f"hf://datasets/{name}/data/*.parquet", storage_options=options(hub), cache_dir=cache,
                    progress=False)
    assert corpus.index.root == f"hf://datasets/{name}@{commit}/data"
    assert all_ids(corpus) == sorted(ids)
    assert hub.requests("/tree/") >= 3  # 60 files in pages of 25: the Link header was followed
    resolves = [path for method, path, _ in hub.log if "/resolve/" in path]
    assert resolves and all(f"/resolve/{commit}/" in path for path in resolves)  # every read names the commit
    assert all(rng for method, path, rng in hub.log if path.startswith("/cdn/"))  # every byte by range
    hub.reset()
    again = Shards(f"hf://datasets/{name}/data/*.parquet", storage_options=options(hub), cache_dir=cache,
                   progress=False)
    assert again.fingerprint == corpus.fingerprint
    assert hub.requests("/tree/") == 0 and hub.requests("/paths-info/") == 0  # the node's kept listing
    assert hub.requests("/api/") == 1  # the revision's commit, looked up once by this process
    hub.reset()
    pinned = Shards(f"hf://datasets/{name}@{commit}/data/*.parquet", storage_options=options(hub), cache_dir=cache,
                    progress=False)
    assert pinned.fingerprint == corpus.fingerprint and len(hub.log) == 0  # a commit: no request at all
    from shufflepoint._shards.index.indexing import publish
    from shufflepoint._shards.storage.storage import Storage

    with pytest.raises(ValueError, match="(?s)a Hub dataset.*commit to the dataset's repository"):
        publish(corpus.index, Storage(options(hub)))  # shufflepoint index hf://...: refused, nothing written


def test_a_branch_pushed_to_mid_run_is_never_read(hub, tmp_path):
    name = new_repo(hub)
    files, ids = parquet_files(tmp_path, 6)
    first = hub.commit(name, files)
    corpus = Shards(f"hf://datasets/{name}/data/*.parquet", storage_options=options(hub),
                    cache_dir=str(tmp_path / "cache"), progress=False)
    replaced, _ = parquet_files(tmp_path, 6, first_id=1000, seed=7)
    second = hub.commit(name, replaced)  # main moves: same names, other rows
    assert second != first
    assert all_ids(corpus) == sorted(ids)  # the run reads the commit it started on
    assert not any(second in path for _, path, _ in hub.log)


def test_a_resume_after_the_branch_moved_is_refused_naming_both_commits(hub, tmp_path):
    name = new_repo(hub)
    files, _ = parquet_files(tmp_path, 6)
    first = hub.commit(name, files)
    cache = str(tmp_path / "cache")
    make = lambda: Shards(f"hf://datasets/{name}/data/*.parquet", storage_options=options(hub),  # noqa: E731
                          cache_dir=cache, progress=False)
    loader = shufflepoint.DataLoader(make(), 2, seed=3)
    next(iter(loader))
    state = loader.state_dict()
    card_only = hub.commit(name, {"README.md": b"# only the card changed\n"})  # main moves, the data files do not
    same_files = shufflepoint.DataLoader(make(), 2, seed=3)
    same_files.load_state_dict(state)  # the same blobs at another commit: the same corpus, resumed
    replaced, _ = parquet_files(tmp_path, 6, first_id=1000, seed=7)
    moved = hub.commit(name, replaced)
    resumed = shufflepoint.DataLoader(make(), 2, seed=3)
    with pytest.raises(StateError, match=f"(?s)read at commit ({first}|{card_only}) when.*{moved} now.*revision=") \
            as refused:  # either commit holds the state's corpus: the node cache names the latest it indexed
        resumed.load_state_dict(state)
    assert "train-00000.parquet changed" in str(refused.value)
    pinned = shufflepoint.DataLoader(Shards(f"hf://datasets/{name}@{first}/data/*.parquet",
                                            storage_options=options(hub), cache_dir=cache, progress=False), 2, seed=3)
    pinned.load_state_dict(state)  # the fix the refusal names: the commit the run started on


def test_refusals_are_named(hub, tmp_path):
    files, _ = parquet_files(tmp_path, 3)
    gated = new_repo(hub, gated=True, granted=("granted-token",))
    hub.commit(gated, files)
    with pytest.raises(HubError, match="(?s)gated.*HF_TOKEN") as error:
        Shards(f"hf://datasets/{gated}/data/*.parquet", storage_options=options(hub), cache_dir=str(tmp_path / "c"),
               progress=False)
    assert error.value.reason == "gated"
    with pytest.raises(HubError, match="gated"):
        Shards(f"hf://datasets/{gated}/data/*.parquet", storage_options=options(hub, token="another-token"),
               cache_dir=str(tmp_path / "c"), progress=False)
    assert len(Shards(f"hf://datasets/{gated}/data/*.parquet", storage_options=options(hub, token="granted-token"),
                      cache_dir=str(tmp_path / "c"), progress=False)) > 0
    private = new_repo(hub, private=True, granted=("granted-token",))
    hub.commit(private, files)
    with pytest.raises(HubError, match="(?s)private.*HF_TOKEN") as error:
        Shards(f"hf://datasets/{private}/data/*.parquet", storage_options=options(hub), progress=False,
               cache_dir=str(tmp_path / "c"))
    assert error.value.reason == "not_found"
    with pytest.raises(HubError, match="no revision 'v9'") as error:
        Shards(f"hf://datasets/{private}@v9/data/*.parquet", storage_options=options(hub, token="granted-token"),
               cache_dir=str(tmp_path / "c"), progress=False)
    assert error.value.reason == "revision"


def test_a_429_storm_is_retried_with_backoff_then_named(hub, tmp_path):
    name = new_repo(hub)
    files, ids = parquet_files(tmp_path, 4)
    hub.commit(name, files)
    make = lambda cache, **kw: Shards(f"hf://datasets/{name}/data/*.parquet", storage_options=options(hub),  # noqa: E731
                                      cache_dir=str(tmp_path / cache), progress=False, **kw)
    hub.fail_next(6, 429, only="/cdn/")  # six reads answered 429 (Retry-After: 0): each is retried
    assert all_ids(make("a", retries=8)) == sorted(ids) and hub.injected == 6
    hub.fail_next(1, 429, only="/cdn/", throttle={"RateLimit": '"resolvers";r=0;t=1'})
    started = time.monotonic()
    assert all_ids(make("d", retries=1)) == sorted(ids)
    assert time.monotonic() - started >= 1.0  # the wait the Hub's RateLimit header asked for, not 0.2 s
    hub.fail_next(1000, 429, only="/cdn/")
    with pytest.raises(ShardError, match="(?s)rate limited.*429.*HF_TOKEN"):
        make("b", retries=2)
    hub.fail_next(1000, 429, only="/api/")  # the revision's lookup itself (huggingface_hub's own retries, then ours)
    with pytest.raises(HubError, match="rate limited") as error:
        make("c", retries=1)
    assert error.value.reason == "rate_limited"


FINEWEB_CARD = """
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*/*
- config_name: sample-10BT
  data_files:
  - split: train
    path: sample/10BT/*
"""


def test_from_hub_takes_the_files_of_the_cards_configs(hub, tmp_path):
    name = new_repo(hub)
    web, web_ids = parquet_files(tmp_path, 4, prefix="data/CC-MAIN-2024-10/")
    sample, sample_ids = parquet_files(tmp_path, 2, first_id=500, prefix="sample/10BT/")
    commit = hub.commit(name, {"README.md": card(FINEWEB_CARD), **web, **sample})
    so = options(hub)
    default = Shards.from_hub(name, storage_options=so, cache_dir=str(tmp_path / "c"), progress=False)
    assert all_ids(default) == sorted(web_ids) and commit in default.index.root
    assert all_ids(Shards.from_hub(name, "sample-10BT", storage_options=so, cache_dir=str(tmp_path / "c"),
                                   progress=False)) == sorted(sample_ids)
    with pytest.raises(HubError, match="(?s)config: found 'nope'.*one of default, sample-10BT") as error:
        Shards.from_hub(name, "nope", storage_options=so, cache_dir=str(tmp_path / "c"))
    assert error.value.reason == "config"
    with pytest.raises(HubError, match="(?s)split: found 'test'.*one of train") as error:
        Shards.from_hub(name, split="test", storage_options=so, cache_dir=str(tmp_path / "c"))
    assert error.value.reason == "split"
    with pytest.raises(HubError, match="no revision"):
        Shards.from_hub(name, revision="v2", storage_options=so, cache_dir=str(tmp_path / "c"))
    hub.commit(name, {"README.md": card(FINEWEB_CARD.replace("sample-10BT\n", "sample-10BT\n  default: true\n"))})
    with pytest.raises(HubError, match="several default configs: default, sample-10BT"):
        Shards.from_hub(name, storage_options=so, cache_dir=str(tmp_path / "c"))  # load_dataset refuses it too


def test_from_hub_reads_the_parquet_conversion_of_other_formats(hub, tmp_path):
    name = new_repo(hub)
    splits = "".join(f"  - split: {split}\n    path: data/{split}.csv\n" for split in ("train", "test", "validation"))
    original = hub.commit(name, {"README.md": card("configs:\n- config_name: default\n  data_files:\n" + splits),
                                 **{f"data/{split}.csv": b"id\n1\n2\n" for split in ("train", "test", "validation")}})
    train, train_ids = parquet_files(tmp_path, 3, prefix="default/train/")
    test, _ = parquet_files(tmp_path, 1, first_id=900, prefix="default/test/")
    partial, partial_ids = parquet_files(tmp_path, 2, first_id=700, prefix="default/partial-validation/")
    converted = hub.commit(name, {**train, **test, **partial}, branch="refs/convert/parquet")
    so = options(hub)
    corpus = Shards.from_hub(name, split="train", storage_options=so, cache_dir=str(tmp_path / "c"), progress=False)
    assert all_ids(corpus) == sorted(train_ids) and converted in corpus.index.root and original != converted
    with pytest.warns(UserWarning, match="partial"):
        part = Shards.from_hub(name, split="validation", storage_options=so, cache_dir=str(tmp_path / "c"),
                               progress=False)
    assert all_ids(part) == sorted(partial_ids)
    with pytest.raises(HubError, match="(?s)split: found 'dev'.*one of train, test, validation"):
        Shards.from_hub(name, split="dev", storage_options=so, cache_dir=str(tmp_path / "c"))
    bare = new_repo(hub)
    hub.commit(bare, {"data/train.csv": b"id\n1\n"})
    with pytest.raises(HubError, match="no configs: block") as error:
        Shards.from_hub(bare, storage_options=so, cache_dir=str(tmp_path / "c"))
    assert error.value.reason == "config"


def test_hf_endpoint_and_token_come_from_the_environment_in_a_fresh_process(hub, tmp_path):
    """HF_ENDPOINT and HF_TOKEN as huggingface_hub reads them (at import: a fresh process)."""
    import subprocess
    import sys

    private = new_repo(hub, private=True, granted=("env-token",))
    files, ids = parquet_files(tmp_path, 3)
    hub.commit(private, files)
    code = (f"import shufflepoint; c = shufflepoint.Shards('hf://datasets/{private}/data/*.parquet', "
            f"cache_dir={str(tmp_path / 'c')!r}, progress=False); print(len(c))")
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": "env-token", "HF_HUB_CACHE": str(tmp_path / "hf"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(ids))


def test_an_image_folder_dataset_is_read_from_its_conversion_and_decoded(hub, tmp_path):
    """An image dataset stored as JPEG files (an imagefolder: no configs: block) is read from the Hub's Parquet
    conversion, whose ``image`` column is the datasets Image feature's struct ({"bytes", "path"}): the
    docs/hub.md recipe with DecodeImage, resumed in this process on the same order."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from PIL import Image

    name = new_repo(hub)
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(12):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(out, "JPEG")
        jpegs.append(out.getvalue())
    hub.commit(name, {f"train/cat/{i}.jpg": data for i, data in enumerate(jpegs)})
    images = pa.array([{"bytes": data, "path": f"{i}.jpg"} for i, data in enumerate(jpegs)],
                      pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"image": images, "label": list(range(12))}), buffer, row_group_size=4)
    hub.commit(name, {"default/train/0000.parquet": buffer.getvalue()}, branch="refs/convert/parquet")
    corpus = Shards.from_hub(name, storage_options=options(hub), cache_dir=str(tmp_path / "c"), progress=False)
    decode = shufflepoint.DecodeImage(16, field="image")
    loader = shufflepoint.DataLoader(corpus, batch_size=4, seed=1, transform=decode)
    batches = list(loader)
    assert [tuple(b["image"].shape) for b in batches] == [(4, 3, 16, 16)] * 3
    assert sorted(int(label) for b in batches for label in b["label"]) == list(range(12))
    first = shufflepoint.DataLoader(corpus, batch_size=4, seed=1, transform=decode)
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    resumed = shufflepoint.DataLoader(corpus, batch_size=4, seed=1, transform=decode)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(batches[1:], rest, strict=True))


def test_json_lines_shards_are_downloaded_whole_by_ranged_gets_and_checked(hub, tmp_path):
    """A format with no row count in the file (JSON lines) is fetched whole into the node cache, in ranged
    GETs that a 429 interrupts and a retry resumes; ``verify="checksum"`` hashes each file."""
    import json

    name = new_repo(hub)
    lines = {f"data/part-{n}.jsonl": "".join(json.dumps({"id": n * 100 + r, "text": "x" * 900}) + "\n"
                                             for r in range(n + 2)).encode() for n in range(5)}
    hub.commit(name, {"README.md": card("configs:\n- config_name: default\n  data_files: data/*.jsonl"), **lines})
    hub.fail_next(2, 429, only="/cdn/")
    with pytest.warns(UserWarning, match="downloads 5 shard"):  # the indexing scan, said as on any storage
        corpus = Shards.from_hub(name, storage_options=options(hub), cache_dir=str(tmp_path / "c"), progress=False,
                                 verify="checksum", prefetch=0)
    assert all_ids(corpus) == sorted(n * 100 + r for n in range(5) for r in range(n + 2)) and hub.injected == 2
    assert not [rng for _, path, rng in hub.log if path.startswith("/cdn/") and not rng]  # by range, always


def test_a_list_of_hub_files_is_looked_up_once_a_node_by_paths_info(hub, tmp_path):
    name = new_repo(hub)
    files, ids = parquet_files(tmp_path, 3)
    commit = hub.commit(name, files)
    urls = [f"hf://datasets/{name}/{path}" for path in sorted(files)]
    cache = str(tmp_path / "cache")
    corpus = Shards(urls, storage_options=options(hub), cache_dir=cache, progress=False)
    assert all_ids(corpus) == sorted(ids) and corpus.index.root == f"hf://datasets/{name}@{commit}/data"
    assert hub.requests("/paths-info/") == 3 and hub.requests("/tree/") == 0  # one lookup a file, no listing
    hub.reset()
    Shards(urls, storage_options=options(hub), cache_dir=cache, progress=False)
    assert hub.requests("/paths-info/") == 0  # kept for the node
    with pytest.raises(ShardError, match="not found: no such file at that commit"):
        Shards([*urls, f"hf://datasets/{name}/data/gone.parquet"], storage_options=options(hub), cache_dir=cache,
               progress=False)


DATASETS_CHECK = """
import json, sys
import datasets
import shufflepoint
found = {}
for name, config, split in json.loads(sys.argv[1]):
    builder = datasets.load_dataset_builder(name, config)
    theirs = sorted(str(url) for url in builder.config.data_files[split])
    ours = shufflepoint.Shards.from_hub(name, config, split, cache_dir=sys.argv[2], progress=False).index.urls()
    found[f"{name}/{config}/{split}"] = [theirs, sorted(ours)]
print(json.dumps(found))
"""

CARDS = {
    "marked": """
configs:
- config_name: all
  data_files:
  - split: train
    path: data/*/*
- config_name: sample
  default: true
  data_files:
  - split: train
    path: sample/*.parquet
  - split: test
    path: [held/00000.parquet, held/00001.parquet]
""",
    "patterns": """
configs:
- config_name: web
  data_files: ["data/a/*.parquet", "data/b/*.parquet"]
""",
}


def test_from_hub_takes_the_files_load_dataset_takes(hub, tmp_path):
    """datasets.load_dataset_builder, pointed at the stand-in by HF_ENDPOINT in a fresh process, resolves the
    same card to the same pinned files as Shards.from_hub, config by config and split by split."""
    import json
    import subprocess
    import sys

    pytest.importorskip("datasets")
    cases = []
    for kind, yaml in CARDS.items():
        name = new_repo(hub)
        a, _ = parquet_files(tmp_path, 3, prefix="data/a/")
        b, _ = parquet_files(tmp_path, 2, prefix="data/b/", seed=3)
        sample, _ = parquet_files(tmp_path, 2, prefix="sample/", seed=4)
        held, _ = parquet_files(tmp_path, 2, prefix="held/", seed=5)
        hub.commit(name, {"README.md": card(yaml), **a, **b, **sample, **held})
        cases += ([(name, None, "train"), (name, "all", "train"), (name, "sample", "test")] if kind == "marked"
                  else [(name, "web", "train")])
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_TOKEN": "",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets"), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", DATASETS_CHECK, json.dumps(cases), str(tmp_path / "c")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == 4
    for case, (theirs, ours) in found.items():
        assert theirs and ours == theirs, case

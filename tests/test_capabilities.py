"""Capabilities are declared (``_core/capabilities.py``) and asked for with ``isinstance``: which built-in
class offers which, and that no module probes a declared member by name instead."""

import ast
import inspect
import pathlib

import numpy as np
import pytest

import shufflepoint
from shufflepoint._core import capabilities
from shufflepoint._shards.readers import base as reader_capabilities

PACKAGE = pathlib.Path(shufflepoint.__file__).parent
DECLARED = {name for _, protocol in inspect.getmembers(capabilities, inspect.isclass)
            if getattr(protocol, "_is_protocol", False)
            for name in protocol.__dict__.get("__annotations__", {}) | {
                k: v for k, v in protocol.__dict__.items() if not k.startswith("_")}}


def test_every_capability_is_a_runtime_checkable_protocol():
    protocols = [cls for _, cls in inspect.getmembers(capabilities, inspect.isclass)
                 if cls.__module__ == capabilities.__name__]
    assert len(protocols) >= 15
    for protocol in protocols:
        assert getattr(protocol, "_is_protocol", False), protocol
        assert getattr(protocol, "_is_runtime_protocol", False), protocol
        assert protocol.__doc__, protocol


@pytest.fixture
def corpus(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for s in range(2):
        pq.write_table(pa.table({"input_ids": [[s, i, i + 1] for i in range(5)]}), tmp_path / f"{s}.parquet")
    return shufflepoint.Shards(str(tmp_path / "*.parquet"), progress=False)


def test_the_built_in_datasets_offer_what_they_declare(corpus):
    packed = shufflepoint.Packed(corpus, seq_len=4, tokens="input_ids", progress=False)
    mixture = shufflepoint.Mixture([(corpus, 1), (list(range(7)), 1)])
    offers = {
        "Shards": (corpus, {"ShardedCorpus", "KeepsShardsOpen", "FitsDecodeBudget", "Identified", "ExplainsFingerprint",
                            "LegacyIdentified", "ReadsBatches", "ReadsColumns", "ReadsIds", "ReadsIdsAscending",
                            "ReadsIdSpansAscending", "Prefetching", "PrefetchesDealt", "ReadsAtDensity", "ReadsAhead",
                            "Locatable"}),
        "Packed": (packed, {"OwnOrder", "CountsShare", "Identified", "ExplainsFingerprint", "ReadsBatches",
                            "ReadsColumns", "Prefetching", "PrefetchesDealt", "ReadsAtDensity", "Locatable"}),
        "Mixture": (mixture, {"OwnOrder", "Scheduled", "Identified", "ExplainsFingerprint", "LegacyIdentified",
                              "ExplainsOrderVersion", "ReadsBatches", "ReadsColumns", "Prefetching", "PrefetchesDealt",
                              "ReadsAtDensity", "Locatable"}),
    }
    dataset_protocols = ["OwnOrder", "CountsShare", "ShardedCorpus", "KeepsShardsOpen", "FitsDecodeBudget", "Scheduled",
                         "Identified",
                         "ExplainsFingerprint", "LegacyIdentified", "ExplainsOrderVersion", "ReadsBatches",
                         "ReadsColumns", "ReadsIds", "ReadsIdsAscending", "ReadsIdSpansAscending", "Prefetching",
                         "PrefetchesDealt", "ReadsAtDensity", "ReadsAhead", "Locatable"]
    for name, (dataset, expected) in offers.items():
        found = {p for p in dataset_protocols if isinstance(dataset, getattr(capabilities, p))}
        assert found == expected, (name, found ^ expected)
    for plain in (list(range(3)), np.arange(3)):
        assert not any(isinstance(plain, getattr(capabilities, p)) for p in dataset_protocols)


def test_video_clips_offer_an_identity_and_where_a_clip_lives(tmp_path):
    pytest.importorskip("av")
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from video_files import encode

    clips = shufflepoint.VideoClips([encode(str(tmp_path / "v.mp4"), 0, 6)], frames_per_clip=2,
                                    cache_dir=str(tmp_path / "cache"))
    found = {name for name, protocol in inspect.getmembers(capabilities, inspect.isclass)
             if protocol.__module__ == capabilities.__name__ and isinstance(clips, protocol)}
    assert found == {"Identified", "Locatable"}
    assert isinstance(clips, reader_capabilities.LocatesRows)  # a reader's LocatesRows has Locatable's shape


def test_a_user_dataset_with_its_own_order_is_read_in_it():
    """A dataset offers ``OwnOrder`` by its members alone: the loader reads its order, names it in the
    state, and refuses another one."""

    class Reversed:
        order_name, order_version = "reversed", 1

        def __len__(self):
            return 6

        def __getitem__(self, index):
            return index

        def epoch_order(self, seed, epoch, shuffle_block):
            class Order:
                def take(self, positions):
                    return 5 - np.asarray(positions)

            return Order()

    dataset = Reversed()
    assert isinstance(dataset, capabilities.OwnOrder)
    loader = shufflepoint.DataLoader(dataset, 2, collate_fn=list)
    assert [b for b in loader] == [[5, 4], [3, 2], [1, 0]]
    assert loader.state_dict()["order"] == "reversed"
    with pytest.raises(ValueError, match="order: found 'feistel'\\n  expected: 'reversed', the own order of a Rev"):
        shufflepoint.DataLoader(dataset, 2, order="feistel")


def _probes(path: pathlib.Path) -> list[str]:
    """``getattr(x, "name")`` and ``hasattr(x, "name")`` calls whose name a capability declares."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in DECLARED):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.args[1].value}")
    return found


def test_no_module_probes_a_declared_capability_by_name():
    assert {"epoch_order", "shard_rows", "prefetch", "read_batch", "columnar", "locate"} <= DECLARED
    probes = [probe for path in sorted(PACKAGE.rglob("*.py")) for probe in _probes(path)]
    # Mixture's identity reads each source's fingerprint or its 0.2 one by the attribute's name, passed in.
    assert not probes, probes


def test_the_probe_walker_sees_a_probe(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f(d):\n    return getattr(d, 'shard_rows', None)\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path
    try:
        assert _probes(source) == ["m.py:2 shard_rows"]
    finally:
        PACKAGE = saved


def test_the_0_2_fingerprint_is_computed_only_for_a_state_0_2_wrote(corpus, monkeypatch):
    """Construction, a state of today and its load never hash the whole index the 0.2 way (O(shards))."""
    asked = []
    monkeypatch.setattr(type(corpus), "_legacy_fingerprint", property(lambda self: asked.append(1) or "shards:x"))
    loader = shufflepoint.DataLoader(corpus, 2, seed=1)
    next(iter(loader))
    shufflepoint.DataLoader(corpus, 2, seed=1).load_state_dict(loader.state_dict())
    assert asked == []
    old = {k: v for k, v in loader.state_dict().items()
           if k in ("format", "kind", "seed", "epoch", "cursor", "n", "shuffle", "order", "order_version", "world_size",
                    "batch_size", "drop_last", "torch_version", "dataset_fingerprint")}
    old.update(version=1, dataset_fingerprint="shards:x:blocks=" + str(loader.state_dict()["shuffle_block"]))
    shufflepoint.DataLoader(corpus, 2, seed=1).load_state_dict(old)
    assert asked  # asked for the 0.2 state alone, which it then matches


def test_an_opened_parquet_shard_joins_the_layout_and_a_token_shard_does_not(corpus, tmp_path):
    assert isinstance(corpus._open(0), reader_capabilities.JoinsLayout)
    np.arange(64, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = shufflepoint.Shards(str(tmp_path / "t.bin"), seq_len=8, progress=False)
    assert not isinstance(tokens._open(0), reader_capabilities.JoinsLayout)


def test_token_readers_tile_their_shards_and_parquet_readers_do_not(corpus, tmp_path):
    """Read-ahead joins wide gaps only where every byte between two rows is a row a dense rank reads next."""
    np.arange(64, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = shufflepoint.Shards(str(tmp_path / "t.bin"), seq_len=8, progress=False)
    assert isinstance(tokens._reader, reader_capabilities.TilesShards) and tokens._reader.dense_gap() >= 1 << 20
    assert isinstance(corpus._reader, reader_capabilities.OpensRanged)
    assert not isinstance(corpus._reader, reader_capabilities.TilesShards)

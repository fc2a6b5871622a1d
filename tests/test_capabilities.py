"""Capabilities are declared (``_core/capabilities.py``) and asked for with ``isinstance``: which built-in
class offers which (itself, or through its hooks), that no capability is a private name but the entry to the
hooks, and that no module probes a declared member by name instead."""

import ast
import inspect
import pathlib

import numpy as np
import pytest

import shufflepoint
from shufflepoint._core import capabilities
from shufflepoint._shards.corpora.shards.shards import ShardsHooks
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


PUBLIC = ["OwnOrder", "Identified", "Locatable", "ReadsBatches", "Prefetching"]  # shufflepoint.<name>
ON_THE_DATASET = [*PUBLIC, "ShardedCorpus", "ReadsColumns", "PrefetchesDealt", "Hooked", "DecodesInBatches"]
ON_THE_HOOKS = ["CountsShare", "KeepsShardsOpen", "FitsDecodeBudget", "LaysOnStretches", "EarlierLaidVersion",
                "Scheduled", "LiveWeighted", "FixedOrder", "ExplainsFingerprint", "LegacyIdentified",
                "ExplainsOrderVersion", "ReadsIds", "ReadsIdsAscending", "ReadsIdSpansAscending", "ReadsAtDensity",
                "ReadsAhead"]


def _offered(dataset) -> tuple[set[str], set[str]]:
    """(what the dataset offers itself, what its hooks offer)."""
    hooks = capabilities.hooks_of(dataset)
    return ({p for p in ON_THE_DATASET if isinstance(dataset, getattr(capabilities, p))},
            {p for p in ON_THE_HOOKS if isinstance(hooks, getattr(capabilities, p))})


def test_every_capability_is_on_the_dataset_or_on_its_hooks():
    protocols = {name for name, cls in inspect.getmembers(capabilities, inspect.isclass)
                 if cls.__module__ == capabilities.__name__}
    assert protocols == set(ON_THE_DATASET) | set(ON_THE_HOOKS)
    assert set(PUBLIC) <= set(shufflepoint.__all__) and not (protocols - set(PUBLIC)) & set(shufflepoint.__all__)


def test_no_capability_declares_a_member_named_with_an_underscore_but_the_entry_to_the_hooks():
    declared = ast.parse(pathlib.Path(capabilities.__file__).read_text()).body
    private = {f"{protocol.name}.{member}" for protocol in declared
               if isinstance(protocol, ast.ClassDef)
               for item in protocol.body
               for member in ([item.name] if isinstance(item, ast.FunctionDef) else
                              [item.target.id] if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                              else [])
               if member.startswith("_") and not member.startswith("__")}
    assert private == {"Hooked._loader_hooks"}


def test_the_built_in_datasets_offer_what_they_declare(corpus):
    packed = shufflepoint.Packed(corpus, seq_len=4, tokens="input_ids", progress=False)
    mixture = shufflepoint.Mixture([(corpus, 1), (list(range(7)), 1)])
    scheduled = shufflepoint.Mixture([corpus, list(range(7))], schedule=[(0, [1, 1]), (6, [1, 0])])
    reading = {"ReadsBatches", "Prefetching", "Locatable", "ReadsColumns", "PrefetchesDealt", "Hooked"}
    offers = {
        "Shards": (corpus, {"Identified", "ShardedCorpus", "DecodesInBatches", *reading},
                   {"KeepsShardsOpen", "FitsDecodeBudget", "ExplainsFingerprint", "LegacyIdentified", "ReadsIds",
                    "ReadsIdsAscending", "ReadsIdSpansAscending", "ReadsAtDensity", "ReadsAhead"}),
        "Packed": (packed, {"OwnOrder", "Identified", *reading},
                   {"CountsShare", "LaysOnStretches", "ExplainsFingerprint", "ReadsAtDensity"}),
        "Mixture": (mixture, {"OwnOrder", "Identified", *reading},  # a loader reads its counts as a schedule
                    {"LaysOnStretches", "EarlierLaidVersion", "Scheduled", "LiveWeighted", "FixedOrder",
                     "ExplainsFingerprint", "LegacyIdentified", "ExplainsOrderVersion", "ReadsAtDensity"}),
        "scheduled Mixture": (scheduled, {"OwnOrder", "Identified", *reading},
                              {"LaysOnStretches", "EarlierLaidVersion", "Scheduled", "LiveWeighted",
                               "ExplainsFingerprint", "LegacyIdentified", "ExplainsOrderVersion", "ReadsAtDensity"}),
    }
    for name, (dataset, itself, hooks) in offers.items():
        assert _offered(dataset) == (itself, hooks), (name, _offered(dataset))
    for plain in (list(range(3)), np.arange(3)):
        assert _offered(plain) == (set(), set())


def test_an_own_order_has_one_signature_per_name():
    """``OwnOrder.epoch_order`` takes (seed, epoch, shuffle_block) alone; the orders under a deal's stretches or
    a schedule's grid are the hooks' ``stretched_order`` and ``scheduled_order``: no name means two things."""
    signatures: dict[str, set[tuple[str, ...]]] = {}
    for _, cls in inspect.getmembers(capabilities, inspect.isclass):
        if cls.__module__ == capabilities.__name__:
            for member, value in cls.__dict__.items():
                if callable(value) and not member.startswith("__"):
                    signatures.setdefault(member, set()).add(tuple(inspect.signature(value).parameters))
    assert {name: found for name, found in signatures.items() if len(found) > 1} == {}
    assert signatures["epoch_order"] == {("self", "seed", "epoch", "shuffle_block")}


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
    monkeypatch.setattr(ShardsHooks, "legacy_fingerprint", property(lambda self: asked.append(1) or "shards:x"))
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
    assert isinstance(corpus._access.open(0), reader_capabilities.JoinsArena)
    np.arange(64, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = shufflepoint.Shards(str(tmp_path / "t.bin"), seq_len=8, progress=False)
    assert not isinstance(tokens._access.open(0), reader_capabilities.JoinsArena)


def test_token_readers_tile_their_shards_and_parquet_readers_do_not(corpus, tmp_path):
    """Read-ahead joins wide gaps only where every byte between two rows is a row a dense rank reads next."""
    np.arange(64, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = shufflepoint.Shards(str(tmp_path / "t.bin"), seq_len=8, progress=False)
    reader = tokens._access.reader
    assert isinstance(reader, reader_capabilities.TilesShards) and reader.dense_gap() >= 1 << 20
    assert isinstance(corpus._access.reader, reader_capabilities.OpensRanged)
    assert not isinstance(corpus._access.reader, reader_capabilities.TilesShards)

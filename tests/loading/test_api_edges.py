"""The public surface's edges a newcomer meets (issue 35): properties say where the loader stands, methods
compute or move; which(step, locate=True) joins which and locate; a seek past an epoch's end is said."""

import inspect

import pytest

import shufflepoint

# Where the loader stands: O(1) reads, no argument, nothing moves.
PROPERTIES = {"epoch", "step", "cursor", "rank", "world_size", "seed", "deal", "excluded"}
# Questions that compute (some take arguments) and changes of position.
QUESTIONS = {"samples_left", "batches_left", "real_samples_left", "batches_this_epoch", "cursor_after", "which",
             "data_wait"}
CHANGES = {"seek", "set_epoch", "set_batch_size", "set_weights", "exclude", "load_state_dict", "state_dict"}


def test_properties_say_where_it_stands_and_methods_compute_or_move():
    ours = {name: value for cls in shufflepoint.DataLoader.__mro__[:1] for name, value in vars(cls).items()
            if not name.startswith("_")}
    properties = {name for name, value in ours.items() if isinstance(value, property)}
    methods = {name for name, value in ours.items() if inspect.isfunction(value)}
    assert properties == PROPERTIES
    assert methods == QUESTIONS | CHANGES


def test_which_with_locate_says_where_each_sample_lives(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for s in range(2):
        pq.write_table(pa.table({"x": list(range(s * 10, s * 10 + 10))}), tmp_path / f"{s}.parquet")
    corpus = shufflepoint.Shards(str(tmp_path / "*.parquet"), progress=False)
    loader = shufflepoint.DataLoader(corpus, 3, world_size=2, rank=0, seed=4)
    indices = loader.which(2)
    located = loader.which(2, locate=True)
    assert set(located) == {0, 1}
    for rank in (0, 1):
        assert [where["index"] for where in located[rank]] == indices[rank]
        assert all(where == corpus.locate(i) for where, i in zip(located[rank], indices[rank], strict=True))
        assert all(where["url"].endswith(".parquet") and "row_group" in where for where in located[rank])


def test_which_with_locate_on_a_plain_dataset_gives_the_index():
    loader = shufflepoint.DataLoader(list(range(10)), 2, seed=1)
    assert loader.which(1, locate=True) == {0: [{"index": i} for i in loader.which(1)[0]]}


def test_a_seek_past_the_epoch_s_end_is_said_and_places_the_loader_at_its_end():
    loader = shufflepoint.DataLoader(list(range(10)), 2, world_size=2, rank=0)  # 3 batches per rank
    loader.seek(0, 3)  # exactly the end: silent
    with pytest.warns(UserWarning, match=r"seek: batches=5 is past the end of epoch 0, which has 3 batches per rank"
                                         r"(.|\n)*fix: seek\(1, 2\)"):
        loader.seek(0, 5)
    assert (loader.epoch, loader.cursor, loader.batches_left()) == (0, 10, 0)
    assert list(loader) == []  # the rest of epoch 0
    assert loader.epoch == 1 and len(list(loader)) == 3


def test_set_epoch_of_the_current_epoch_keeps_the_position_and_seek_rewinds():
    """Documented on both: set_epoch(e) every epoch keeps a restored mid-epoch position; seek(e, 0) rewinds."""
    loader = shufflepoint.DataLoader(list(range(10)), 2)
    next(iter(loader))
    loader.set_epoch(0)
    assert loader.cursor == 2
    loader.seek(0, 0)
    assert loader.cursor == 0


def test_batches_this_epoch_is_none_only_where_the_history_cannot_tell():
    loader = shufflepoint.DataLoader(list(range(40)), 2, seed=3)
    it = iter(loader)
    next(it), next(it)
    assert loader.batches_this_epoch() == 2
    loader.exclude([1, 2])
    next(it)
    assert loader.batches_this_epoch() == 3

"""A Hub dataset by name, config and split, as ``datasets.load_dataset`` picks its files.

``Shards.from_hub("ORG/NAME", "CONFIG", "train")`` pins the revision to a commit, then takes the files
the way ``load_dataset`` does for a dataset of data files:

1. The dataset card's ``configs:`` block (the YAML at the top of ``README.md``, at that commit): the
   config asked (none asked: the one marked ``default: true``, else the one named ``default``, else the
   only one), and its ``data_files`` for the split, in each form the Hub documents (a pattern, a list of
   patterns, ``{split, path}`` entries). Files of a format shufflepoint reads (Parquet, JSON lines,
   Arrow IPC, WebDataset .tar) are read as they are.
2. Otherwise (no ``configs:`` block, or files shufflepoint does not read, e.g. CSV or a loading script),
   the Hub's own Parquet conversion of the dataset: the ``refs/convert/parquet`` revision, pinned to its
   commit, ``CONFIG/SPLIT/*.parquet``. A conversion the Hub stopped early (a ``partial-SPLIT`` folder: the
   first ~5 GB of a larger split) is read with a warning that says so.

Not followed: a loading script's own code, ``data_dir`` without ``data_files``, and ``load_dataset``'s
file-name conventions for a repository without a ``configs:`` block (its conversion is read instead:
the same rows, in shards of the converter's cut). The card is read through ``hf_hub_download`` (the
``HF_HUB_CACHE``): a node downloads it once per commit.

Words: docs/glossary.md (Hub dataset, pinned commit, Parquet conversion).
"""

from __future__ import annotations

from typing import Any

from shufflepoint._errors import HubError, Plain, ShardError, refusal, warn_user
from shufflepoint._shards.index.hub_listing import commit_of, hub_call, listing
from shufflepoint._shards.readers import infer_format
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.storage import Storage

CONVERSION = "refs/convert/parquet"
_READ_AS_IS = {"parquet", "jsonl", "arrow", "webdataset"}


def hub_sources(storage: Storage, name: str, config: str | None, split: str, revision: str | None,
                cache_dir: str) -> str | list[str]:
    """The pinned ``hf://`` glob(s) of ``name``'s ``config`` and ``split``, as ``load_dataset`` would read. The
    files they match are listed here into the node cache (``hub_listing``), where ``Shards`` finds them."""
    _check(name, config, split, revision)
    where = hub.HubPath("dataset", name, revision, "")
    pinned = where.at(commit_of(storage, where, cache_dir))
    configs = _card_configs(storage, pinned)
    patterns = _patterns(name, _chosen(name, configs, config), split) if configs else []
    if patterns:
        urls = [pinned.url(path=p) for p in patterns]
        sources = urls[0] if len(urls) == 1 else urls
        if _read_as_is(storage, sources, patterns, cache_dir):
            return sources
    return _conversion(storage, where, config, split, cache_dir)


def _check(name: str, config: str | None, split: str, revision: str | None) -> None:
    if not isinstance(name, str) or name.count("/") != 1 or name.startswith("/") or name.endswith("/"):
        raise ValueError(refusal("name", name, "a Hub dataset id 'ORG/NAME'", "pass it as load_dataset takes it, "
                                 "e.g. 'HuggingFaceFW/fineweb'"))
    for field, value in (("config", config), ("revision", revision)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(refusal(field, value, "a non-empty str or None", f"pass the {field} by name"))
    if not isinstance(split, str) or not split:
        raise ValueError(refusal("split", split, "a split's name (str)", "pass e.g. split='train'"))


def _read_as_is(storage: Storage, sources: str | list[str], patterns: list[str], cache_dir: str) -> bool:
    """Whether shufflepoint reads the files: by the patterns' suffixes, else by the files they match (listed
    into the node cache, where ``Shards`` finds the listing)."""
    formats = [_format(p) for p in patterns]
    if all(found in _READ_AS_IS for found in formats):
        return True
    if any(found is None and not p.endswith("*") for p, found in zip(patterns, formats, strict=True)):
        return False  # a suffix no reader takes (.csv, .py): the conversion
    return all(_format(url) in _READ_AS_IS for url in listing(storage, sources, cache_dir))


def _format(pattern: str) -> str | None:
    try:
        return infer_format(pattern)
    except ValueError:
        return None


def _card_configs(storage: Storage, pinned: hub.HubPath) -> list[dict[str, Any]]:
    """The ``configs:`` block of the dataset card at the pinned commit ([] without a card or block)."""
    huggingface_hub = hub.client()
    options = storage.storage_options

    def download() -> str | None:
        try:
            return str(huggingface_hub.hf_hub_download(pinned.repo_id, "README.md", repo_type="dataset",
                                                       revision=pinned.commit, token=options.get("token"),
                                                       endpoint=options.get("endpoint")))
        except huggingface_hub.errors.EntryNotFoundError:
            return None
        except Exception as error:
            raise hub.named(error, pinned, "reading its dataset card") from error

    path = hub_call(storage, pinned.url(path="README.md"), "reading the dataset card", download)
    if path is None:
        return []
    metadata = huggingface_hub.repocard.metadata_load(path) or {}
    configs = metadata.get("configs")
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def _chosen(name: str, configs: list[dict[str, Any]], config: str | None) -> dict[str, Any]:
    names = [str(c.get("config_name", "default")) for c in configs]
    if config is None:
        marked = [c for c in configs if c.get("default") is True]
        defaults = sorted({str(c.get("config_name", "default")) for c in marked} | ({"default"} & set(names)))
        if len(defaults) > 1:  # load_dataset refuses this card too
            raise HubError("config", refusal(f"Hub dataset {name}", Plain(f"several default configs: "
                                             f"{', '.join(defaults)}"), "one default config", "pass config=, "
                                             f"e.g. Shards.from_hub({name!r}, {defaults[0]!r})"))
        if marked:
            return marked[0]
        if "default" in names:
            return configs[names.index("default")]
        if len(configs) == 1:
            return configs[0]
        raise HubError("config", refusal(f"Hub dataset {name}", Plain(f"{len(names)} configs: {', '.join(names)}"),
                                         "a config's name (none is the default)", "pass config=, e.g. "
                                         f"Shards.from_hub({name!r}, {names[0]!r})"))
    if config not in names:
        raise HubError("config", refusal(f"Hub dataset {name}: config", config, f"one of {', '.join(names)}",
                                         "pass one of its configs"))
    return configs[names.index(config)]


def _patterns(name: str, chosen: dict[str, Any], split: str) -> list[str]:
    """The data-file patterns of ``split`` in a config (each form the Hub's YAML takes)."""
    data_files = chosen.get("data_files")
    splits: dict[str, list[str]] = {}
    if isinstance(data_files, str) or (isinstance(data_files, list) and all(isinstance(d, str)
                                                                             for d in data_files)):
        splits["train"] = [data_files] if isinstance(data_files, str) else list(data_files)
    elif isinstance(data_files, list):
        for entry in data_files:
            if isinstance(entry, dict) and "split" in entry and "path" in entry:
                path = entry["path"]
                splits[str(entry["split"])] = [path] if isinstance(path, str) else [str(p) for p in path]
    elif isinstance(data_files, dict):
        splits = {str(k): [v] if isinstance(v, str) else [str(p) for p in v] for k, v in data_files.items()}
    if not splits:
        return []  # no data_files (a data_dir, a script): the conversion is read
    if split not in splits:
        config = chosen.get("config_name", "default")
        raise HubError("split", refusal(f"Hub dataset {name}, config {config!r}: split", split,
                                        f"one of {', '.join(splits)}", "pass one of its splits"))
    return [p.lstrip("/") for p in splits[split]]


def _conversion(storage: Storage, where: hub.HubPath, config: str | None, split: str, cache_dir: str) -> str:
    """The glob of the Hub's Parquet conversion of ``config``/``split``, pinned to its commit."""
    converted = where.at(CONVERSION)
    try:
        commit = commit_of(storage, converted, cache_dir)
    except HubError as error:
        if error.reason != "revision":
            raise
        raise HubError("config", refusal(f"Hub dataset {where.repo_id}", Plain("no configs: block in its card and no "
                                         "Parquet conversion"), "data files shufflepoint reads, or the Hub's "
                                         f"{CONVERSION}", "pass its files to Shards('hf://datasets/...') "
                                         "yourself")) from None
    pinned = converted.at(commit)
    configs = _folders(storage, pinned, "")
    chosen = config if config is not None else ("default" if "default" in configs else
                                                configs[0] if len(configs) == 1 else None)
    if chosen is None or chosen not in configs:
        raise HubError("config", refusal(f"Hub dataset {where.repo_id}: config", config, f"one of {', '.join(configs)}",
                                         "pass config= (the Hub's Parquet conversion has these)"))
    splits = _folders(storage, pinned, chosen)
    if split not in splits and "partial-" + split in splits:
        warn_user(f"Hub dataset {where.repo_id}: the Hub's Parquet conversion of {chosen}/{split} is partial (the "
                  "converter stopped at its size limit): only its first rows are read. Read the original files "
                  "(a configs: block in its card) for all of them")
        split = "partial-" + split
    if split not in splits:
        raise HubError("split", refusal(f"Hub dataset {where.repo_id}, config {chosen!r}: split", split,
                                        f"one of {', '.join(s for s in splits if not s.startswith('partial-'))}",
                                        "pass one of its splits"))
    return pinned.url(path=f"{chosen}/{split}/*.parquet")


def _folders(storage: Storage, pinned: hub.HubPath, folder: str) -> list[str]:
    """The names of the folders in ``folder`` of a pinned revision (one tree listing)."""
    api = hub.api(storage.storage_options)

    def names() -> list[str]:
        try:
            found = api.list_repo_tree(pinned.repo_id, folder or None, repo_type=pinned.repo_type,
                                       revision=pinned.commit)
            return sorted(entry.path.rsplit("/", 1)[-1] for entry in found if not hasattr(entry, "blob_id"))
        except Exception as error:
            raise hub.named(error, pinned, "listing its Parquet conversion") from error

    try:
        return hub_call(storage, pinned.url(path=folder), "listing", names)
    except ShardError:
        return []  # no such folder

"""The Hugging Face Hub as a storage: ``hf://`` URLs pinned to a commit, read by byte range.

A branch moves; a commit does not. Every ``hf://`` source is *pinned* before anything is listed or
read: its revision (``@main`` when none is written, a tag, ``refs/convert/parquet``) is resolved to
the commit it points at, once, and the URL is rewritten to ``hf://datasets/ORG/NAME@<commit>/...``.
Every listing and every read after that names the commit, so a branch pushed to in the middle of a
run is never read: the run keeps reading the files of the commit it started on. The commit is in the
corpus index's root (``Shards(...).index.root``) and is logged by ``Shards.from_hub``; a revision
that is already a 40-hex commit is used as it is, with no request.

Reads go to the Hub's ``resolve`` endpoint through ``huggingface_hub``'s own HTTP session, headers
and settings (``HF_TOKEN`` or the saved token, ``HF_ENDPOINT``, its timeouts and proxies): one ranged
GET per range, following the Hub's redirect to its file store. Not through ``HfFileSystem.open``:
that looks the file up by listing its whole folder (one tree listing per process, per folder), which
a corpus of 25,000 files in one folder would pay in every DataLoader worker of every rank. The
listing is ``HfFileSystem``'s (``Storage.expand``), taken once per node (``index/hub_listing.py``).

Faults are the storage's (``faults.kind``): 429 and 5xx are retried with backoff by ``Storage``, then
named; the refusals a person must act on (no token for a gated or private dataset, a revision that
does not exist) are a ``HubError`` naming the dataset, what was asked, and the fix.

Words: docs/glossary.md (pinned commit, Hub dataset, byte range).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from shufflepoint._errors import HubError, Plain, ShardError, refusal
from shufflepoint._shards.storage.faults import changed

PROTOCOL = "hf://"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_PREFIXES = {"dataset": "datasets/", "model": "", "space": "spaces/"}
EXTRA = "pip install 'shufflepoint[hf]' (huggingface_hub)"


def is_hub(url: object) -> bool:
    return isinstance(url, str) and url.startswith(PROTOCOL)


def is_commit(revision: str | None) -> bool:
    return revision is not None and bool(_COMMIT.match(revision))


class HubPath(NamedTuple):
    """One ``hf://`` URL taken apart: repository type and id, revision (None: the default branch), path."""

    repo_type: str
    repo_id: str
    revision: str | None
    path: str

    @classmethod
    def of(cls, url: str) -> HubPath:
        utils = client().utils
        try:
            parsed = utils.parse_hf_uri(url)
        except ValueError as error:
            raise ValueError(refusal(f"sources {url!r}", Plain("not a Hub URL"), "hf://datasets/ORG/NAME[@REVISION]/"
                                     "PATH", "check the URL", why=str(error))) from None
        if parsed.type not in _PREFIXES:
            raise ValueError(refusal(f"sources {url!r}", Plain(f"a Hub {parsed.type}"), "a dataset, model or space "
                                     "repository", "use hf://datasets/ORG/NAME/PATH"))
        return cls(parsed.type, parsed.id, parsed.revision, parsed.path_in_repo)

    def url(self, revision: str | None = None, path: str | None = None) -> str:
        """The URL back, at ``revision`` (quoted: ``refs/convert/parquet`` has slashes) and ``path``."""
        chosen = self.revision if revision is None else revision
        at = "" if chosen is None else "@" + _hub_quote(chosen)
        tail = self.path if path is None else path
        return f"{PROTOCOL}{_PREFIXES[self.repo_type]}{self.repo_id}{at}" + (f"/{tail}" if tail else "")

    def at(self, revision: str) -> HubPath:
        """The same repository and path at another revision."""
        return HubPath(self.repo_type, self.repo_id, revision, self.path)

    @property
    def commit(self) -> str:
        """The commit this URL is pinned to (a ValueError for an unpinned one: a bug, never user input)."""
        if not is_commit(self.revision):
            raise ValueError(f"{self.url()} is not pinned to a commit")
        return str(self.revision)


def _hub_quote(revision: str) -> str:
    from urllib.parse import quote

    return quote(revision, safe="")


def client() -> Any:
    """The ``huggingface_hub`` module, imported on first use (the ``[hf]`` extra)."""
    try:
        import huggingface_hub
        import huggingface_hub.errors
        import huggingface_hub.repocard
        import huggingface_hub.utils
    except ImportError:
        raise ImportError(refusal("reading hf:// URLs", Plain("no huggingface_hub installed"),
                                  "huggingface_hub installed", EXTRA)) from None
    return huggingface_hub


def endpoint(options: dict[str, Any]) -> str:
    """The Hub the URLs name: ``storage_options["endpoint"]``, else ``HF_ENDPOINT`` (huggingface_hub's)."""
    found = options.get("endpoint")
    return str(found) if found else str(client().constants.ENDPOINT).rstrip("/")


def api(options: dict[str, Any]) -> Any:
    """An ``HfApi`` with the storage options' ``endpoint`` and ``token`` (else HF_ENDPOINT, HF_TOKEN...)."""
    return client().HfApi(endpoint=options.get("endpoint"), token=options.get("token"))


def named(error: BaseException, where: HubPath, what: str) -> BaseException:
    """A ``HubError`` for the refusals a person must act on; anything else as it is (retried or raised)."""
    errors = client().errors
    dataset = f"{where.repo_id} ({where.repo_type})"
    if isinstance(error, errors.GatedRepoError):
        return HubError("gated", refusal(f"Hub dataset {dataset}", Plain(f"gated: {what} was refused"),
                                         "a token of an account that accepted its conditions",
                                         "accept the conditions on the dataset's page, then set HF_TOKEN (or "
                                         "`hf auth login`, or storage_options={'token': ...})"))
    if isinstance(error, errors.RevisionNotFoundError):
        return HubError("revision", refusal(f"Hub dataset {dataset}", Plain(f"no revision {where.revision!r}"),
                                            "a branch, tag or commit of it", "check the revision (a commit a "
                                            "history rewrite removed is gone: resume on the current one)"))
    if isinstance(error, errors.RepositoryNotFoundError):
        return HubError("not_found", refusal(f"Hub dataset {dataset}", Plain(f"no such repository, or a private "
                                                                             f"one: {what} was refused"),
                                             "a public repository, or a token that may read it",
                                             "check the name; for a private dataset set HF_TOKEN (or `hf auth "
                                             "login`, or storage_options={'token': ...})"))
    return error


class HubFiles:
    """Reads of pinned ``hf://`` files by byte range, with the storage options' token and endpoint."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    def resolve_commit(self, where: HubPath) -> str:
        """The commit ``where.revision`` points at now (one API request): a HubError when it cannot."""
        if is_commit(where.revision):
            return str(where.revision)
        try:
            info = api(self.options).repo_info(where.repo_id, repo_type=where.repo_type, revision=where.revision)
        except Exception as error:
            raise named(error, where, "looking up its revision") from error
        return str(info.sha)

    def file_url(self, where: HubPath) -> str:
        hub = client()
        return str(hub.hf_hub_url(where.repo_id, where.path, repo_type=where.repo_type, revision=where.commit,
                                  endpoint=endpoint(self.options)))

    def read(self, url: str, start: int, end: int) -> tuple[int | None, bytes]:
        """Bytes [start, end) of a pinned file by one ranged GET, and the file's size the response reports."""
        hub = client()
        where = HubPath.of(url)
        headers = {**hub.utils.build_hf_headers(token=self.options.get("token")), "Range": f"bytes={start}-{end - 1}"}
        response = hub.utils.get_session().get(self.file_url(where), headers=headers, follow_redirects=True,
                                               timeout=hub.constants.HF_HUB_DOWNLOAD_TIMEOUT)
        try:
            hub.utils.hf_raise_for_status(response)
        except Exception as error:
            raise named(error, where, "reading a file") from error
        if response.status_code == 206:
            total = str(response.headers.get("Content-Range", "")).rpartition("/")[2]
            return (int(total) if total.isdigit() else None), response.content
        body = response.content  # a server that ignores Range sends it all
        return len(body), body[start:end]

    def info(self, url: str) -> tuple[int, str] | None:
        """(size, blob id) of one pinned file (one paths-info request), or None when there is none."""
        where = HubPath.of(url)
        try:
            found = api(self.options).get_paths_info(where.repo_id, [where.path], repo_type=where.repo_type,
                                                     revision=where.commit)
        except Exception as error:
            raise named(error, where, "looking up a file") from error
        files = [entry for entry in found if hasattr(entry, "blob_id")]
        return (int(files[0].size), str(files[0].blob_id)) if files else None


class HubStream:
    """A pinned file read front to back in ranged GETs (a whole-shard download): ``read``, ``seek``, ``size``."""

    def __init__(self, files: HubFiles, url: str, size: int) -> None:
        self._files, self._url, self.size, self._at = files, url, size, 0
        self.details: dict[str, Any] = {}

    def seek(self, at: int) -> int:
        self._at = at
        return at

    def read(self, length: int) -> bytes:
        end = min(self.size, self._at + length)
        if end <= self._at:
            return b""
        reported, data = self._files.read(self._url, self._at, end)
        if reported is not None and reported != self.size:  # the response's own size: another file
            raise ShardError(self._url, changed(reported, self.size))
        self._at += len(data)
        return data

    def __enter__(self) -> HubStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

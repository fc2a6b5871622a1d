"""A local stand-in of the Hugging Face Hub's HTTP API on 127.0.0.1, for tests without the internet.

Only what ``huggingface_hub`` (``HfApi``, ``HfFileSystem``, ``hf_hub_download``) and shufflepoint call,
as the Hub documents and answers them; the real client talks to it over HTTP (``HF_ENDPOINT`` or
``storage_options={"endpoint": hub.url}``), nothing is monkeypatched:

- ``GET /api/{type}s/{org}/{name}/revision/{rev}``: the repository at a revision (``sha``, ``siblings``);
- ``GET /api/{type}s/{org}/{name}/tree/{rev}[/{path}]?recursive=&expand=``: the tree listing, paginated
  by a ``cursor`` and a ``Link: <...>; rel="next"`` header (``page_size`` entries a page, 1,000 on the Hub);
- ``POST /api/{type}s/{org}/{name}/paths-info/{rev}`` (form: ``paths``, ``expand``);
- ``GET``/``HEAD /{type}s/{org}/{name}/resolve/{rev}/{path}``: a small file is answered directly, an LFS
  one (``.parquet``, or over 1 KiB) is a 302 to ``/cdn/<sha256>`` as the Hub redirects to its file store,
  with ``X-Repo-Commit``, ``X-Linked-Etag``, ``X-Linked-Size``, ``ETag``; ``Range`` is honoured (206);
- revisions are branches, tags, ``refs/convert/parquet`` (any ref name, URL-quoted) or commit shas;
- the errors with the Hub's ``X-Error-Code``: ``RepoNotFound`` (401, also a private repository without
  its token), ``GatedRepo`` (401 without a token, 403 with one that was not granted; metadata and
  tree stay public, as on the Hub), ``RevisionNotFound`` (404), ``EntryNotFound`` (404);
- faults: ``fail_next(n, status=429, only="resolve", throttle=None)`` answers the next n matching requests
  with that status (a 429 with ``Retry-After: 0``, or the ``throttle`` headers given).

Bytes are counted per bearer token, like the S3 stand-in counts per access key: a simulated node that
sends its own token (``storage_options={"token": "node-1"}``) is one counted node. Any token is accepted
for a public repository. ``commit(repo, files, delete=())`` pushes a commit to a branch (it moves);
``log`` keeps (method, path, Range) of every request.
"""

from __future__ import annotations

import collections
import hashlib
import http.server
import json
import re
import threading
import urllib.parse
from typing import Any

LFS_OVER = 1024


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    """One repository: commits (sha -> {path: bytes}), refs (name -> sha), who may read it."""

    def __init__(self, private: bool = False, gated: bool = False, granted: tuple[str, ...] = ()) -> None:
        self.commits: dict[str, dict[str, bytes]] = {}
        self.refs: dict[str, str] = {}
        self.private, self.gated, self.granted = private, gated, set(granted)


class HubServer:
    def __init__(self, page_size: int = 1000) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.page_size = page_size
        self.lock = threading.Lock()
        self.log: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=100_000)
        self.bytes: collections.Counter[str] = collections.Counter()  # body bytes of /cdn/ and resolve, per token
        self.blobs: dict[str, bytes] = {}  # sha256 -> bytes (the "file store" behind /cdn/)
        self.fail, self.fail_status, self.fail_only, self.injected = 0, 429, None, 0
        self.throttle: dict[str, str] = {"Retry-After": "0"}
        self._httpd: http.server.ThreadingHTTPServer | None = None

    # -- setup ---------------------------------------------------------------------------------
    def create(self, repo_id: str, repo_type: str = "dataset", **kwargs: Any) -> Repo:
        repo = self.repos[(repo_type, repo_id)] = Repo(**kwargs)
        return repo

    def commit(self, repo_id: str, files: dict[str, bytes], branch: str = "main", delete: tuple[str, ...] = (),
               repo_type: str = "dataset") -> str:
        """A new commit on ``branch`` (created when absent, from nothing): its parent's files, ``files``
        added or replaced, ``delete`` removed. Returns its sha; the branch now points at it."""
        with self.lock:
            repo = self.repos[(repo_type, repo_id)]
            parent = repo.commits.get(repo.refs.get(branch, ""), {})
            tree = {p: d for p, d in parent.items() if p not in delete}
            tree.update(files)
            sha = hashlib.sha1(json.dumps([branch, len(repo.commits), sorted((p, _blob_id(d)) for p, d in
                                                                               tree.items())]).encode()).hexdigest()
            repo.commits[sha] = tree
            repo.refs[branch] = sha
            for data in tree.values():
                self.blobs[hashlib.sha256(data).hexdigest()] = data
            return sha

    def fail_next(self, n: int, status: int = 429, only: str | None = None,
                  throttle: dict[str, str] | None = None) -> None:
        """The next ``n`` requests whose path contains ``only`` are answered ``status``; a 429 carries
        ``throttle`` as its headers (default ``Retry-After: 0``; the Hub sends ``RateLimit: "api";r=0;t=N``)."""
        with self.lock:
            self.fail, self.fail_status, self.fail_only = n, status, only
            self.throttle = dict(throttle) if throttle is not None else {"Retry-After": "0"}

    def reset(self) -> None:
        with self.lock:
            self.fail, self.fail_only, self.injected = 0, None, 0
            self.log.clear()
            self.bytes.clear()

    def requests(self, contains: str, method: str | None = None) -> int:
        with self.lock:
            return sum(1 for m, path, _ in self.log if contains in path and (method is None or m == method))

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> HubServer:
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def take_fault(self, path: str) -> bool:
        with self.lock:
            if self.fail <= 0 or (self.fail_only is not None and self.fail_only not in path):
                return False
            self.fail -= 1
            self.injected += 1
            return True


_API = re.compile(r"^/api/(datasets|models|spaces)/([^/]+/[^/]+)(?:/(revision|tree|paths-info)/([^/]+)(?:/(.*))?)?$")
_RESOLVE = re.compile(r"^/(datasets/|spaces/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_TYPES = {"datasets": "dataset", "models": "model", "spaces": "space", "datasets/": "dataset", "spaces/": "space",
          None: "model"}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    hub: HubServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- answers -------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if status == 429:
            headers.update(self.hub.throttle)
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[len("Bearer "):] if auth.startswith("Bearer ") else None

    # -- routing -------------------------------------------------------------------------------
    def _route(self) -> None:
        hub = self.hub
        with hub.lock:
            hub.log.append((self.command, self.path, self.headers.get("Range", "")))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if hub.take_fault(self.path):
            self._error(hub.fail_status, None, "injected by the test Hub")
            return
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith("/cdn/"):
            self._cdn(path[len("/cdn/"):])
            return
        api, resolve = _API.match(path), _RESOLVE.match(path)
        if api:
            kind, repo_id, action, rev, rest = api.groups()  # no revision: the repository at its default branch
            self._api(_TYPES[kind], repo_id, action or "revision", urllib.parse.unquote(rev or "main"),
                      urllib.parse.unquote(rest or ""), body)
        elif resolve:
            kind, repo_id, rev, rest = resolve.groups()
            self._resolve(_TYPES[kind], repo_id, urllib.parse.unquote(rev), urllib.parse.unquote(rest))
        else:
            self._error(404, None, f"no route {path}")

    do_GET = do_HEAD = do_POST = _route  # noqa: N815

    def _repo(self, repo_type: str, repo_id: str, content: bool) -> Repo | None:
        """The repository, or None after answering the Hub's refusal (``content``: file bytes are asked)."""
        repo = self.hub.repos.get((repo_type, repo_id))
        token = self._token()
        if repo is None or (repo.private and token not in repo.granted):
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if content and repo.gated and token not in repo.granted:
            self._error(401 if token is None else 403, "GatedRepo",
                        "Access to this dataset is restricted. You must have access to it and be authenticated.")
            return None
        return repo

    def _commit(self, repo: Repo, rev: str) -> str | None:
        sha = repo.refs.get(rev) or (rev if rev in repo.commits else None)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return sha

    def _entry(self, path: str, data: bytes | None) -> dict[str, Any]:
        if data is None:
            return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "path": path}
        entry: dict[str, Any] = {"type": "file", "oid": _blob_id(data), "size": len(data), "path": path}
        if _is_lfs(path, data):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _api(self, repo_type: str, repo_id: str, action: str, rev: str, rest: str, body: bytes) -> None:
        repo = self._repo(repo_type, repo_id, content=False)
        if repo is None:
            return
        sha = self._commit(repo, rev)
        if sha is None:
            return
        tree = repo.commits[sha]
        if action == "revision":
            self._json({"id": repo_id, "sha": sha, "private": repo.private, "gated": "auto" if repo.gated else False,
                        "siblings": [{"rfilename": p} for p in sorted(tree)], "tags": [], "downloads": 0,
                        "likes": 0, "lastModified": "2026-01-01T00:00:00.000Z"})
        elif action == "paths-info":
            asked = urllib.parse.parse_qs(body.decode()).get("paths", [])
            folders = _parents(tree)
            self._json([self._entry(p, tree.get(p)) for p in asked if p in tree or p in folders])
        else:
            self._tree(tree, rest.strip("/"))

    def _tree(self, tree: dict[str, bytes], folder: str) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        recursive = query.get("recursive", ["False"])[0].lower() == "true"
        prefix = folder + "/" if folder else ""
        names = sorted({p for p in _parents(tree) if p.startswith(prefix)} | {p for p in tree if p.startswith(prefix)})
        if not recursive:
            names = [p for p in names if "/" not in p[len(prefix):]]
        if folder and not names and folder not in tree:
            self._error(404, "EntryNotFound", f"{folder} does not exist")
            return
        start = int(query.get("cursor", ["0"])[0])
        page = names[start:start + self.hub.page_size]
        headers = {}
        if start + self.hub.page_size < len(names):
            parts = urllib.parse.urlsplit(self.path)
            kept = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "cursor"]
            nxt = parts.path + "?" + urllib.parse.urlencode(kept + [("cursor", str(start + self.hub.page_size))])
            headers["Link"] = f'<{self.hub.url}{nxt}>; rel="next"'
        self._json([self._entry(p, tree.get(p)) for p in page], headers)

    def _resolve(self, repo_type: str, repo_id: str, rev: str, path: str) -> None:
        repo = self._repo(repo_type, repo_id, content=True)
        if repo is None:
            return
        sha = self._commit(repo, rev)
        if sha is None:
            return
        data = repo.commits[sha].get(path)
        if data is None:
            self._error(404, "EntryNotFound", f"{path} does not exist at {sha}")
            return
        headers = {"X-Repo-Commit": sha, "ETag": f'"{_blob_id(data)}"'}
        if _is_lfs(path, data):
            digest = hashlib.sha256(data).hexdigest()
            headers.update({"X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(len(data)),
                            "Location": f"{self.hub.url}/cdn/{digest}?token={self._token() or ''}"})
            self._send(302, b"", headers)
            return
        self._bytes(data, headers, self._token())

    def _cdn(self, rest: str) -> None:
        digest, _, query = rest.partition("?")
        query = urllib.parse.urlsplit(self.path).query
        data = self.hub.blobs.get(digest)
        if data is None:
            self._error(404, None, "no such blob")
            return
        token = urllib.parse.parse_qs(query).get("token", [""])[0] or None
        self._bytes(data, {"ETag": f'"{digest}"'}, token)

    def _bytes(self, data: bytes, headers: dict[str, str], token: str | None) -> None:
        """``data``, or the part a ``Range: bytes=a-b`` asks (206), counted for ``token``."""
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", **headers}
        asked = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        status, body = 200, data
        if asked:
            first = int(asked.group(1))
            last = min(int(asked.group(2)) if asked.group(2) else len(data) - 1, len(data) - 1)
            if first >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            status, body = 206, data[first:last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        if self.command == "GET":
            with self.hub.lock:
                self.hub.bytes[token or "(anonymous)"] += len(body)
        self._send(status, body, headers)


def _is_lfs(path: str, data: bytes) -> bool:
    return path.endswith(".parquet") or len(data) > LFS_OVER


def _parents(tree: dict[str, bytes]) -> set[str]:
    """Every folder of the tree (``a``, ``a/b`` for ``a/b/c.parquet``)."""
    found = set()
    for path in tree:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            found.add("/".join(parts[:depth]))
    return found

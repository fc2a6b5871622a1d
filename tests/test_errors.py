"""Refusals in one shape, limits tagged where they live, no message nested in another.

Each refusal reads, one part a line (``_errors.py`` ``refusal``)::

    seed: found -1
      expected: an int in [0, 18446744073709551615]
      fix: pass seed in that range

Each refusal that is a documented limitation carries ``# LIMIT(tag): <file>.md#<anchor>`` at its
``raise``; the tag is unique and the anchor a heading of that file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import shufflepoint

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "shufflepoint"
TAG = re.compile(r"#\s*LIMIT\(([^)]*)\):\s*(\S+)")
NESTED = re.compile(r"\{(e|error|err|exc)(![rsa])?(:[^}]*)?\}")

# Raises that still quote another exception's text, left by issue 31: the CLI tools' one-line errors
# (exit code 2, docs/cli.md), whose format is their own, each quoting the failure of a user's import,
# file or dataset that it reports. The library says an underlying message as why=str(error) instead
# (see the shard test below). The list may only shrink.
STILL_NESTED = {
    "_tools/audit/exclusion.py", "_tools/audit/worker.py", "_tools/corpus_index.py",
    "_tools/inspect.py", "_tools/which.py", "_tools/which_checkpoint.py", "_tools/which_dataset.py",
}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)}


def _tags() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for line in path.read_text().splitlines():
            for tag, target in TAG.findall(line):
                found.append((tag, target, str(path.relative_to(SRC))))
    return found


def test_each_limit_tag_is_unique_and_points_at_a_heading_of_its_docs() -> None:
    tags = _tags()
    assert len(tags) >= 10, tags
    names = [tag for tag, _, _ in tags]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for tag, target, where in tags:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", tag), (tag, where)
        file, _, anchor = target.partition("#")
        page = ROOT / file
        assert page.is_file(), (tag, where, file)
        assert anchor in _anchors(page), (tag, where, anchor, sorted(_anchors(page)))


def test_the_slug_is_github_s() -> None:
    assert _slug(" Limits (what is not built)") == "limits-what-is-not-built"
    assert _slug("The `blocks` order") == "the-blocks-order"


def _nested_raises() -> dict[str, list[int]]:
    nested: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Raise) and node.exc is not None):
                continue
            for part in ast.walk(node.exc):
                if isinstance(part, ast.JoinedStr) and NESTED.search(ast.get_source_segment(text, part) or ""):
                    nested.setdefault(str(path.relative_to(SRC)), []).append(node.lineno)
                    break
    return nested


def test_no_raise_nests_another_exception_s_message() -> None:
    nested = _nested_raises()
    assert set(nested) <= STILL_NESTED, {k: v for k, v in nested.items() if k not in STILL_NESTED}
    assert not STILL_NESTED - set(nested), f"no longer nested, drop from STILL_NESTED: {STILL_NESTED - set(nested)}"


def _refusal(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    return str(info.value)


def _shapes():  # type: ignore[no-untyped-def]
    data = list(range(10))
    loader = shufflepoint.DataLoader(data, batch_size=2, seed=0)
    state = loader.state_dict()
    return {
        "seed": lambda: shufflepoint.DataLoader(data, batch_size=2, seed=-1),
        "state field 'seed'": lambda: shufflepoint.DataLoader(data, batch_size=2, seed=1).load_state_dict(state),
        "state field 'cursor'": lambda: loader.load_state_dict({**state, "cursor": 11}),
        "indices": lambda: loader.exclude([10]),
        "deal": lambda: shufflepoint.DataLoader(data, batch_size=2, deal="round-robin"),
        "sources": lambda: shufflepoint.Shards(["a.parquet", "a.parquet", 3]),
        "order": lambda: shufflepoint.DataLoader(data, batch_size=2, order="sorted"),
    }


@pytest.mark.parametrize("subject", list(_shapes()))
def test_a_refusal_reads_found_expected_why_fix_one_a_line(subject: str) -> None:
    message = _refusal(_shapes()[subject])
    lines = message.splitlines()
    assert lines[0].startswith(f"{subject}: found "), message
    assert lines[1].startswith("  expected: "), message
    assert lines[-1].startswith("  fix: "), message
    assert all(line.startswith("  why: ") for line in lines[2:-1]), message
    assert 3 <= len(lines) <= 6, message
    assert max(map(len, lines)) <= 160, message


def test_found_is_cut_at_80_characters() -> None:
    from shufflepoint._errors import Plain, refusal

    first = refusal("indices", list(range(100)), "ints", "pass ints").splitlines()[0]
    assert first.endswith("...") and len(first) == len("indices: found ") + 80
    assert refusal("segments", Plain("3 segments"), "x", "y").startswith("segments: found 3 segments\n")


def test_a_shard_a_library_cannot_read_quotes_the_library_only_in_why(tmp_path) -> None:
    """The one case that needs an underlying exception's text: a reader's library (gzip, pyarrow, numpy,
    tarfile) saying why it could not read a shard. It is passed as ``why=str(error)``, the library's own
    message on its own line, never interpolated into a sentence of ours (``errors.shard_error``)."""
    from shufflepoint._shards.readers import make_reader

    path = tmp_path / "broken.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"not gzip at all" * 8)
    with pytest.raises(shufflepoint.ShardError) as info:
        make_reader("jsonl").open(str(path), str(path))
    lines = str(info.value).splitlines()
    assert lines[0] == f"shard {path}: found corrupt gzip data", lines
    assert lines[1] == "  expected: a gzip stream" and lines[2].startswith("  why: ") and len(lines[2]) > 7
    assert lines[3].startswith("  fix: replace the shard") and len(lines) == 4

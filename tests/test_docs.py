"""The README and docs/ stay true to the tree: links resolve, shown examples equal the files, the README stays short.

The rules, for README.md, CHANGELOG.md and every docs/*.md (a "page"):

- **Links.** Every markdown link or image outside code, ``[text](target)`` or ``![alt](target)``,
  whose target is relative must name an existing file or folder inside the repository, relative to
  the page that contains it (so docs/ pages write ``../examples/dcp.py``). Targets starting with
  ``http://``, ``https://`` or ``mailto:`` and pure ``#anchor`` targets are skipped; a ``#fragment``
  is stripped before the check.
- **Examples.** A fenced code block whose opening fence line comes *immediately* after the line
  ``<!-- example: examples/NAME.py -->`` (the path is from the repository root, and must be under
  examples/) shows that file. The block must be a verbatim contiguous excerpt of the file: its
  lines, in order, must equal a run of consecutive lines of the file (the whole file is such a
  run). Only trailing whitespace and the indentation common to all the lines (as
  ``textwrap.dedent`` removes it, from the block and from the run alike) are ignored; nothing may be
  elided or edited, and the relative indentation must be the file's. Every
  ```python block must carry either that marker, or ``<!-- sketch -->``, which declares a fragment
  that is not copied from an example, so that an edited copy of an example cannot go unmarked, or
  ``<!-- runs: tests/NAME.py -->``: a whole program that test runs (it must name the page).
  README.md must carry at least one example marker.
- **Size.** README.md is at most 15 KB (15,360 bytes).
- **The API table.** README.md's ``## API`` section names, inside code, every name of
  ``shufflepoint.__all__``, every public method and property ``DataLoader`` and ``ResumableSampler`` define,
  every argument of their constructors and of ``Packed``'s and ``Mixture``'s, and the dataset methods a user
  calls (``USER_METHODS``). ``Shards``' arguments are each named in docs/shards.md.
- **Named paths.** Every inline-code path that starts with ``src/``, ``tests/``, ``examples/``,
  ``benchmarks/`` or ``docs/`` (repository-relative, as code spans are) must exist; a ``*`` is a
  glob that must match something, and ``path::name`` also needs ``def name`` in that file. A path
  in the text of a link to http(s):// names another project's file and is skipped.
"""

from __future__ import annotations

import inspect
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 18 * 1024
CHANGELOG = ROOT / "CHANGELOG.md"
PAGES = [README, CHANGELOG, *sorted((ROOT / "docs").glob("*.md"))]

EXAMPLE_MARKER = re.compile(r"^<!-- example: (?P<path>\S+) -->$")
SKETCH_MARKER = "<!-- sketch -->"
RUNS_MARKER = re.compile(r"^<!-- runs: (?P<path>tests/\S+\.py) -->$")
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target><[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(?P<code>.+?)\1")
NAMED_PATH = re.compile(r"^(?:src|tests|examples|benchmarks|docs)/[\w./*\-]*(?:::[\w…]+)?$")
SKIPPED_SCHEMES = ("http://", "https://", "mailto:")
WEB_LINK = re.compile(r"\[[^\]]*\]\(https?://[^)]*\)")


def _ids(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def code_blocks(text: str) -> list[tuple[int, str, str, list[str]]]:
    """(line number of the opening fence, info string, the line before it, the block's lines) for
    every fenced code block."""
    lines = text.splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence = opening["fence"]
        end = index + 1
        while end < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        previous = lines[index - 1] if index > 0 else ""
        blocks.append((index + 1, opening["info"].strip(), previous, lines[index + 1:end]))
        index = end + 1
    return blocks


def _without_code_blocks(text: str) -> list[str]:
    """The page's lines with every fenced block (fences included) blanked out, line numbers kept."""
    lines = text.splitlines()
    for start, _, _, body in code_blocks(text):
        for number in range(start - 1, min(start + len(body) + 1, len(lines))):
            lines[number] = ""
    return lines


def prose(text: str) -> str:
    """The page without its fenced blocks and its inline code: where links are."""
    return "\n".join(INLINE_CODE.sub("", line) for line in _without_code_blocks(text))


def broken_links(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    problems = []
    for number, line in enumerate(prose(page.read_text()).splitlines(), start=1):
        for match in LINK.finditer(line):
            target = match["target"].strip("<>")
            if not target or target.startswith(SKIPPED_SCHEMES) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            resolved = (page.parent / path).resolve()
            if not resolved.is_relative_to(root.resolve()):
                problems.append(f"{page.name}:{number}: {target} points outside the repository")
            elif not resolved.exists():
                problems.append(f"{page.name}:{number}: {target} does not exist (relative to {page.parent})")
    return problems


def _dedented(lines: list[str]) -> list[str]:
    return textwrap.dedent("\n".join(line.rstrip() for line in lines)).split("\n")


def _is_excerpt(block: list[str], source: list[str]) -> bool:
    """Whether ``block`` equals some run of consecutive lines of ``source``, both dedented."""
    size = len(block)
    return size > 0 and any(_dedented(source[i:i + size]) == _dedented(block) for i in range(len(source) - size + 1))


def example_problems(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Every marked block that is not a verbatim excerpt of its file, every python block that
    carries no marker, and every marker that is not followed by a fence."""
    text = page.read_text()
    problems = []
    fenced_after = {start - 1 for start, _, _, _ in code_blocks(text)}  # line numbers of the markers' lines
    for number, line in enumerate(text.splitlines(), start=1):
        if (EXAMPLE_MARKER.match(line) or line == SKETCH_MARKER or RUNS_MARKER.match(line)) and \
                number not in fenced_after:
            problems.append(f"{page.name}:{number}: marker {line!r} is not followed by a code fence")
    for start, info, previous, body in code_blocks(text):
        marker, runs = EXAMPLE_MARKER.match(previous), RUNS_MARKER.match(previous)
        if runs is not None:
            test = root / runs["path"]
            if not test.is_file() or page.name not in test.read_text():
                problems.append(f"{page.name}:{start}: {runs['path']} does not exist or does not name {page.name}")
            continue
        if marker is None:
            if info.split()[:1] == ["python"] and previous != SKETCH_MARKER:
                problems.append(f"{page.name}:{start}: python block without <!-- example: ... --> "
                                f"or {SKETCH_MARKER} on the line before it")
            continue
        source = (root / marker["path"]).resolve()
        if not source.is_relative_to((root / "examples").resolve()) or not source.is_file():
            problems.append(f"{page.name}:{start}: {marker['path']} is not a file under examples/")
        elif not _is_excerpt(body, source.read_text().splitlines()):
            problems.append(f"{page.name}:{start}: the block is not a verbatim contiguous excerpt of "
                            f"{marker['path']} (copy it again from the file)")
    return problems


def example_markers(page: pathlib.Path) -> list[str]:
    return [m["path"] for line in page.read_text().splitlines() if (m := EXAMPLE_MARKER.match(line))]


def missing_named_paths(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    problems = []
    text = "\n".join(_without_code_blocks(page.read_text()))  # code blocks show commands and output
    text = WEB_LINK.sub("", text)  # a path that links to the web names another project's file
    for match in INLINE_CODE.finditer(text):
        code = match["code"].strip()
        if not NAMED_PATH.match(code):
            continue
        path, _, name = code.partition("::")
        found = sorted(root.glob(path)) if "*" in path else [root / path] if (root / path).exists() else []
        if not found:
            problems.append(f"{page.name}: `{code}` names a path that does not exist")
        elif name and not name.endswith("…") and not re.search(rf"^\s*def {name}\b", found[0].read_text(), re.M):
            problems.append(f"{page.name}: `{code}`: no `def {name}` in {path}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_relative_links_resolve(page: pathlib.Path) -> None:
    assert not broken_links(page), "\n".join(broken_links(page))


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_shown_examples_equal_the_files(page: pathlib.Path) -> None:
    problems = example_problems(page)
    assert not problems, "\n".join(problems)


def test_the_readme_shows_at_least_one_checked_example() -> None:
    assert example_markers(README), "README.md has no <!-- example: examples/... --> marker"


def test_the_scripts_shown_in_full_are_checked() -> None:
    """docs/accelerate.md shows these two scripts whole; they must stay marked, not become sketches."""
    shown = {path for page in PAGES for path in example_markers(page)}
    assert {"examples/accelerate_patched.py", "examples/accelerate_native.py"} <= shown, shown


def test_the_readme_is_at_most_15_kb() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; at most {README_MAX_BYTES}: move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_named_paths_exist(page: pathlib.Path) -> None:
    problems = missing_named_paths(page)
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    docs = sorted((ROOT / "docs").glob("*.md"))
    linked = {(ROOT / m["target"].split("#", 1)[0]).resolve() for m in LINK.finditer(prose(README.read_text()))}
    assert docs, "docs/*.md not found"
    assert not [p.name for p in docs if p.resolve() not in linked], "docs pages the README does not link"


# Dataset methods a user calls (the others serve the loader).
USER_METHODS = {"Shards": ["locate", "columnar"], "Packed": ["locate", "columnar", "varlen_collate", "flatten_collate"],
                "Mixture": ["locate", "columnar"]}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def section(text: str, heading: str) -> str:
    """The lines under ``## heading`` up to the next ``## `` heading."""
    found = re.search(rf"^## {re.escape(heading)}\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    return found["body"] if found else ""


def names_in_code(text: str) -> set[str]:
    """Every identifier inside inline code (``loader.exclude(indices)`` gives loader, exclude, indices)."""
    return {name for match in INLINE_CODE.finditer(text) for name in IDENTIFIER.findall(match["code"])}


def _own_public_members(cls: type) -> set[str]:
    """Public methods and properties defined by shufflepoint's classes in ``cls``'s MRO (not torch's)."""
    return {name for klass in cls.__mro__ if klass.__module__.startswith("shufflepoint")
            for name in vars(klass) if not name.startswith("_")}


def _arguments(cls: type) -> set[str]:
    parameters = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    return {p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_KEYWORD}


def public_api() -> dict[str, set[str]]:
    """What the README's API table must name, by where it comes from."""
    import shufflepoint

    loader, sampler = shufflepoint.DataLoader, shufflepoint.ResumableSampler
    return {
        "shufflepoint.__all__": set(shufflepoint.__all__),
        "DataLoader": _own_public_members(loader) | _arguments(loader),
        "ResumableSampler": _own_public_members(sampler) | _arguments(sampler),
        "Packed": _arguments(shufflepoint.Packed) | set(USER_METHODS["Packed"]),
        "Mixture": _arguments(shufflepoint.Mixture) | set(USER_METHODS["Mixture"]),
        "Shards": set(USER_METHODS["Shards"]),
        "VideoClips": _arguments(shufflepoint.VideoClips),
    }


def missing_from_table(table: str, required: dict[str, set[str]]) -> list[str]:
    named = names_in_code(table)
    return [f"{where}: {sorted(names - named)}" for where, names in required.items() if names - named]


def test_the_readme_api_table_names_every_public_name_and_method() -> None:
    missing = missing_from_table(section(README.read_text(), "API"), public_api())
    assert not missing, "README.md's API table does not name (in code):\n" + "\n".join(missing)


def test_every_shards_argument_is_named_in_its_docs() -> None:
    import shufflepoint

    missing = sorted(_arguments(shufflepoint.Shards) - names_in_code((ROOT / "docs" / "shards.md").read_text()))
    assert not missing, f"docs/shards.md does not name Shards' arguments {missing}"


# The checks themselves catch what they are for.

@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "demo.py").write_text("import os\n\nprint(os.getcwd())\nprint('done')\n")
    (tmp_path / "docs").mkdir()
    return tmp_path


def test_a_broken_link_is_found(tree: pathlib.Path) -> None:
    page = tree / "docs" / "page.md"
    page.write_text("[ok](../examples/demo.py#top) [web](https://x.org/a) [here](#a) ![img](missing.png)\n"
                    "`[not a link](nowhere)`\n```\n[in code](nowhere)\n```\n[out](../../../etc/passwd)\n")
    problems = broken_links(page, tree)
    assert len(problems) == 2, problems
    assert "missing.png does not exist" in problems[0] and "outside the repository" in problems[1]


def test_an_edited_or_unmarked_example_is_found(tree: pathlib.Path) -> None:
    page = tree / "page.md"
    page.write_text("<!-- example: examples/demo.py -->\n```python\nprint(os.getcwd())\nprint('done')\n```\n"
                    "<!-- example: examples/demo.py -->\n```python\nimport os\nprint('done')\n```\n"
                    "```python\nprint('unmarked')\n```\n<!-- sketch -->\n```python\nx = 1\n```\n"
                    "<!-- example: examples/none.py -->\n```python\nx = 1\n```\n"
                    "<!-- example: examples/demo.py -->\n\n```python\nimport os\n```\n")
    problems = example_problems(page, tree)
    assert len(problems) == 5, problems
    assert "not followed by a code fence" in problems[0]
    assert "not a verbatim contiguous excerpt" in problems[1]  # a line elided
    assert "python block without" in problems[2]  # the unmarked block
    assert "not a file under examples/" in problems[3]
    assert "python block without" in problems[4]  # a blank line between the marker and the fence


def test_an_excerpt_may_be_dedented_but_not_reindented(tree: pathlib.Path) -> None:
    (tree / "examples" / "nested.py").write_text("def main():\n    if True:\n        print(1)\n    print(2)\n")
    page = tree / "page.md"
    page.write_text("<!-- example: examples/nested.py -->\n```python\nif True:\n    print(1)\n```\n"
                    "<!-- example: examples/nested.py -->\n```python\nif True:\nprint(1)\n```\n")
    problems = example_problems(page, tree)
    assert len(problems) == 1 and ":7:" in problems[0], problems


def test_a_missing_named_path_is_found(tree: pathlib.Path) -> None:
    page = tree / "page.md"
    page.write_text("`examples/demo.py` `examples/*.py` `examples/gone.py` `tests/x_*.py` `examples/demo.py::main`"
                    " `not/a/path.py` [`tests/elsewhere.py`](https://example.org/tests/elsewhere.py)\n")
    problems = missing_named_paths(page, tree)
    assert len(problems) == 3, problems


def test_a_name_missing_from_the_api_table_is_found() -> None:
    table = "| `loader.exclude(indices)`, `excluded` | ... |\n| `shufflepoint.Packed(dataset, seq_len)` | x |\n"
    assert section("## API\n" + table + "## Next\n`step`\n", "API") == table
    required = {"DataLoader": {"exclude", "excluded", "step"}, "Packed": {"Packed", "seq_len", "bos"}}
    assert missing_from_table(table, required) == ["DataLoader: ['step']", "Packed: ['bos']"]

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
- **Size.** README.md is at most 19 KB (19,456 bytes): the detail lives in docs/ and on the site; 0.6 added
  the guarantees of runs that change while they train.
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

import ast
import inspect
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 19 * 1024
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


# The glossary (docs/glossary.md): every word a module's docstring names has an entry, and every code
# name and state field the glossary gives exists, so a rename that forgets the glossary fails here.

GLOSSARY = ROOT / "docs" / "glossary.md"
SOURCE = ROOT / "src"
WORDS_LINE = re.compile(r"Words: `{0,2}docs/glossary\.md`{0,2} \((?P<words>[^)]*)\)")
WORD_HEADING = re.compile(r"^### (?P<word>.+?)\s*$", re.M)
CODE_NAME = re.compile(r"^shufflepoint(?:\.\w+)+$")
STATE_NAMES = re.compile(r"\*state\*(?P<names>(?:\s*`\w+`,?)+)")


def glossary_words(text: str) -> list[str]:
    """The words the glossary has an entry for: its ``### word`` headings, lower-cased."""
    return [m["word"].lower() for m in WORD_HEADING.finditer(text)]


def words_lines(source: pathlib.Path = SOURCE) -> dict[str, list[str]]:
    """Module (relative to ``source``) -> the words its docstring's ``Words: docs/glossary.md (...)`` lines name."""
    found: dict[str, list[str]] = {}
    for path in sorted(source.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        words = [w.strip().lower() for m in WORDS_LINE.finditer(doc) for w in m["words"].split(",") if w.strip()]
        if words:
            found[str(path.relative_to(source))] = words
    return found


def words_without_entry(glossary: str, source: pathlib.Path = SOURCE) -> list[str]:
    entries = set(glossary_words(glossary))
    return [f"{module}: {word!r}" for module, words in words_lines(source).items() for word in words
            if word not in entries]


def glossary_code_names(text: str) -> list[str]:
    """Every inline code of the glossary (outside code blocks) that is a dotted ``shufflepoint...`` name."""
    return [m["code"].strip() for line in _without_code_blocks(text) for m in INLINE_CODE.finditer(line)
            if CODE_NAME.match(m["code"].strip())]


def glossary_state_fields(text: str) -> list[str]:
    return [name for m in STATE_NAMES.finditer(text) for name in re.findall(r"`(\w+)`", m["names"])]


def _module_file(parts: list[str], source: pathlib.Path) -> pathlib.Path | None:
    base = source.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment binds, tuples unpacked (``a, b = ...``); nothing for any other statement."""
    found = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t for target in found for t in (target.elts if isinstance(target, ast.Tuple) else [target])]


def _defined(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The statement of ``body`` (a module's or a class's, ``if``/``try`` blocks included) that binds ``name``."""
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
        for target in _targets(node):
            if isinstance(target, ast.Name) and target.id == name:
                return node
            if isinstance(target, ast.Name) and target.id == "__slots__" and isinstance(node, ast.Assign) \
                    and name in [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]:
                return node
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return node
        if isinstance(node, (ast.If, ast.Try)):
            inner = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            found = _defined(inner, name)
            if found is not None:
                return found
    return None


def _resolve_in_module(module: list[str], name: str, source: pathlib.Path,
                       depth: int = 0) -> tuple[list[str], ast.AST] | None:
    """(module, statement) binding ``name`` in ``module``, through ``from shufflepoint... import`` re-exports."""
    path = _module_file(module, source)
    if path is None or depth > 8:
        return None
    if _module_file([*module, name], source) is not None:  # a submodule
        return [*module, name], ast.Module(body=[], type_ignores=[])
    node = _defined(ast.parse(path.read_text()).body, name)
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "shufflepoint":
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        return _resolve_in_module(node.module.split("."), alias.name, source, depth + 1)
    return None if node is None else (module, node)


def _has_member(module: list[str], cls: ast.ClassDef, name: str, source: pathlib.Path,
                depth: int = 0) -> ast.AST | None:
    """The statement that binds ``name`` on ``cls``: in its body, as ``self.name`` in a method, or in a base
    class of shufflepoint's own."""
    found = _defined(cls.body, name)
    if found is not None:
        return found
    for method in cls.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(method):
                for t in _targets(node):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                            and t.attr == name:
                        return node
    for base in cls.bases:
        if isinstance(base, ast.Name) and depth < 8:
            where = _resolve_in_module(module, base.id, source)
            if where is not None and isinstance(where[1], ast.ClassDef):
                found = _has_member(where[0], where[1], name, source, depth + 1)
                if found is not None:
                    return found
    return None


def resolves(dotted: str, source: pathlib.Path = SOURCE) -> bool:
    """Whether ``dotted`` (``shufflepoint.module.Symbol.member``) names a module, a module-level name or a
    class member that exists in the source, read with ``ast`` (no import: integrations need their frameworks)."""
    parts = dotted.split(".")
    cut = next((k for k in range(len(parts), 0, -1) if _module_file(parts[:k], source)), 0)
    if not cut:
        return False
    module, rest = parts[:cut], parts[cut:]
    if not rest:
        return True
    where = _resolve_in_module(module, rest[0], source)
    if where is None:
        return False
    module, node = where
    for name in rest[1:]:
        if not isinstance(node, ast.ClassDef):
            return False
        found = _has_member(module, node, name, source)
        if found is None:
            return False
        node = found
    return True


def test_every_word_a_module_names_has_a_glossary_entry() -> None:
    missing = words_without_entry(GLOSSARY.read_text())
    assert words_lines(), "no module docstring names its words (Words: docs/glossary.md (...))"
    assert not missing, "words without an entry (### word) in docs/glossary.md:\n" + "\n".join(missing)


def test_every_glossary_word_has_one_entry() -> None:
    words = glossary_words(GLOSSARY.read_text())
    assert len(words) > 50 and not sorted({w for w in words if words.count(w) > 1}), words


def test_every_code_name_in_the_glossary_exists() -> None:
    names = glossary_code_names(GLOSSARY.read_text())
    assert len(names) > 50, names
    missing = sorted({name for name in names if not resolves(name)})
    assert not missing, f"docs/glossary.md names code that does not exist (renamed? update the glossary): {missing}"


def test_every_state_field_in_the_glossary_exists() -> None:
    import shufflepoint

    fields = glossary_state_fields(GLOSSARY.read_text())
    assert fields, "the glossary names no state field (*state* `name`)"
    assert not sorted(set(fields) - set(shufflepoint.STATE_FIELDS))


def test_the_glossary_checks_catch_a_rename(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "shufflepoint"
    (package / "_core").mkdir(parents=True)
    (package / "__init__.py").write_text('"""Words: docs/glossary.md (cut, leg)."""\n'
                                         "from shufflepoint._core.plan import Layout as Shape\n")
    (package / "_core" / "__init__.py").write_text("")
    (package / "_core" / "plan.py").write_text(
        '"""Plan.\n\nWords: ``docs/glossary.md`` (layout, Cut)."""\n'
        "from dataclasses import dataclass\n\nSTRIDED, SPANS = 'strided', 'spans'\n\n\nclass _Base:\n"
        "    def after(self): ...\n\n\n@dataclass\nclass Layout(_Base):\n    n: int\n    __slots__ = ('kept',)\n\n"
        "    def __init__(self):\n        self.world_size: int = 1\n")
    glossary = "### Cut\n### layout\n"
    assert words_without_entry(glossary, tmp_path) == ["shufflepoint/__init__.py: 'leg'"]
    found = [name for name in ("shufflepoint", "shufflepoint._core.plan", "shufflepoint._core.plan.Layout",
                               "shufflepoint._core.plan.Layout.n", "shufflepoint._core.plan.Layout.world_size",
                               "shufflepoint._core.plan.Layout.kept", "shufflepoint._core.plan.Layout.after",
                               "shufflepoint._core.plan.SPANS", "shufflepoint.Shape.n", "shufflepoint._core")
             if resolves(name, tmp_path)]
    assert len(found) == 10, found
    assert not [name for name in ("shufflepoint._core.plan.Plan", "shufflepoint._core.plan.Layout.batch_size",
                                  "shufflepoint._core.cut", "shufflepoint._core.plan.STRIDED.x", "shufflepoint.Layout",
                                  "shufflepoint.Shape.m", "shufflepoint._core.plan.Layout.n.m")
                if resolves(name, tmp_path)]
    text = "x `shufflepoint._core.plan.Layout` `plan.Layout` `shufflepoint.x()`\n```\n`shufflepoint.y`\n```\n"
    assert glossary_code_names(text) == ["shufflepoint._core.plan.Layout"]
    assert glossary_state_fields("*code* `a.b` · *state* `cursor`, `segments` · *in* `x`") == ["cursor", "segments"]

"""The documentation site's hooks (mkdocs.yml ``hooks:``): the repository's pages as one site, checked.

The pages are written to be read on the repository: README.md links ``docs/shards.md``, a docs page links
``../examples/dcp.py`` and ``../README.md``. ``tests/test_docs.py`` keeps those links true to the tree. This
hook makes the same links work on the site, and adds what ``mkdocs build --strict`` cannot see by itself:

- **The home page** is README.md (a generated ``index.md``), and CHANGELOG.md is ``changelog.md``.
- **Every relative link** is mapped from the repository to the site: ``docs/X`` is the page ``X``, README.md
  is ``index.md``, a module folder or ``__init__.py`` with an API page is that page, and any other file of the
  repository a page links (an example, a benchmark's result) is published under ``repo/``: Markdown as a
  page, a text file as a page that shows it, anything else (a PNG) as it is. A target that does not exist is
  left as written, so mkdocs reports it (``validation:`` in mkdocs.yml turns that into a failure).
- **The API reference**: a page for ``shufflepoint`` and one for each public package under
  ``shufflepoint.integrations``, found in ``src/`` (``api_modules``), added to the navigation as
  "API reference"; mkdocstrings renders them from the docstrings.
- **Docstrings**: every public name (``shufflepoint.__all__``, each public integration's ``__all__``, and
  the public methods and properties of the public classes among them) without a docstring is a WARNING,
  which fails ``--strict``.
- Headings get GitHub's anchors (``pymdownx.slugs``), the ones the pages link to.

Nothing here reaches the network; no page is written into ``docs/``.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from pymdownx.slugs import slugify

log = logging.getLogger("mkdocs.plugins.shufflepoint")

PACKAGE = "shufflepoint"
INTEGRATIONS = f"{PACKAGE}.integrations"
HOME, CHANGELOG = "index.md", "changelog.md"
PUBLISHED = "repo"  # where the repository's other linked files go on the site
TEXT_SUFFIXES = {".py": "python", ".sh": "bash", ".toml": "toml", ".json": "json", ".yml": "yaml", ".yaml": "yaml",
                 ".txt": "text", ".cfg": "ini"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+).+?\1")
LINK = re.compile(r"(?P<head>!?\[[^\]]*\]\()(?P<target><[^>]*>|[^)\s]*)(?P<tail>(?:\s+\"[^\"]*\")?\))")
SKIPPED = ("http://", "https://", "mailto:", "#")

# Filled by on_config, read by the later events of the same build.
_site: dict[str, Any] = {}


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def api_modules(src: Path) -> list[str]:
    """``shufflepoint`` and every public package under ``shufflepoint.integrations`` (no leading underscore),
    in name order: the modules the API reference documents and the docstring check covers."""
    integrations = src / PACKAGE / "integrations"
    found = sorted(path.name for path in integrations.iterdir()
                   if (path / "__init__.py").is_file() and not path.name.startswith("_"))
    return [PACKAGE, *(f"{INTEGRATIONS}.{name}" for name in found)]


def api_page(module: str) -> str:
    """The site path of a module's API page: ``api/shufflepoint.md``, ``api/integrations/accelerate.md``."""
    if module == PACKAGE:
        return f"api/{PACKAGE}.md"
    return f"api/integrations/{module.rsplit('.', 1)[1]}.md"


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    root = _root(config)
    src = root / "src"
    modules = api_modules(src)
    _site.clear()
    _site.update(root=root, src=src, modules=modules, repo_of={}, site_of={})
    config.mdx_configs.setdefault("toc", {})["slugify"] = slugify(case="lower")  # GitHub's anchors
    reference = [{PACKAGE: api_page(PACKAGE)}]
    reference += [{module.rsplit(".", 1)[1]: api_page(module)} for module in modules[1:]]
    kept = [item for item in config.nav or [] if not (isinstance(item, dict) and "API reference" in item)]
    config.nav = [*kept, {"API reference": reference}]  # once, also when `mkdocs serve` rebuilds
    return config


def _api_page_text(module: str) -> str:
    title = f"`{module}`"
    intro = ("Every public name, from its docstring. The guides explain when to use which: start at the "
             "[home page](../index.md).") if module == PACKAGE else \
        f"The integration's public names (`{module}.__all__`), from their docstrings."
    return f"# {title}\n\n{intro}\n\n::: {module}\n"


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(index, line) of every line outside fenced code blocks."""
    lines, fence = [], None
    for index, line in enumerate(text.splitlines()):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
            fence = None
        elif fence is None:
            lines.append((index, line))
    return lines


def _map_links(line: str, replace: Any) -> str:
    """``line`` with every link target passed through ``replace``, except links inside inline code (a link's
    text may hold code: ``[`examples/dcp.py`](../examples/dcp.py)``)."""
    spans = [code.span() for code in INLINE_CODE.finditer(line)]

    def outside_code(match: re.Match[str]) -> str:
        inside = any(start <= match.start() < end for start, end in spans)
        return match.group(0) if inside else str(replace(match))

    return LINK.sub(outside_code, line)


def _relative_targets(text: str) -> list[str]:
    targets: list[str] = []

    def collect(match: re.Match[str]) -> str:
        target = match["target"].strip("<>")
        if target and not target.startswith(SKIPPED):
            targets.append(target.split("#", 1)[0])
        return match.group(0)

    for _, line in _prose_lines(text):
        _map_links(line, collect)
    return targets


def _module_of(path: Path, src: Path) -> str | None:
    """The module a folder or ``__init__.py`` under ``src/`` is, if it has an API page."""
    if path.name == "__init__.py":
        path = path.parent
    if not path.is_dir() or not path.is_relative_to(src):
        return None
    module = ".".join(path.relative_to(src).parts)
    return module if module in _site["modules"] else None


def _publish(repo_path: str, root: Path, config: MkDocsConfig, files: Files) -> str:
    """Add one file of the repository outside docs/ to the site; its site path."""
    source = root / repo_path
    suffix = source.suffix
    if suffix == ".md":
        uri = f"{PUBLISHED}/{repo_path}"
        files.append(File.generated(config, uri, content=source.read_text()))
    elif suffix in TEXT_SUFFIXES:
        uri = f"{PUBLISHED}/{repo_path}.md"
        body = source.read_text()
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", body)), default=0))
        page = f"# `{repo_path}`\n\n{fence}{TEXT_SUFFIXES[suffix]}\n{body}\n{fence}\n"
        files.append(File.generated(config, uri, content=page))
    else:
        uri = f"{PUBLISHED}/{repo_path}"
        files.append(File.generated(config, uri, abs_src_path=str(source)))
    return uri


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the home page, the changelog, the API pages and every repository file the pages link."""
    root, src, docs = _site["root"], _site["src"], Path(config.docs_dir).resolve()
    repo_of: dict[str, str] = _site["repo_of"]  # site path of a page -> its path in the repository
    site_of: dict[str, str] = _site["site_of"]  # repository path -> site path
    for page in (HOME, CHANGELOG):
        if files.get_file_from_path(page) is not None:
            log.warning(f"docs/{page} is generated from the repository's root; remove docs/{page}")
    for uri, source in ((HOME, "README.md"), (CHANGELOG, "CHANGELOG.md")):
        files.append(File.generated(config, uri, content=(root / source).read_text()))
        repo_of[uri], site_of[source] = source, uri
    for module in _site["modules"]:
        files.append(File.generated(config, api_page(module), content=_api_page_text(module)))
    for file in files.documentation_pages():
        if file.abs_src_path and Path(file.abs_src_path).resolve().is_relative_to(docs):
            repo_path = Path(file.abs_src_path).resolve().relative_to(root).as_posix()
            repo_of[file.src_uri], site_of[repo_path] = repo_path, file.src_uri
    pending = list(repo_of.items())
    while pending:  # a published Markdown page's own links are followed too
        uri, repo_path = pending.pop()
        text = files.get_file_from_path(uri).content_string  # type: ignore[union-attr]
        for target in _relative_targets(text):
            resolved = (root / posixpath.dirname(repo_path) / target).resolve()
            if not resolved.is_relative_to(root) or not resolved.exists():
                continue  # left as written: mkdocs reports the link
            linked = resolved.relative_to(root).as_posix()
            module = _module_of(resolved, src)
            if linked in site_of:
                continue
            if module is not None:
                site_of[linked] = api_page(module)
            elif resolved.is_file() and not resolved.is_relative_to(docs):
                site_of[linked] = _publish(linked, root, config, files)
                if resolved.suffix == ".md":
                    repo_of[site_of[linked]] = linked
                    pending.append((site_of[linked], linked))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Rewrite each relative link from its repository target to that target's page on the site."""
    repo_path = _site["repo_of"].get(page.file.src_uri)
    if repo_path is None:
        return markdown
    root, site_of = _site["root"], _site["site_of"]
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match["target"].strip("<>")
        if not target or target.startswith(SKIPPED):
            return match.group(0)
        path, hash_, fragment = target.partition("#")
        resolved = (root / posixpath.dirname(repo_path) / path).resolve()
        linked = resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None
        if linked not in site_of:
            return match.group(0)
        mapped = posixpath.relpath(site_of[linked], here or ".")
        return f"{match['head']}{mapped}{hash_}{fragment}{match['tail']}"

    lines = markdown.splitlines()
    for index, line in _prose_lines(markdown):
        lines[index] = _map_links(line, rewrite)
    return "\n".join(lines) + "\n"


def undocumented(src: Path, modules: list[str]) -> list[str]:
    """Every public name of ``modules`` without a docstring: the names of each module's ``__all__`` (each a
    module, class, function or attribute), and the public methods and properties a public class defines.
    Read statically from ``src/`` by griffe, as mkdocstrings reads it."""
    loader = griffe.GriffeLoader(search_paths=[str(src)], docstring_parser=griffe.Parser.google)
    for module in modules:
        loader.load(module)
    loader.resolve_aliases(external=False, implicit=False)
    missing = []
    for name in modules:
        module = loader.modules_collection[name]
        if not module.docstring:
            missing.append(f"{name} (the module)")
        exported = module.exports if module.exports is not None else _public_members(module)
        for export in exported:
            export_name = export if isinstance(export, str) else export.name
            if export_name.startswith("__"):  # __version__: a value, documented where it is read
                continue
            missing += _undocumented_member(module[export_name], f"{name}.{export_name}")
    return missing


def _public_members(module: Any) -> list[str]:
    """A module without ``__all__``: its names without a leading underscore, defined in it or imported from
    this package (not ``torch`` or another library it imports)."""
    return [name for name, member in module.members.items() if not name.startswith("_")
            and (not member.is_alias or member.target_path.startswith(f"{PACKAGE}."))]


def _undocumented_member(member: Any, qualified: str) -> list[str]:
    try:
        target = member.final_target if member.is_alias else member
    except griffe.AliasResolutionError:
        return [f"{qualified} (its definition cannot be found)"]
    missing = [] if target.docstring and target.docstring.value.strip() else [qualified]
    if target.is_class:
        for name, child in target.members.items():
            if name.startswith("_") or child.is_alias or not (child.is_function or "property" in child.labels):
                continue
            if not (child.docstring and child.docstring.value.strip()):
                missing.append(f"{qualified}.{name}")
    return missing


def on_pre_build(config: MkDocsConfig) -> None:
    for name in undocumented(_site["src"], _site["modules"]):
        log.warning(f"public name without a docstring: {name} (src/; write one: it is the API reference)")


def on_serve(server: Any, config: MkDocsConfig, builder: Any) -> Any:
    """``make docs`` reloads on edits of what the hook reads besides docs/."""
    root = _root(config)
    for path in ("README.md", "CHANGELOG.md", "src", "examples"):
        server.watch(os.fspath(root / path))
    return server

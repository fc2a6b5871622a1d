"""The documentation site's navigation lists every page, without mkdocs: a page added to docs/ without a place in
mkdocs.yml's ``nav`` fails here, in ``make test``, before ``make docs-build`` would (``--strict``, its
``validation.nav.omitted_files``). The strict build itself, and proof that each of its checks fails it, are in
tests/docs_site (marker ``docs``, ``make docs-build``)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import yaml  # PyYAML: in the dev stack through accelerate, transformers, datasets

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Pages the site's hook (docs/_site/hooks.py) makes from the repository's root: they are in the nav, not in docs/.
GENERATED = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def config() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def nav_pages(nav: Any) -> Iterator[str]:
    """Every page path of a mkdocs ``nav``: a list of ``path``, ``{title: path}`` and ``{title: [...]}``."""
    if isinstance(nav, str):
        if not nav.startswith(("http://", "https://")):
            yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)
    else:
        raise AssertionError(f"mkdocs.yml nav: unexpected entry {nav!r}")


def test_every_docs_page_is_in_the_nav_once() -> None:
    listed = list(nav_pages(config()["nav"]))
    pages = sorted(path.name for path in DOCS.glob("*.md"))
    missing = [page for page in pages if page not in listed]
    assert not missing, f"docs/ pages missing from mkdocs.yml's nav (put each in its group): {missing}"
    twice = sorted({page for page in listed if listed.count(page) > 1})
    assert not twice, f"pages listed more than once in mkdocs.yml's nav: {twice}"


def test_every_nav_entry_is_a_page() -> None:
    gone = [page for page in nav_pages(config()["nav"])
            if page not in GENERATED and not (DOCS / page).is_file()]
    assert not gone, f"mkdocs.yml's nav names pages that do not exist in docs/: {gone}"
    assert all((ROOT / source).is_file() and not (DOCS / page).exists() for page, source in GENERATED.items())


def test_the_strict_checks_stay_on() -> None:
    """What makes ``mkdocs build --strict`` fail on a left-out page, a broken link or anchor: each a warning."""
    validation = config()["validation"]
    assert config()["strict"] is True
    assert validation["nav"]["omitted_files"] == "warn"
    assert validation["nav"]["not_found"] == "warn"
    assert validation["links"]["not_found"] == "warn"
    assert validation["links"]["anchors"] == "warn"
    assert "docs/_site/hooks.py" in config()["hooks"]  # the docstring check and the README's links


def test_nav_pages_reads_every_shape() -> None:
    nav = ["a.md", {"Group": [{"B": "b.md"}, "c.md", {"Sub": [{"D": "d.md"}]}]}, {"Web": "https://x.org"}]
    assert list(nav_pages(nav)) == ["a.md", "b.md", "c.md", "d.md"]

"""One version, in one place: src/shufflepoint/_version.py. The build reads it, the package and the command
print it, and the changelog's newest release is it (the wheel's own metadata: make test-wheel)."""

from __future__ import annotations

import pathlib
import re

import pytest

import shufflepoint
from shufflepoint import _version

ROOT = pathlib.Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def test_the_version_is_a_release_defined_once() -> None:
    assert shufflepoint.__version__ == _version.__version__
    assert RELEASE.match(shufflepoint.__version__), shufflepoint.__version__


def test_pyproject_reads_the_version_from_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"], "a second version in pyproject.toml: keep it in _version.py"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "shufflepoint._version.__version__"}


def test_no_other_version_is_written_in_the_tree() -> None:
    """A version string beside the one in _version.py would drift from it (0.2.0.dev0 did)."""
    assignment = re.compile(r"""^\s*(?:__version__|version)\s*=\s*["']\d""", re.M)
    found = [str(path.relative_to(ROOT)) for path in [ROOT / "pyproject.toml", *(ROOT / "src").rglob("*.py")]
             if assignment.search(path.read_text()) and path.name != "_version.py"]
    assert not found, found


def test_the_changelog_names_this_version_first_and_the_state_version_written() -> None:
    from shufflepoint._core.state import VERSION as STATE_VERSION

    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases and releases[0] == shufflepoint.__version__, releases
    assert releases[-1] == "0.1", releases  # every release since the first, newest first
    assert f"**State version {STATE_VERSION}**" in text, f"CHANGELOG.md: no entry for state version {STATE_VERSION}"

"""docs/extending.md stays runnable: every python block of the page runs here, each in a fresh namespace,
with the assertions it carries (a user's dataset offering each public protocol, read by
``shufflepoint.DataLoader``, stopped and resumed exactly in a fresh loader). The protocols' own docstring
examples (``_core/capabilities.py``) run too."""

from __future__ import annotations

import doctest
import pathlib

import pytest

from shufflepoint._core import capabilities
from test_docs import code_blocks

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md"
MARKER = "<!-- runs: tests/test_extending.py -->"
BLOCKS = [(start, body) for start, info, _, body in code_blocks(PAGE.read_text()) if info.split()[:1] == ["python"]]


def test_the_page_has_a_runnable_example_per_public_protocol() -> None:
    text = PAGE.read_text()
    assert len(BLOCKS) >= 5
    for name in ("OwnOrder", "Identified", "Locatable", "ReadsBatches", "Prefetching"):
        assert f"## `{name}`" in text, name
    marked = {start for start, _, previous, _ in code_blocks(text) if previous == MARKER}
    assert {start for start, _ in BLOCKS} == marked  # every python block is run here, and says so


@pytest.mark.parametrize("body", [body for _, body in BLOCKS], ids=[f"line-{start}" for start, _ in BLOCKS])
def test_every_python_block_of_the_page_runs(body: list[str]) -> None:
    code = compile("\n".join(body), f"{PAGE}:block", "exec")
    exec(code, {"__name__": "extending_example"})


def test_the_protocols_docstring_examples_run() -> None:
    found = doctest.testmod(capabilities, optionflags=doctest.ELLIPSIS)
    assert found.attempted >= 5 and found.failed == 0

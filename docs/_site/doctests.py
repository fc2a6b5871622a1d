"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings' ``extensions:``): doctests as code.

The docstrings show worked examples as bare doctests (``>>> p[3]``), which tests run
(``tests/test_extending.py``) and a terminal shows well. In Markdown a bare ``>>>`` is a nested quote, and
``p[3]`` a link; so each run of doctest lines, from a ``>>>`` line to the next blank line, is fenced as a
``pycon`` block on the site. Only what mkdocstrings renders changes, never the source.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

PROMPT = re.compile(r"^(?P<indent>\s*)>>> ")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def fenced(text: str) -> str:
    """``text`` with each run of doctest lines outside a fence put in a ``pycon`` fence of its indentation."""
    out: list[str] = []
    lines = text.splitlines()
    index, in_fence = 0, False
    while index < len(lines):
        line = lines[index]
        if FENCE.match(line):
            in_fence = not in_fence
        prompt = None if in_fence else PROMPT.match(line)
        if prompt is None:
            out.append(line)
            index += 1
            continue
        end = index
        while end < len(lines) and lines[end].strip():
            end += 1
        indent = prompt["indent"]
        out += [f"{indent}```pycon", *lines[index:end], f"{indent}```"]
        index = end
    return "\n".join(out)


class DoctestsAsCode(griffe.Extension):
    """Fence the doctests of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>> " in obj.docstring.value:
            obj.docstring.value = fenced(obj.docstring.value)

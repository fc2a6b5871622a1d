"""The tree keeps the shape DESIGN.md gives it: small modules, short functions, imports that point down.

Each layer may import only the layers listed for it in ``ALLOWED`` (and the standard library,
numpy, torch, ...). The map is the one in the README's Development section.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "shufflepoint"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# layer -> the shufflepoint layers it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "_order": set(),
    "_core": {"_order"},
    "_shards": {"_order", "_core"},
    "_loading": {"_order", "_core", "_shards"},
    "integrations": {"_order", "_core", "_loading"},
    "_tools": {"_order", "_core", "_shards", "_loading", "integrations"},
}
# Modules of the package root: the public surface may import every layer.
ROOT_MODULES = {"__init__", "__main__", "_version"}
# The version, a leaf any layer may read.
VERSION_MODULES = {"__version__", "_version"}


def _python_files(*roots: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def _layer(path: pathlib.Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _imported_layers(path: pathlib.Path) -> set[tuple[str, int]]:
    """(layer, line) for every ``shufflepoint.<layer>`` import in the file, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "shufflepoint" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def test_every_module_in_the_package_belongs_to_a_known_layer() -> None:
    layers = {_layer(p) for p in _python_files(PACKAGE)}
    assert layers <= set(ALLOWED) | ROOT_MODULES, layers - set(ALLOWED) - ROOT_MODULES


@pytest.mark.parametrize("path", _python_files(PACKAGE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: pathlib.Path) -> None:
    layer = _layer(path)
    if layer in ROOT_MODULES:
        return
    wrong = sorted((other, line) for other, line in _imported_layers(path)
                   if other != layer and other not in ALLOWED[layer] and other not in VERSION_MODULES)
    assert not wrong, f"{path.relative_to(ROOT)} ({layer}) imports {wrong}; {layer} may import {ALLOWED[layer]}"


def test_the_public_api_is_the_only_reach_upward() -> None:
    """No layer imports the package root (``from shufflepoint import X``) but the tools, which
    print its version and drive the public API the way a user does."""
    offenders = []
    for path in _python_files(PACKAGE):
        layer = _layer(path)
        if layer in ROOT_MODULES or layer == "_tools":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            plain = isinstance(node, ast.Import) and any(a.name == "shufflepoint" for a in node.names)
            from_root = isinstance(node, ast.ImportFrom) and node.module == "shufflepoint" and not all(
                a.name.startswith("_") for a in node.names)
            if plain or from_root:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


@pytest.mark.parametrize("path", _python_files(PACKAGE, ROOT / "benchmarks"), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path: pathlib.Path) -> None:
    text = path.read_text()
    lines = len(text.splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines, at most {MAX_MODULE_LINES}"
    long = [(node.name, node.lineno, node.end_lineno - node.lineno + 1)  # type: ignore[operator]
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]  # type: ignore[operator]
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines (name, line, length): {long}"


def test_the_checks_would_catch_a_violation(tmp_path: pathlib.Path) -> None:
    """The walkers see what they must: an upward import and a long function."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n" + "    x = 1\n" * 70 + "\nfrom shufflepoint._tools import cli\n")
    assert ("_tools", 73) in _imported_layers(source)
    tree = ast.parse(source.read_text())
    lengths = [n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]  # type: ignore[operator]
    assert lengths == [71]

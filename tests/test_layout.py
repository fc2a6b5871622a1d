"""The tree keeps the shape DESIGN.md gives it: one concept per module, short functions, imports that
point down, and no circles.

Each layer may import only the layers listed for it in ``ALLOWED`` (and the standard library,
numpy, torch, ...). The map is the one in the README's Development section. No two modules import each
other, not even inside a function or for types: a circle means one concept was cut in two.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "shufflepoint"
MAX_MODULE_LINES = 600  # a generous ceiling, not a target: cut at seams, never at a line count
MAX_FUNCTION_LINES = 60

# layer -> the shufflepoint layers it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "_order": set(),
    "_core": {"_order"},
    "_shards": {"_order", "_core"},
    "_media": {"_order", "_core", "_shards"},
    "_loading": {"_order", "_core", "_shards"},
    "integrations": {"_order", "_core", "_loading"},
    "_tools": {"_order", "_core", "_shards", "_media", "_loading", "integrations"},
}
# Modules of the package root: the public surface may import every layer.
ROOT_MODULES = {"__init__", "__main__"}
# Leaves any layer may read: the version, the house's errors, the settings read when used. A leaf imports
# no layer, only other leaves.
LEAF_MODULES = {"__version__", "_version", "_errors", "_settings"}
# The rooms of ``_shards``: each folder one part of the architecture (docs/development.md says which).
SHARDS_ROOMS = {"corpora", "counting", "index", "storage", "readers"}
# Layers that never import torch.distributed (the loader's layers own the process group).
NO_DISTRIBUTED = {"_order", "_core", "_shards", "_media"}
# ... but for the one collective a corpus takes before any loader exists, named here with its reason.
DISTRIBUTED_EXCEPTIONS = {
    "_shards/counting/count_share.py": "Packed's token totals: each process counts its share of the shards and "
                                       "one all_gather_object exchanges them (a Mixture asks the length when built)",
}


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
    assert layers <= set(ALLOWED) | ROOT_MODULES | LEAF_MODULES, layers - set(ALLOWED) - ROOT_MODULES - LEAF_MODULES


@pytest.mark.parametrize("leaf", sorted(LEAF_MODULES - {"__version__"}))
def test_a_leaf_imports_only_leaves(leaf: str) -> None:
    path = PACKAGE / f"{leaf}.py"
    wrong = sorted((other, line) for other, line in _imported_layers(path) if other not in LEAF_MODULES)
    assert not wrong, f"{path.relative_to(ROOT)} is a leaf every layer reads, yet imports {wrong}"


def test_shards_is_laid_out_in_rooms() -> None:
    """``_shards/`` shows its architecture in its folder names: no module lies loose in it, and each room
    says in its ``__init__`` docstring what it holds."""
    shards = PACKAGE / "_shards"
    loose = sorted(p.name for p in shards.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules loose in _shards/ (put each in its room, {sorted(SHARDS_ROOMS)}): {loose}"
    rooms = {p.name for p in shards.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == SHARDS_ROOMS, rooms ^ SHARDS_ROOMS
    for room in rooms:
        assert ast.get_docstring(ast.parse((shards / room / "__init__.py").read_text())), room


@pytest.mark.parametrize("path", [p for p in _python_files(PACKAGE) if _layer(p) in NO_DISTRIBUTED
                                  and str(p.relative_to(PACKAGE)) not in DISTRIBUTED_EXCEPTIONS],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_lower_layers_never_import_torch_distributed(path: pathlib.Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            if isinstance(node, ast.ImportFrom) else [])
        assert not any(n == "torch.distributed" or n.startswith("torch.distributed.") for n in names), (
            f"{path.relative_to(ROOT)}:{node.lineno} imports torch.distributed; {_layer(path)} never does")


@pytest.mark.parametrize("path", _python_files(PACKAGE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: pathlib.Path) -> None:
    layer = _layer(path)
    if layer in ROOT_MODULES or layer in LEAF_MODULES:
        return
    wrong = sorted((other, line) for other, line in _imported_layers(path)
                   if other != layer and other not in ALLOWED[layer] and other not in LEAF_MODULES)
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


def _module_name(path: pathlib.Path, package: pathlib.Path) -> str:
    """``shufflepoint._core.plan`` for .../shufflepoint/_core/plan.py; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_targets(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The modules of the package one import statement names: ``from pkg import name`` is the submodule
    ``pkg.name`` where that is a module, else ``pkg``; a relative import is resolved from ``module``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def _import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, counting every import statement in the file: at
    the top, inside functions, under ``if TYPE_CHECKING``."""
    files = {_module_name(path, package): path for path in _python_files(package)}
    graph: dict[str, set[str]] = {module: set() for module in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _import_targets(node, module, path.name == "__init__.py", set(files)):
                while target not in files and "." in target:  # ``import a.b.name``: name is no module
                    target = target.rsplit(".", 1)[0]
                if target in files and target != module:
                    graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for module in sorted(graph):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_no_two_modules_import_each_other() -> None:
    """A circle means one concept was cut in two: merge it, or cut it again at a seam so arrows point one
    way (a ``Protocol``, or the values passed in, instead of an import for types)."""
    circles = _circles(_import_graph(PACKAGE))
    assert not circles, "import circles (each a set of modules that import each other, directly or round a " \
        "loop):\n" + "\n".join("  " + " <-> ".join(circle) for circle in circles)


def test_the_circle_walker_finds_a_planted_circle(tmp_path: pathlib.Path) -> None:
    """Every kind of import closes a circle: at the top, lazily in a function, for types only, relative,
    and ``from package import submodule``; a chain that only points down is none."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.top import VALUE\n")
    (package / "top.py").write_text("VALUE = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.sub.a\nimport pkg.top\n")
    (package / "d.py").write_text("from .sub.a import thing\nimport pkg\n")
    graph = _import_graph(package)
    assert graph["pkg.sub.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.sub.a", "pkg.top"} and graph["pkg.d"] == {"pkg.sub.a", "pkg"}
    assert _circles(graph) == [["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]
    (package / "top.py").write_text("import pkg\n")  # the package's __init__ is the module pkg
    assert _circles(_import_graph(package)) == [["pkg", "pkg.top"], ["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]


def _imports_torch(path: pathlib.Path) -> bool:
    """Whether the module imports torch when it is imported (at its top level; a function that needs torch
    for the ``torch`` order or a tensor argument imports it when called)."""
    top = [n for statement in ast.parse(path.read_text()).body if not isinstance(statement, (ast.FunctionDef,
           ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(statement)]
    methods = [n for statement in ast.parse(path.read_text()).body if isinstance(statement, ast.ClassDef)
               for item in statement.body if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
               for n in ast.walk(item)]
    for node in top + methods:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name == "torch" or name.startswith("torch.") for name in names):
            return True
    return False


def test_the_position_model_is_torch_free() -> None:
    """``_loading/position.py`` and every module it imports, round and round, import no torch when
    imported: the loader's core runs and is tested without torch's machinery (the ``torch`` order alone
    imports it, when built)."""
    graph = _import_graph(PACKAGE)
    start = "shufflepoint._loading.position"
    seen, todo = {start}, [start]
    while todo:
        for other in graph[todo.pop()]:
            if other not in seen and other != "shufflepoint":
                seen.add(other)
                todo.append(other)
    files = {name: PACKAGE.joinpath(*name.split(".")[1:]) for name in seen}
    paths = {name: path / "__init__.py" if path.is_dir() else path.with_suffix(".py") for name, path in files.items()}
    with_torch = sorted(name for name, path in paths.items() if _imports_torch(path))
    assert "shufflepoint._loading.orders" in seen and "shufflepoint._core.history" in seen
    assert not with_torch, f"the position model reaches torch through {with_torch}"


def test_the_position_model_imports_without_torch() -> None:
    """The same, run: in a fresh interpreter where importing torch fails, the position model imports and
    places a loader's position (the package's own ``__init__``, which builds the torch loader, is skipped)."""
    import subprocess

    script = f"""
import sys, types
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked here")
sys.meta_path.insert(0, NoTorch())
package = types.ModuleType("shufflepoint")
package.__path__ = [{str(PACKAGE)!r}]
sys.modules["shufflepoint"] = package
from shufflepoint._core.plan import Layout
from shufflepoint._loading.deal import deal_of
from shufflepoint._loading.orders import OrderCache
from shufflepoint._loading.position import LoaderPosition
orders = OrderCache(None, 10, 3)
position = LoaderPosition(Layout(10, 2, 2, False), orders, deal_of(None, orders))
live = position.begin_pass()
live.received = 2
print(position.step, position.cursor, position.which(1), "torch" in sys.modules)
"""
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    step, cursor, *_, loaded = found.stdout.split()
    assert (step, cursor, loaded) == ("2", "8", "False")


# -- reaches into another module's private names -------------------------------------------------------
PRIVATE_MARK = re.compile(r"#\s*private:\s*\S")  # ``# private: <why>`` on the line that reaches


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions, classes and methods, every name it assigns (at any
    level: module, class body, function), and every attribute it assigns on ``self``/``cls``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
              and node.value.id in ("self", "cls")):
            found.add(node.attr)
    return {name for name in found if _is_private(name)}


def _fresh_instances(tree: ast.AST) -> set[str]:
    """Names bound to a new object of one of the module's own classes, read as ``self``: ``x = copy.copy(self)``,
    ``x = object.__new__(C)`` with C a class of this module."""
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            call, args = node.value.func, node.value.args
            copied = call.attr == "copy" and args and isinstance(args[0], ast.Name) and args[0].id == "self"
            made = call.attr == "__new__" and args and isinstance(args[0], ast.Name) and args[0].id in classes
            if copied or made:
                found.add(node.targets[0].id)
    return found


def _reaches(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(object, private name) of ``x._name``, or of ``getattr``/``hasattr``/``setattr(x, "_name", ...)``."""
    if isinstance(node, ast.Attribute) and _is_private(node.attr):
        return node.value, node.attr
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr",
                                                                                         "setattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)):
        return node.args[0], node.args[1].value
    return None


def private_reaches(package: pathlib.Path) -> list[tuple[str, int, str, bool]]:
    """(module, line, name, marked) for every reach into a private name the module does not define itself:
    ``x._name`` (or ``getattr(x, "_name")``) where ``x`` is not ``self``, ``cls``, ``super()`` or a fresh object of
    the module's own class, and ``_name`` is not among the private names the module defines; that is, a name
    defined with a leading underscore in another module of the package, or in a library. ``marked``: the line
    says why (``# private: <reason>``).

    Names alone tell modules apart, not objects: a module that defines ``_name`` itself and reaches the
    same-named private of another module's object is not seen (none does today)."""
    files = _python_files(package)
    trees = {path: ast.parse(path.read_text()) for path in files}
    found = []
    for path, tree in trees.items():
        own, fresh = _defined_private_names(tree), _fresh_instances(tree)
        lines = path.read_text().splitlines()
        for node in ast.walk(tree):
            reach = _reaches(node)
            if reach is None:
                continue
            target, name = reach
            if isinstance(target, ast.Name) and target.id in ("self", "cls", *fresh):
                continue
            if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "super":
                continue
            if name in own:
                continue
            line = node.lineno
            found.append((str(path.relative_to(package)), line, name, bool(PRIVATE_MARK.search(lines[line - 1]))))
    return sorted(found)


def test_no_module_reaches_into_another_s_private_names_without_saying_why() -> None:
    """A private name is its module's: another module reaching it (``corpus._storage``, ``order._block_start``,
    a library's ``fs._call_s3``) either gets a public or room-internal name, or says why on the line:
    ``# private: <reason>``."""
    unmarked = [f"{module}:{line} .{name}" for module, line, name, marked in private_reaches(PACKAGE) if not marked]
    assert not unmarked, "reaches into another module's private names, without # private: <why>:\n" + \
        "\n".join(unmarked)


def test_the_private_reach_walker_sees_a_reach(tmp_path: pathlib.Path) -> None:
    """``x._name`` of another module's name, a library's, a ``getattr`` probe: seen; ``self``, a fresh copy, the
    module's own names and a marked line: not (the marked one is seen as marked)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("class A:\n    def __init__(self):\n        self._hidden = 1\n")
    (package / "b.py").write_text(
        "import copy, sys\n"
        "def f(a):\n    return a._hidden\n"
        "def g():\n    return sys._getframe(1)\n"
        "def h(a):\n    return getattr(a, '_hidden', None)\n"
        "class B:\n    def __init__(self):\n        self._mine = 1\n"
        "    def same(self, other):\n        twin = copy.copy(self)\n        return other._mine, twin._x, self._y\n"
        "def i(a):\n    return a._hidden  # private: the test says why\n")
    found = private_reaches(package)
    assert found == [("b.py", 3, "_hidden", False), ("b.py", 5, "_getframe", False), ("b.py", 7, "_hidden", False),
                     ("b.py", 15, "_hidden", True)]
# What decides what a deal does: one module per deal (``_core/deals/``), behind the ``Deal`` and ``Cut`` protocols
# (``_core/cut.py``). Anywhere else, asking which deal one reads is a branch that belongs in a deal module.
DEAL_MODULES = PACKAGE / "_core" / "deals"
_DEAL_NAMES = {"strided", "spans", "buckets"}  # as literals
_DEAL_CONSTANTS = {"STRIDED", "SPANS", "BUCKETS"}  # the names' constants, however imported
_DEAL_NAME_MODULES = {"plan", "spans", "buckets", "strided"}  # modules whose ``NAME`` is a deal's name
_CUT_CLASSES = {"StridedCut", "SpanCut", "GlobalBatchCut", "FilteredStridedCut", "FilteredSpanCut", "BucketCut"}


def _deal_name_aliases(tree: ast.Module) -> set[str]:
    """Local names bound to a deal's name: ``from ..spans import NAME`` (or ``as SPANS``)."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.module or "").rsplit(".", 1)[-1] in _DEAL_NAME_MODULES
            for alias in node.names if alias.name in {"NAME", *_DEAL_CONSTANTS}}


def _names_a_deal(node: ast.AST, aliases: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in _DEAL_NAMES
    if isinstance(node, ast.Name):
        return node.id in _DEAL_CONSTANTS | aliases
    if isinstance(node, ast.Attribute):
        return node.attr in _DEAL_CONSTANTS or (node.attr == "NAME" and isinstance(node.value, ast.Name)
                                                and node.value.id.lstrip("_") in _DEAL_NAME_MODULES)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_deal(e, aliases) for e in node.elts)


def _names_a_cut_class(node: ast.AST, tuples: set[str]) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return bool(names & (_CUT_CLASSES | tuples))


def deal_branches(path: pathlib.Path) -> list[str]:
    """``line: code`` of every branch on a deal's name (``deal.name == STRIDED``, ``state["deal"] == "spans"``) or
    on a cut's type (``isinstance(cut, FilteredSpanCut)``, ``type(cut) in <a tuple of cut classes>``)."""
    tree = ast.parse(path.read_text())
    aliases = _deal_name_aliases(tree)
    tuples = {target.id for statement in tree.body if isinstance(statement, ast.Assign)
              and isinstance(statement.value, ast.Tuple) and _names_a_cut_class(statement.value, set())
              for target in statement.targets if isinstance(target, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            typed = any(isinstance(o, ast.Call) and isinstance(o.func, ast.Name) and o.func.id == "type"
                        for o in operands)
            if any(_names_a_deal(o, aliases) for o in operands) or \
                    typed and any(_names_a_cut_class(o, tuples) for o in operands):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 and \
                _names_a_cut_class(node.args[1], tuples):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", [p for p in _python_files(PACKAGE) if DEAL_MODULES not in p.parents],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_deal_modules_ask_which_deal_they_read(path: pathlib.Path) -> None:
    """Everything that differs between the deals is a method of the deal or its cuts, answered in the deal's own
    module (``_core/deals/``): nowhere else does code branch on a deal's name or a cut's type. (An *order's* name,
    ``orders.name != BLOCKS``, is not the deal.)"""
    found = deal_branches(path)
    assert not found, f"{path.relative_to(ROOT)} asks which deal it reads (move it behind the Deal protocol, " \
        f"_core/cut.py, into the deal's module under _core/deals/): {found}"


def test_the_deal_branch_walker_finds_planted_branches(tmp_path: pathlib.Path) -> None:
    """Each kind of branch is seen: a deal's name as a literal, a constant, an imported ``NAME``, a module's
    ``NAME``; a cut's type by ``isinstance`` and by ``type() in`` a tuple of cut classes; an order's name is not."""
    source = tmp_path / "m.py"
    source.write_text(
        "from shufflepoint._core.spans import NAME as WHICH\n"
        "from shufflepoint._core import buckets as _buckets\n"
        "CUTS = (StridedCut, SpanCut)\n"
        "def f(deal, state, cut, orders):\n"
        "    a = deal.name == 'strided'\n"
        "    b = deal.name != STRIDED\n"
        "    c = state['deal'] == WHICH\n"
        "    d = deal in (_buckets.NAME,)\n"
        "    e = isinstance(cut, FilteredSpanCut)\n"
        "    f = type(cut) in CUTS\n"
        "    g = orders.name != BLOCKS\n"
        "    h = deal.name == other.name\n")
    assert sorted(int(line.split(":")[0]) for line in deal_branches(source)) == [5, 6, 7, 8, 9, 10]

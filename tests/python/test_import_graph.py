"""The package's modules import each other without a cycle.

Every import between two modules of the package counts: at module level, inside a function
(the lazy imports that keep torch out of ``import diffusers_dynamic_offloader``) and under
``if TYPE_CHECKING:`` (the imports that hid the last cycle: a type-only import is still a
dependency of the design, and a type checker follows it). The graph is read with ``ast``, so
nothing is imported; the dynamic ``importlib`` lookups of ``__init__``'s lazy names are not
imports of a module by another and are left out.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Optional, Set, Tuple

import diffusers_dynamic_offloader

PACKAGE = diffusers_dynamic_offloader.__name__
PACKAGE_DIR = os.path.dirname(diffusers_dynamic_offloader.__file__)

#: Imports left out of the graph, each with its reason. None now: the seed's DynamicOffloadHook
#: and offload_api, mutually recursive by the seed's API, both import seed_compat.route, which
#: imports neither (the apply step is handed the hook class).
ALLOWED: Set[Tuple[str, str]] = set()

#: The seed's API (``seed_compat``) sits on top of the client: the client never imports it. The
#: modules under the seed's old paths are the exception, by design: each is its new module.
SEED_COMPAT = "seed_compat"


def _modules() -> Dict[str, str]:
    """Dotted name (relative to the package; ``""`` is the package) -> file path."""
    found = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        relative = os.path.relpath(folder, PACKAGE_DIR)
        parts = [] if relative == "." else relative.split(os.sep)
        for name in files:
            if not name.endswith(".py"):
                continue
            stem = name[:-3]
            dotted = ".".join(parts if stem == "__init__" else parts + [stem])
            found[dotted] = os.path.join(folder, name)
    return found


def _resolve(importer: str, is_package: bool, level: int, target: Optional[str]) -> List[str]:
    """The package-relative base name a ``from <dots><target> import`` names (a list of one),
    or [] when it leaves the package."""
    parts = importer.split(".") if importer else []
    if not is_package:
        parts = parts[:-1]
    up = level - 1
    if up > len(parts):
        return []
    base = parts[: len(parts) - up] if up else parts
    if target:
        base = base + target.split(".")
    return [".".join(base)]


def _imports(name: str, path: str, modules: Dict[str, str]) -> Set[str]:
    """The package modules ``name`` imports, anywhere in its file."""
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    dotted = alias.name[len(PACKAGE) + 1:]
                    if dotted in modules:
                        found.add(dotted)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module != PACKAGE and not (node.module or "").startswith(PACKAGE + "."):
                    continue
                bases = [(node.module or "")[len(PACKAGE) + 1:]]
            else:
                bases = _resolve(name, is_package, node.level, node.module)
            for base in bases:
                for alias in node.names:
                    # ``from . import store`` names a submodule; ``from .x import y`` names x.
                    submodule = f"{base}.{alias.name}" if base else alias.name
                    if submodule in modules:
                        found.add(submodule)
                    elif base in modules:
                        found.add(base)
    found.discard(name)
    return found


def _find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One cycle of ``graph`` as a path whose last node is its first, or None."""
    white, grey, black = 0, 1, 2
    color = {node: white for node in graph}
    stack: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        color[node] = grey
        stack.append(node)
        for target in sorted(graph[node]):
            if color[target] == grey:
                return stack[stack.index(target):] + [target]
            if color[target] == white:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        stack.pop()
        color[node] = black
        return None

    for node in sorted(graph):
        if color[node] == white:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    for importer, imported in ALLOWED:
        graph[importer].discard(imported)
    return graph


def test_the_graph_is_read():
    graph = _graph()
    assert "client" in graph and "store" in graph and "_proto.ddo_pb2" in graph
    assert "client" in graph[""]  # __init__ imports DdoClient
    assert "store" in graph["client"]  # a function-local import
    assert "_proto.sessions_pb2" in graph["_proto.ddo_pb2"]  # ``from . import x``
    assert "client" in graph["default_client"]  # ``from .client import DdoClient``


def test_the_seed_hook_and_offload_api_meet_in_route():
    graph = _graph()
    for side in ("seed_compat.offload_api", "seed_compat.offload_hook"):
        assert "seed_compat.route" in graph[side]
    assert "seed_compat.offload_api" not in graph["seed_compat.offload_hook"]
    assert not {"seed_compat.offload_api", "seed_compat.offload_hook"} & graph["seed_compat.route"]


def test_no_import_cycle():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{PACKAGE}.{node}" if node else PACKAGE for node in cycle
    )


def test_the_client_never_imports_the_seed_api():
    modules = _modules()
    old_paths = {name for name, path in modules.items()
                 if "." not in name and f"{SEED_COMPAT}.{name}" in modules}
    assert {"offload_api", "presets", "profiles"} <= old_paths
    for name, path in modules.items():
        if name == SEED_COMPAT or name.startswith(SEED_COMPAT + ".") or name in old_paths:
            continue
        found = sorted(target for target in _imports(name, path, modules)
                       if target == SEED_COMPAT or target.startswith(SEED_COMPAT + "."))
        assert not found, f"{PACKAGE}.{name or '__init__'} imports {found}"


def test_a_cycle_is_found():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None

"""Every import of a Python module, read from its source (AST), the imports inside functions too.

The one reader of imports: ``tests/test_floors.py`` checks with it that imports point down the
floors, and the test map (:mod:`trainyard.dev.testmap`) follows it from each test file to the
modules that test reaches. Reading the source, not importing it, sees a lazy import too and needs
none of the packages installed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module it imports (for ``from m import a, b``: m)
    line: int
    names: tuple[str, ...] = ()  # ``from m import a, b``: a and b (modules or attributes)


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` under ``root`` (a package: without ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, package: bool = False) -> list[Import]:
    """The imports of ``module`` (``package``: its source is a package's ``__init__``, against which
    a relative import resolves itself, not its parent). Raises SyntaxError or ValueError for a
    source that does not parse."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                parts = module.split(".")
                base = parts[: len(parts) - node.level + (1 if package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.append(Import(module, target, node.lineno, tuple(alias.name for alias in node.names)))
    return out


def neighbours(imp: Import) -> list[str]:
    """What an import may run: its target, ``target.name`` for each name (a submodule, when it is
    one) and the packages above the target (importing a.b.c runs a/__init__ and a/b/__init__ first)."""
    parts = imp.target.split(".")
    return [
        imp.target,
        *(f"{imp.target}.{name}" for name in imp.names),
        *(".".join(parts[:i]) for i in range(1, len(parts))),
    ]


def reach(
    start: Iterable[str], index: Mapping[str, list[Import]], extra: Mapping[str, Iterable[str]] | None = None
) -> dict[str, str | None]:
    """Every name reachable from ``start`` by imports (and by the ``extra`` edges), each with the
    module it was first reached from (None for a start), breadth first: the chain back from any
    name is a shortest one. Names outside ``index`` (a deleted module, an attribute) are reached
    but not followed."""
    parent: dict[str, str | None] = {}
    queue = []
    for module in start:
        if module not in parent:
            parent[module] = None
            queue.append(module)
    for module in queue:  # the list grows as it is read: breadth first
        if module not in index:
            continue
        targets = [t for imp in index[module] for t in neighbours(imp)]
        # what a module runs by name runs the packages above it too, as an import does
        targets += [t for name in (extra or {}).get(module, ()) for t in neighbours(Import(module, name, 0))]
        for target in targets:
            if target not in parent:
                parent[target] = module
                queue.append(target)
    return parent


def closure(start: set[str], index: Mapping[str, list[Import]]) -> set[str]:
    """First-party modules (those in ``index``) reachable from ``start`` by imports."""
    return {m for m in reach(start, index) if m in index}

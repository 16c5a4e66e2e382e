"""The floors point one way: an import may only point down (or sideways within its own package).

floor 0  trainyard.contract          standard library only
floor 1  webhook, trainer            the contract; never each other; only their own extra's packages
floor 2  trainyard.repo              floors 0-1
floor 3  trainyard.cluster           floors 0-2
floor 4  trainyard.sandbox           floors 0-3
top      trainyard.cli, trainyard.dev everything

Floor 2 has rooms, ordered the same way (trainyard/repo/__init__.py says what each holds):

model < upstream < generate < jobs < validate < the commands (trainyard/repo/cli.py, render.py, pins.py)

Inside one room (a room of floor 2, or any other package) the imports form no circle: a module
that needs a sibling's name while the sibling needs its own is a module too many or one too few.

Every import in every module is read from the source (AST), the imports inside functions and under
``if TYPE_CHECKING:`` too, so a lazy import cannot hide an inverted floor or a circle
(trainyard/dev/imports.py, the reader the test map shares). The images copy only the floors they
run: the import closure of each image's packages must lie within what its Dockerfile copies.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from trainyard.dev import imports
from trainyard.dev.imports import Import, closure, imports_of

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainyard", "webhook", "trainer")
TOP = 5

# The third-party packages each floor-1 package may import: what its extra installs (pyproject.toml).
THIRD_PARTY = {
    "webhook": {"fastapi", "starlette", "uvicorn", "uvloop", "orjson", "pydantic", "yaml", "jsonpatch",
                "prometheus_client", "cryptography"},
    "trainer": {"torch", "numpy", "prometheus_client"},
}  # fmt: skip

# The rooms of floor 2, bottom to top; a module of trainyard.repo outside them is one of the commands.
ROOMS = ("model", "upstream", "generate", "jobs", "validate")
COMMANDS = ("cli", "pins", "render")


def floor_of(module: str) -> int | None:
    """The floor of a first-party module, None for anything else."""
    if module == "trainyard" or module.startswith("trainyard.contract"):
        return 0
    if module.split(".")[0] in ("webhook", "trainer"):
        return 1
    if module.startswith("trainyard.repo"):
        return 2
    if module.startswith("trainyard.cluster"):
        return 3
    if module.startswith("trainyard.sandbox"):
        return 4
    if module.startswith("trainyard."):
        return TOP
    return None


def module_name(path: Path) -> str:
    return imports.module_name(path, ROOT)


def read_imports(path: Path) -> list[Import]:
    return imports_of(path.read_text(encoding="utf-8"), module_name(path), package=path.name == "__init__.py")


def room_of(module: str) -> int | None:
    """The room of a module of trainyard.repo (len(ROOMS): the commands), None for anything else
    (the package trainyard.repo itself included: importing it runs only its docstring)."""
    parts = module.split(".")
    if parts[:2] != ["trainyard", "repo"] or len(parts) < 3:
        return None
    return ROOMS.index(parts[2]) if parts[2] in ROOMS else len(ROOMS)


def room_name(room: int) -> str:
    return ROOMS[room] if room < len(ROOMS) else "commands"


def room_violations(imp: Import) -> list[str]:
    """An import from a room of trainyard.repo into a higher one; ``from trainyard.repo import x``
    is read as an import of trainyard.repo.x."""
    mine = room_of(imp.module)
    if mine is None:
        return []
    targets = [imp.target] if room_of(imp.target) is not None else []
    if imp.target == "trainyard.repo":
        targets = [f"{imp.target}.{name}" for name in imp.names]
    found = []
    for target in targets:
        theirs = room_of(target)
        if theirs is not None and theirs > mine:
            found.append(f"{imp.module}:{imp.line} imports {target}: "
                         f"room {room_name(mine)} may not import room {room_name(theirs)}")  # fmt: skip
    return found


def violations(imports: list[Import]) -> list[str]:
    """Every import that points up a floor or a room, across floor 1, or out of what a floor may use."""
    found = []
    stdlib = sys.stdlib_module_names
    for imp in imports:
        mine, theirs = floor_of(imp.module), floor_of(imp.target)
        top = imp.target.split(".")[0]
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        if theirs is None:
            if top in stdlib or top == "__future__":
                continue
            if mine == 0:
                found.append(f"{where}: floor 0 uses the standard library only")
            elif mine == 1 and top not in THIRD_PARTY[imp.module.split(".")[0]]:
                found.append(f"{where}: not a package of the {imp.module.split('.')[0]} extra")
            continue
        if mine is None:
            continue
        found += room_violations(imp)
        if theirs > mine:
            found.append(f"{where}: floor {mine} may not import {theirs}")
        elif mine == theirs == 1 and imp.module.split(".")[0] != top:
            found.append(f"{where}: the webhook and the trainer never import each other")
    return found


def all_imports() -> list[Import]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out += read_imports(path)
    return out


def test_every_import_points_down():
    assert violations(all_imports()) == []


@pytest.mark.parametrize(
    ("module", "source", "message"),
    [
        ("webhook.engine", "from trainyard.repo import validate", "floor 1 may not import 2"),
        ("trainyard.repo.jobs.preview", "def f():\n    from trainyard.sandbox import demo", "floor 2 may not import 4"),
        ("trainyard.contract.names", "import yaml", "floor 0 uses the standard library only"),
        ("trainyard.contract.k8s", "from trainyard.repo.model.rendered import Resource", "floor 0 may not import 2"),
        ("trainer.loop", "from webhook.engine import admit", "never import each other"),
        ("webhook.app", "import httpx", "not a package of the webhook extra"),
        ("trainer.launch", "import yaml", "not a package of the trainer extra"),
        ("trainyard.repo.model.kustomize", "from trainyard.repo.upstream import app_render",
         "room model may not import room upstream"),
        ("trainyard.repo.upstream.vap", "def f():\n    from trainyard.repo.jobs.preview import preview",
         "room upstream may not import room jobs"),
        ("trainyard.repo.generate.runtimes", "from trainyard.repo import model, validate",
         "room generate may not import room validate"),
        ("trainyard.repo.validate.jobs", "import trainyard.repo.cli", "room validate may not import room commands"),
        ("trainyard.repo.jobs.preview", "from ..validate import jobs", "room jobs may not import room validate"),
    ],
)  # fmt: skip
def test_an_inverted_import_is_found(module, source, message):
    found = violations(imports_of(source, module))
    assert len(found) == 1 and message in found[0], found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("trainyard.repo.upstream.vap", "from trainyard.repo.upstream import rbac"),
        ("trainyard.repo.jobs.preview", "from trainyard.repo.model import kustomize"),
        ("trainyard.repo.cli", "from trainyard.repo import validate"),
        ("trainyard.repo.render", "from trainyard.repo.upstream.app_render import render_cluster"),
        ("trainyard.sandbox.demo", "from trainyard.repo.jobs import preview"),
    ],
)
def test_a_downward_or_sideways_import_is_allowed(module, source):
    assert violations(imports_of(source, module)) == []


def test_every_room_is_ordered():
    """A new sub-package of trainyard.repo takes its place in ROOMS, and only the commands sit
    beside them, so that no module escapes the order."""
    repo = ROOT / "trainyard" / "repo"
    packages = {p.name for p in repo.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in repo.glob("*.py")} - {"__init__"}
    assert (packages, modules) == (set(ROOMS), set(COMMANDS))


def room_key(module: str) -> str:
    """The room a module sits in: ``trainyard.repo.<room>`` for floor 2 (its commands share
    ``trainyard.repo``), the module's package elsewhere."""
    parts = module.split(".")
    if parts[:2] == ["trainyard", "repo"] and len(parts) > 3:
        return ".".join(parts[:3])
    return ".".join(parts[:-1])


def room_cycles(index: dict[str, list[Import]]) -> list[list[str]]:
    """Every circle of imports between modules of one room (strongly connected components of more
    than one module, or a module importing itself), each sorted. ``from package import module`` is an
    edge to the module, not to the package."""
    edges: dict[str, set[str]] = {}
    for module, found in index.items():
        for imp in found:
            named = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in index]
            for target in named or ([imp.target] if imp.target in index else []):
                if room_key(target) == room_key(module):
                    edges.setdefault(module, set()).add(target)
    # Tarjan's strongly connected components, iterative
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(index):
        if start in order:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in order:
                    order[child] = low[child] = len(order)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], order[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    out.append(sorted(component))
    return out


def test_no_import_circle_inside_a_room():
    index = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            index[module_name(path)] = read_imports(path)
    assert room_cycles(index) == []


@pytest.mark.parametrize(
    ("sources", "circle"),
    [
        # a plain circle of three
        ({"a": "from trainyard.repo.upstream import b", "b": "from trainyard.repo.upstream.c import x",
          "c": "import trainyard.repo.upstream.a"}, ["a", "b", "c"]),
        # hidden in a function, as a lazy import hides it
        ({"a": "from trainyard.repo.upstream import b",
          "b": "def f():\n    from trainyard.repo.upstream import a"}, ["a", "b"]),
        # hidden behind TYPE_CHECKING
        ({"a": "from trainyard.repo.upstream.b import B",
          "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainyard.repo.upstream.a import A"},
         ["a", "b"]),
        # a relative import
        ({"a": "from . import b", "b": "from .a import A"}, ["a", "b"]),
    ],
)  # fmt: skip
def test_an_import_circle_inside_a_room_is_found(sources, circle):
    index = {f"trainyard.repo.upstream.{m}": imports_of(src, f"trainyard.repo.upstream.{m}")
             for m, src in sources.items()}  # fmt: skip
    index["trainyard.repo.upstream"] = []
    assert room_cycles(index) == [[f"trainyard.repo.upstream.{m}" for m in circle]]


def test_imports_across_rooms_and_down_make_no_circle():
    index = {
        "trainyard.repo.upstream.a": imports_of("from trainyard.repo.model import m", "trainyard.repo.upstream.a"),
        "trainyard.repo.model.m": imports_of(
            "def f():\n    from trainyard.repo.upstream import a", "trainyard.repo.model.m"
        ),
        "trainyard.repo.upstream.b": imports_of("from trainyard.repo.upstream import a", "trainyard.repo.upstream.b"),
    }
    assert room_cycles(index) == []  # the model -> upstream import is an inverted room, not a circle in a room


def copied_paths(dockerfile: Path) -> set[str]:
    """What a Dockerfile's COPY lines take from the repository (the build context)."""
    paths = set()
    for line in dockerfile.read_text().splitlines():
        m = re.match(r"^COPY\s+(?!--from)(.+)$", line.strip())
        if m:
            *sources, _dest = m.group(1).split()
            paths |= {s.rstrip("/") for s in sources}
    return paths


@pytest.mark.parametrize(("image", "package"), [("webhook/Dockerfile", "webhook"), ("trainer/Dockerfile", "trainer")])
def test_each_image_copies_only_the_floors_it_runs(image, package):
    copied = copied_paths(ROOT / image)
    index: dict[str, list[Import]] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            index[module_name(path)] = read_imports(path)
    entry = {m for m in index if m.split(".")[0] == package} | {"trainyard.cli"}
    needed = {m for m in closure(entry, index) if floor_of(m) is not None}

    def is_copied(module: str) -> bool:
        rel = module.replace(".", "/")
        return any(rel == c.removesuffix(".py") or rel.startswith(c + "/") or f"{rel}/__init__" == c.removesuffix(".py")
                   for c in copied)  # fmt: skip

    missing = sorted(m for m in needed if not is_copied(m))
    assert missing == [], f"{image} does not copy modules the image imports: {missing}"
    other = "trainer" if package == "webhook" else "webhook"
    higher = ("trainyard/repo", "trainyard/cluster", "trainyard/sandbox", other)
    extra = sorted(c for c in copied if c.startswith(higher) or c == "trainyard")
    assert extra == [], f"{image} copies floors it does not run: {extra}"

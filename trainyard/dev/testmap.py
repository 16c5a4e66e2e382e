"""The test map: which test files cover a set of changed files (``trainyard dev tests``).

A test file covers a module when the module lies in its import closure: what it imports, and what
those import, read from the source by :mod:`trainyard.dev.imports` (the floors test's reader), the
imports inside functions too. A test's start is the test file and the ``conftest.py`` files above
it (pytest loads them for it). Two edges that are not import statements but run code all the
same: ``python -m M`` written in a list (a test that runs a module in a subprocess reaches M), and
a module that calls ``importlib.import_module`` reaches every first-party module its string
constants name (the single CLI loads its command groups so).

Everything else is mapped by path: a changed test file runs itself, a changed ``conftest.py`` runs
its folder, files that are not Python follow :data:`trainyard.dev.datarules.DATA_RULES`, a file
inside a package that is not Python is read by that package's modules, and anything else runs
every test (the output says which file caused it).
"""

from __future__ import annotations

import ast
import itertools
import os
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.contract.files import read_bounded
from trainyard.dev.datarules import DATA_RULES, EVERY_TEST, DataRule, rule_for
from trainyard.dev.imports import Import, imports_of, module_name, reach

TESTS = "tests"
SKIPPED_DIRS = {"__pycache__"}
MAX_SOURCE_BYTES = 1024 * 1024  # no module of the repository comes near it; one over it is a mistake


def shown(text: str, limit: int = 200) -> str:
    """A path as it may be printed: a name with control or undecodable characters is quoted, a
    long one cut to ``limit`` characters."""
    cut = text if len(text) <= limit else f"{text[:limit]}..."
    return cut if cut.isprintable() else ascii(cut)


def is_test_file(rel: str) -> bool:
    """pytest's default ``python_files``: test_*.py and *_test.py, under tests/."""
    name = rel.rsplit("/", 1)[-1]
    return (
        rel.startswith(f"{TESTS}/") and name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    )


def _read_source(path: Path, rel: str) -> tuple[str, ast.Module]:
    try:
        data = read_bounded(path, MAX_SOURCE_BYTES, "a Python source")
    except OSError as exc:
        raise UserError(f"{shown(rel)}: cannot be read ({exc.strerror}); the test map reads every source") from None
    why = "the test map reads every import from the source"
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{shown(rel)}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}): {why}; save it as UTF-8"
        ) from None
    try:
        return source, ast.parse(source)
    except SyntaxError as exc:
        where = f"{shown(rel)}:{exc.lineno}" if exc.lineno else shown(rel)
        raise UserError(f"{where}: not valid Python ({exc.msg}): {why}; fix it first") from None
    except ValueError as exc:  # a NUL byte (Python 3.11)
        raise UserError(f"{shown(rel)}: not valid Python ({exc}): {why}; fix it first") from None


def _strings(tree: ast.Module) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _runs(tree: ast.Module) -> set[str]:
    """The modules a source runs by name: ``"-m", "M"`` side by side in a list or tuple."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found |= {b for a, b in itertools.pairwise(items) if a == "-m" and isinstance(b, str)}
    return found


def _imports_by_name(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "import_module"
        for n in ast.walk(tree)
    )


@dataclass
class SourceTree:
    """Every Python source of the packages at ``root`` (the folders with an ``__init__.py``, and
    tests/), read once."""

    root: Path
    index: dict[str, list[Import]] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # module -> its file, relative to root
    strings: dict[str, list[str]] = field(default_factory=dict)  # module -> its string constants
    extra: dict[str, set[str]] = field(default_factory=dict)  # module -> what it runs by name
    tests: list[str] = field(default_factory=list)  # test files, relative to root
    packages: set[str] = field(default_factory=set)  # top-level package folders

    @classmethod
    def load(cls, root: Path) -> SourceTree:
        tree = cls(root)
        tops = sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
        tree.packages = set(tops) | ({TESTS} if (root / TESTS).is_dir() else set())
        named: dict[str, tuple[ast.Module, bool]] = {}
        for top in sorted(tree.packages):
            for path in sorted((root / top).rglob("*.py")):
                if SKIPPED_DIRS & set(path.relative_to(root).parts) or not path.is_file():
                    continue
                rel = path.relative_to(root).as_posix()
                if not path.resolve().is_relative_to(root.resolve()):
                    raise UserError(
                        f"{shown(rel)}: a link out of the repository; the test map reads only its own sources"
                    )
                module = module_name(path, root)
                source, syntax = _read_source(path, rel)
                tree.index[module] = imports_of(source, module, package=path.name == "__init__.py")
                tree.paths[module] = rel
                tree.strings[module] = _strings(syntax)
                named[module] = (syntax, _imports_by_name(syntax))
                if is_test_file(rel):
                    tree.tests.append(rel)
        for module, (syntax, by_name) in named.items():
            runs = {m for r in _runs(syntax) for m in (r, f"{r}.__main__") if m in tree.index}
            if by_name:
                runs |= {s for s in tree.strings[module] if s in tree.index and s != module}
            if runs:
                tree.extra[module] = runs
        return tree

    def module_of(self, rel: str) -> str | None:
        """The module a .py path is (or was, when deleted), None outside the packages."""
        if not rel.endswith(".py") or rel.split("/", 1)[0] not in self.packages:
            return None
        return module_name(self.root / rel, self.root)

    def start_of(self, test: str) -> list[str]:
        """A test file's module and the conftest.py modules pytest loads for it."""
        parts = test.split("/")
        conftests = ["/".join([*parts[:i], "conftest.py"]) for i in range(len(parts))]
        return [module_name(self.root / test, self.root)] + [
            module_name(self.root / c, self.root) for c in conftests if (self.root / c).is_file()
        ]

    @cached_property
    def reached(self) -> dict[str, dict[str, str | None]]:
        """For each test file: every name it reaches, with the module it was reached from."""
        return {t: reach(self.start_of(t), self.index, self.extra) for t in self.tests}

    def chain(self, test: str, name: str) -> list[str]:
        """The modules from the test's start to ``name``, a shortest chain."""
        parents, out = self.reached[test], [name]
        while (up := parents[out[-1]]) is not None:
            out.append(up)
        return out[::-1]

    def tests_under(self, folder: str) -> list[str]:
        return [t for t in self.tests if t.startswith(folder.rstrip("/") + "/")] if folder else list(self.tests)


@dataclass
class Selection:
    """What to run: each test file with the reasons it runs, and what was found on the way."""

    tests: dict[str, list[str]] = field(default_factory=dict)
    everything: list[str] = field(default_factory=list)  # why every test runs (empty: a selection)
    untested: dict[str, str] = field(default_factory=dict)  # changed file -> why no test runs for it

    def add(self, tests: Iterable[str], why: str) -> int:
        n = 0
        for test in tests:
            self.tests.setdefault(test, []).append(why)
            n += 1
        return n


def _targets(tree: SourceTree, rule: DataRule) -> list[str]:
    out: list[str] = []
    for target in rule.tests:
        out += tree.tests_under(target) if target.endswith("/") else [target] if target in tree.tests else []
    return out


def _why_module(tree: SourceTree, test: str, module: str) -> str:
    chain = tree.chain(test, module)
    if chain[0] == module_name(tree.root / test, tree.root):
        chain = chain[1:]  # the test itself; a conftest at the start is kept
    return f"imports {module}" if len(chain) == 1 else f"reaches {module}: " + " -> ".join(chain)


def select(tree: SourceTree, changed: Iterable[str], rules: tuple[DataRule, ...] = DATA_RULES) -> Selection:
    """The test files that cover ``changed`` (paths relative to the repository root)."""
    sel = Selection()
    for rel in changed:
        name = rel.rsplit("/", 1)[-1]
        module = tree.module_of(rel)
        rule = rule_for(rel, rules)
        if rel.startswith(f"{TESTS}/") and name == "conftest.py":
            folder = rel.rsplit("/", 1)[0]
            if not sel.add(tree.tests_under(folder), f"{rel} changed (its folder's conftest)"):
                sel.untested[rel] = "no test file under its folder"
        elif is_test_file(rel):
            if rel in tree.tests:
                sel.add([rel], "changed")
            else:
                sel.untested[rel] = "deleted"
        elif module is not None:
            found = [t for t in tree.tests if module in tree.reached[t]]
            for test in found:
                sel.add([test], _why_module(tree, test, module))
            if not found:
                sel.untested[rel] = "no test file imports it"
        elif rule is not None:
            if rule.tests == EVERY_TEST:
                sel.everything.append(f"{rel}: {rule.what}")
            elif not sel.add(_targets(tree, rule), f"reads {rule.path} ({rule.what})"):
                sel.untested[rel] = f"no test reads it ({rule.what})"
        elif (package := _package_of(tree, rel)) is not None:
            found = [t for t in tree.tests if any(m == package or m.startswith(f"{package}.") for m in tree.reached[t])]
            if not sel.add(found, f"reaches {package}, whose folder holds {rel}"):
                sel.untested[rel] = f"no test file imports {package}"
        else:
            sel.everything.append(f"{rel}: no rule maps it to tests (trainyard/dev/datarules.py)")
    return sel


def _package_of(tree: SourceTree, rel: str) -> str | None:
    """The nearest package whose folder holds ``rel`` (package data), None outside the packages."""
    parts = rel.split("/")[:-1]
    while parts and parts[0] in tree.packages:
        if (module := ".".join(parts)) in tree.index:
            return module
        parts.pop()
    return None


def relative_paths(root: Path, cwd: Path, files: Iterable[str]) -> list[str]:
    """Each FILE as a path relative to ``root``; a folder stands for the files under it. Refuses a
    file outside the repository or one that does not exist, naming it."""
    base = root.resolve()
    out: list[str] = []
    for given in files:
        full = Path(os.path.normpath(cwd.resolve() / given))
        try:
            rel = full.relative_to(base).as_posix()
        except ValueError:
            raise UserError(f"{shown(given)}: outside the repository {shown(str(base))}; name files in it") from None
        if rel == ".":
            raise UserError(
                f"{shown(given)}: the whole repository; name files or folders in it (or none: what changed)"
            )
        try:
            mode = full.stat().st_mode
            inside = [] if not stat.S_ISDIR(mode) else [p for p in sorted(full.rglob("*")) if p.is_file()]
        except (OSError, ValueError) as exc:  # missing, a name too long, a NUL byte, unreadable
            if isinstance(exc, FileNotFoundError | NotADirectoryError):
                raise UserError(
                    f"{shown(given)}: no such file (a deleted file is found from git: give no FILE)"
                ) from None
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UserError(f"{shown(given)}: cannot be read ({why}); name a file of the repository") from None
        if stat.S_ISDIR(mode):
            out += [p.relative_to(base).as_posix() for p in inside if not SKIPPED_DIRS & set(p.relative_to(base).parts)]
        else:
            out.append(rel)
    return list(dict.fromkeys(out))


def unmirrored(tree: SourceTree) -> list[tuple[str, int]]:
    """The modules of the packages (tests/ aside) that have no test file of the same name
    (``test_<name>.py`` anywhere under tests/), each with how many test files cover it."""
    names = {t.rsplit("/", 1)[-1] for t in tree.tests}
    out = []
    for module, rel in sorted(tree.paths.items(), key=lambda item: item[1]):
        stem = rel.rsplit("/", 1)[-1].removesuffix(".py")
        if rel.startswith(f"{TESTS}/") or stem in ("__init__", "__main__") or f"test_{stem}.py" in names:
            continue
        out.append((rel, sum(1 for t in tree.tests if module in tree.reached[t])))
    return out


def _git(cwd: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        raise UserError("git is not installed: name the changed files (trainyard dev tests FILE...)") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git {args[0]} did not answer within 120 s in {shown(str(cwd))}") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UserError(f"git {' '.join(args)}: {err[-1] if err else f'exit {done.returncode}'}")
    return done.stdout.decode("utf-8", "surrogateescape")


def repository_root(cwd: Path) -> Path:
    """The checkout around ``cwd``: its git top level, which must hold tests/."""
    try:
        root = Path(_git(cwd, "rev-parse", "--show-toplevel").strip())
    except UserError:
        where = shown(str(cwd))
        raise UserError(f"{where} is not in a git checkout of trainyard; run it in one or pass --root") from None
    if not (root / TESTS).is_dir():
        raise UserError(f"{shown(str(root))} has no {TESTS}/ folder: not a trainyard checkout (pass --root)")
    return root


def changed_files(root: Path, base: str) -> list[str]:
    """The files changed against ``base``: committed since its merge base with HEAD, uncommitted
    and untracked (not ignored), deleted ones included."""
    if base.startswith("-"):
        raise UserError(f"--base {shown(base)}: a git ref does not start with '-'")
    try:
        merge_base = _git(root, "merge-base", "HEAD", base).strip()
    except UserError as exc:
        raise UserError(f"--base {shown(base)}: no merge base with HEAD ({exc}); name another ref") from None
    diff = _git(root, "diff", "--name-only", "-z", merge_base, "--")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z")
    names = [n for n in (diff + untracked).split("\0") if n]
    return sorted(dict.fromkeys(names))

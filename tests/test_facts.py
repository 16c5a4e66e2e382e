"""Each fact is defined once: two modules that bind a module-level name to the same label or
annotation key, TRAINYARD_*/NCCL_* env name or port drift apart the day one of them changes.

The packages are the ones the project installs (pyproject.toml), read from the source (AST) as
tests/test_floors.py reads their imports. A fact lives in the lowest floor its users share and the
others import it: trainyard/contract/ (floor 0) for one the webhook and the trainer both need.
``make lint`` runs this file; the suite runs it too.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_FIND = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
PACKAGES = tuple(p.rstrip("*") for p in _FIND["include"])

# A key with a DNS-subdomain prefix: the qualified names of labels, annotations and extended
# resources (apimachinery's validation.IsQualifiedName, with the prefix a dotted domain).
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
KEY = re.compile(rf"(?:{_DNS_LABEL}\.)+{_DNS_LABEL}/[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
ENV = re.compile(r"(?:TRAINYARD|NCCL)_[A-Z0-9_]+")
PORT_NAME = re.compile(r"(?:[A-Z0-9_]*_)?PORT")

# Equal values that are two facts, each with why; the modules must match exactly, so a third
# definition is still found.
ALLOWED: dict[str | int, tuple[frozenset[str], str]] = {
    29500: (
        frozenset({"trainyard/repo/upstream/trainjob.py", "trainer/launch.py"}),
        "two upstreams: Kubeflow Trainer's ContainerTrainerPort (emulated field by field) and the "
        "default --master-port of torchrun that launch falls back to; each follows its own",
    ),
    443: (
        frozenset({"trainyard/contract/images.py", "trainyard/cluster/services.py"}),
        "two upstream defaults: the port containerd dials a registry at (HTTPS) and a webhook's "
        "clientConfig.service.port when not given (admissionregistration/v1); each follows its own",
    ),
}


@dataclass(frozen=True)
class Definition:
    path: str  # relative to the repository root
    line: int
    name: str
    value: str | int


def fact_value(name: str, value: object) -> str | int | None:
    """The fact a module-level ``name = value`` defines, None if it is no fact (ports as int)."""
    if isinstance(value, bool):
        return None
    if PORT_NAME.fullmatch(name) and (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
        return int(value)
    if isinstance(value, str) and (KEY.fullmatch(value) or ENV.fullmatch(value)):
        return value
    return None


def definitions(source: str, path: str) -> list[Definition]:
    """Module-level names bound to a fact: ``X = "..."``, ``X: T = ...``, ``X = Y = ...``."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not isinstance(value, ast.Constant):
            continue
        for target in targets:
            if isinstance(target, ast.Name) and (fact := fact_value(target.id, value.value)) is not None:
                out.append(Definition(path, node.lineno, target.id, fact))
    return out


def duplicates(defs: list[Definition], allowed: dict[str | int, tuple[frozenset[str], str]]) -> list[str]:
    """One line per fact that more than one module defines, unless ``allowed`` names those modules."""
    by_value: dict[str | int, list[Definition]] = defaultdict(list)
    for d in defs:
        by_value[d.value].append(d)
    found = []
    for value, where in by_value.items():
        modules = frozenset(d.path for d in where)
        if len(modules) < 2 or (value in allowed and allowed[value][0] == modules):
            continue
        places = ", ".join(f"{d.path}:{d.line} ({d.name})" for d in sorted(where, key=lambda d: (d.path, d.line)))
        found.append(f"{value!r} is defined in {places}: define it once, in the lowest floor that uses it "
                     "(trainyard/contract/ for the webhook and the trainer), and import it")  # fmt: skip
    return found


def tree_definitions() -> list[Definition]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out += definitions(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    return out


def test_each_fact_is_defined_once():
    assert duplicates(tree_definitions(), ALLOWED) == []


def test_each_exception_is_still_a_duplicate():
    """An exception whose duplicate is gone goes too: it would hide the next one."""
    by_value: dict[str | int, set[str]] = defaultdict(set)
    for d in tree_definitions():
        by_value[d.value].add(d.path)
    assert {v: sorted(m) for v, (m, _) in ALLOWED.items() if by_value[v] != m} == {}


def test_the_packages_are_read():
    assert set(PACKAGES) == {"trainyard", "webhook", "trainer"}
    paths = {d.path for d in tree_definitions()}
    assert "trainyard/contract/names.py" in paths and any(p.startswith(("webhook/", "trainer/")) for p in paths)


def found_in(*modules: tuple[str, str]) -> list[str]:
    defs = [d for path, source in modules for d in definitions(source, path)]
    return duplicates(defs, {})


def test_a_key_defined_twice_is_found_naming_both_places():
    found = found_in(("trainyard/contract/names.py", 'X = 1\nFABRIC = "trainyard.dev/fabric"\n'),
                     ("webhook/engine.py", 'LABEL: str = "trainyard.dev/fabric"\n'))  # fmt: skip
    assert len(found) == 1
    assert "trainyard/contract/names.py:2 (FABRIC)" in found[0] and "webhook/engine.py:1 (LABEL)" in found[0]


def test_an_env_name_and_a_port_defined_twice_are_found():
    assert len(found_in(("a.py", 'E = "NCCL_SOCKET_IFNAME"'), ("b.py", 'ENV = "NCCL_SOCKET_IFNAME"'))) == 1
    assert len(found_in(("a.py", 'ENV = "TRAINYARD_FABRIC"'), ("b.py", 'A = B = "TRAINYARD_FABRIC"'))) == 1
    assert len(found_in(("a.py", "METRICS_PORT = 9404"), ("b.py", "PORT: int = 9404"))) == 1
    assert len(found_in(("a.py", 'DEFAULT_PORT = "443"'), ("b.py", "HTTPS_PORT = 443"))) == 1  # a port is a number


def test_what_is_no_duplicate_fact_is_left_alone():
    controls = [
        (("a.py", 'X = "trainyard.dev/fabric"'), ("b.py", "from a import X\nY = X")),  # imported: one definition
        (("a.py", 'X = "trainyard.dev/fabric"\nY = "trainyard.dev/fabric"'),),  # one module
        (("a.py", 'N = "namespace"'), ("b.py", 'M = "namespace"')),  # a word, not a fact's shape
        (("a.py", "MAX_DEPTH = 64"), ("b.py", "MAX_HEADERS = 64")),  # a number that is no port
        (("a.py", 'FLAG = "--port"'), ("b.py", 'OPT = "--port"')),
        (("a.py", "SSL_PORT = True"), ("b.py", "HTTP_PORT = True")),  # a bool is no port
        (("a.py", 'K = ("trainyard.dev/fabric", 1)'), ("b.py", 'L = ["trainyard.dev/fabric"]')),  # tables refer
        (("a.py", 'def f():\n    X = "NCCL_DEBUG"'), ("b.py", 'class C:\n    X = "NCCL_DEBUG"')),  # not module level
        (("a.py", '"""NCCL_DEBUG"""'), ("b.py", '"""NCCL_DEBUG"""')),  # docstrings
        (("a.py", 'URL = "https://example.com/x"'), ("b.py", 'U = "https://example.com/x"')),
        (("a.py", 'P = "bench/results"'), ("b.py", 'Q = "bench/results"')),  # a path: no domain
        (("a.py", 'E = "PET_MASTER_PORT"'), ("b.py", 'F = "PET_MASTER_PORT"')),  # not ours to keep once
    ]
    for modules in controls:
        assert found_in(*modules) == [], modules


def test_an_exception_covers_only_the_modules_it_names():
    defs = definitions("TRAINER_PORT = 29500", "x.py") + definitions("DEFAULT_PORT = 29500", "y.py")
    allowed = {29500: (frozenset({"x.py", "y.py"}), "why")}
    assert duplicates(defs, allowed) == []
    assert len(duplicates([*defs, *definitions("PORT = 29500", "z.py")], allowed)) == 1


_labels = st.from_regex(rf"\A{_DNS_LABEL}\Z", fullmatch=True).filter(lambda s: len(s) <= 20)
keys = st.builds(lambda parts, name: ".".join(parts) + "/" + name, st.lists(_labels, min_size=2, max_size=4),
                 st.from_regex(r"\A[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?\Z", fullmatch=True))  # fmt: skip


@given(keys, st.from_regex(r"\A[A-Z][A-Z0-9_]{0,20}\Z", fullmatch=True))
def test_any_qualified_key_defined_twice_is_found(key, name):
    assert len(found_in(("a.py", f"{name} = {key!r}"), ("b.py", f"OTHER = {key!r}"))) == 1
    assert found_in(("a.py", f"{name} = {key!r}"), ("b.py", f"OTHER = {key + '/x'!r}")) == []

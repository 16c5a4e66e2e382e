"""The test map on this repository, and the honesty of its table of data files
(trainyard/dev/datarules.py): every test a rule names reads the path, and every test whose own
source names a path is listed under the rule for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.dev.datarules import DATA_RULES, EVERY_TEST, DataRule, rule_for
from trainyard.dev.testmap import SourceTree, select

ROOT = Path(__file__).resolve().parents[3]

# Tests that write a rule's path as an example, not to read the file there.
NAMES_BUT_DOES_NOT_READ = {
    "tests/test_codeowners.py": "paths as CODEOWNERS patterns match them",
    "tests/trainyard/dev/test_datarules.py": "paths given to the test map",
    "tests/trainyard/dev/test_testmap.py": "the paths of a repository of its own",
}


@pytest.fixture(scope="module")
def tree() -> SourceTree:
    return SourceTree.load(ROOT)


def names(path: str, text: str, *, loosely: bool) -> bool:
    """Whether a string of a source names ``path``: the path itself or one below it; ``loosely``:
    also its last part alone (``ROOT / "tests" / "corpus"`` names tests/corpus/)."""
    bare = path.rstrip("/")
    return text == bare or text.startswith(f"{bare}/") or (loosely and text == bare.rsplit("/", 1)[-1])


def reads(tree: SourceTree, test: str, path: str) -> bool:
    """Whether a string of the test, its conftests or a module it reaches names ``path``."""
    return any(names(path, s, loosely=True) for m in tree.reached[test] if m in tree.index for s in tree.strings[m])


@pytest.mark.parametrize("rule", DATA_RULES, ids=lambda r: r.path)
def test_each_rule_names_what_exists_and_tests_that_read_it(tree, rule: DataRule):
    assert (ROOT / rule.path).exists(), f"{rule.path}: no such path in the repository"
    for target in rule.tests:
        tests = tree.tests_under(target) if target.endswith("/") else [target]
        assert tests and all(t in tree.tests for t in tests), f"{rule.path}: {target} is not a test file or folder"
        if rule.tests != EVERY_TEST:
            assert any(reads(tree, t, rule.path) for t in tests), f"{rule.path}: nothing under {target} reads it"


def test_every_test_that_names_a_path_is_listed_under_its_rule(tree):
    missing = []
    for test in tree.tests:
        if test in NAMES_BUT_DOES_NOT_READ:
            continue
        module = next(m for m, rel in tree.paths.items() if rel == test)
        for text in tree.strings[module]:
            rule = rule_for(text)
            if rule is None or not names(rule.path, text, loosely=False) or rule.tests == EVERY_TEST:
                continue
            listed = any(test == t or (t.endswith("/") and test.startswith(t)) for t in rule.tests)
            if not listed:
                missing.append(f"{test} names {text!r}: add it to the rule {rule.path}")
    assert sorted(set(missing)) == []


def test_a_contract_module_selects_its_test_and_the_webhooks(tree):
    sel = select(tree, ["trainyard/contract/quantity.py"])
    assert sel.tests["tests/contract/test_quantity.py"] == ["imports trainyard.contract.quantity"]
    assert sel.tests["tests/webhook/test_engine.py"] == [
        "reaches trainyard.contract.quantity: webhook.engine -> trainyard.contract.quantity"
    ]
    # the other contract tests, and the repository-wide checks, never import it
    for test in ("tests/contract/test_images.py", "tests/contract/test_httphead.py", "tests/test_makefile.py"):
        assert test not in sel.tests
    # the demo's pods are sized with it: the e2e tier reaches it
    assert sel.tests["tests/e2e/test_localpods.py"] == [
        "reaches trainyard.contract.quantity: trainyard.sandbox.localpods -> trainyard.contract.quantity"
    ]
    assert not sel.everything and not sel.untested


def test_the_import_reader_selects_the_floors_test(tree):
    sel = select(tree, ["trainyard/dev/imports.py"])
    assert sel.tests["tests/test_floors.py"] == ["imports trainyard.dev.imports"]


@pytest.mark.parametrize(
    ("changed", "test"),
    [
        ("Makefile", "tests/test_makefile.py"),
        ("policies/tcp.yaml", "tests/webhook/test_engine.py"),
        (
            "tests/trainer/fixtures/nccl/releases/2.11.4-socket-NCCL_NET=Socket.log",
            "tests/trainer/test_nccl_releases.py",
        ),
        ("webhook/Dockerfile", "tests/test_floors.py"),
    ],
)
def test_data_selects_the_tests_that_read_it(tree, changed, test):
    assert (ROOT / changed).is_file()
    sel = select(tree, [changed])
    assert test in sel.tests and not sel.everything


def test_the_honesty_check_tells_a_reader_from_a_test_that_is_not(tree):
    assert reads(tree, "tests/test_makefile.py", "Makefile")
    assert not reads(tree, "tests/test_makefile.py", "policies/")
    assert reads(tree, "tests/trainyard/cluster/test_verdict.py", "tests/corpus/")
    assert not reads(tree, "tests/contract/test_quantity.py", "tests/corpus/")

"""A key written twice in a mapping is refused by rawyaml.load, naming both lines; what readers agree
on (anchors, aliases, merges that override nothing) still loads. The real kustomize shows why: it
refuses the duplicate in a resource and takes the last one in a kustomization."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.repo.model import kustomize, rawyaml

TWICE = {
    "block": ("a: 1\nb: 2\na: 3\n", 3, "lines 1 and 3"),
    "flow": ("x: {a: 1, b: 2, a: 3}\n", 1, "lines 1 and 1"),
    "quoted and plain": ('a: 1\n"a": 2\n', 2, "lines 1 and 2"),
    "nested": ("spec:\n  template:\n    metadata:\n      name: x\n      name: y\n", 5, "lines 4 and 5"),
    "in a list": ("- op: add\n  path: /a\n  path: /b\n", 3, "lines 2 and 3"),
    "in a second document": ("a: 1\n---\nb: 1\nb: 2\n", 4, "lines 3 and 4"),
    "two merge keys": ("d: &d {x: 1}\ne: &e {y: 1}\nm:\n  <<: *d\n  <<: *e\n", 5, "merge key '<<'"),
    "in a flow list": ("- [{k: 1, k: 2}]\n", 1, "lines 1 and 1"),
}


@pytest.mark.parametrize("case", TWICE)
def test_a_key_written_twice_is_refused_with_both_lines(case):
    text, line, says = TWICE[case]
    with pytest.raises(rawyaml.YamlRefused) as err:
        rawyaml.load(text)
    assert err.value.line == line
    assert says in str(err.value) and "written twice" in str(err.value)


def test_a_key_that_is_a_mapping_is_refused():
    with pytest.raises(rawyaml.YamlRefused, match="must be a plain value"):
        rawyaml.load("? {a: 1}\n: x\n")


FINE = {
    "same key in two mappings": "a: {k: 1}\nb: {k: 2}\n",
    "anchors and aliases": "a: &x {k: 1, l: [1, 2]}\nb: *x\nc: [*x, *x]\n",
    "a merge that overrides nothing": "d: &d {x: 1, y: 2}\nm: {<<: *d, z: 3}\n",
    "a list of merges": "d: &d {x: 1}\ne: &e {y: 1}\nm: {<<: [*d, *e], z: 3}\n",
    "the same key in separate documents": "a: 1\n---\na: 2\n",
}


@pytest.mark.parametrize("case", FINE)
def test_what_every_reader_reads_alike_still_loads(case):
    docs = rawyaml.load(FINE[case], merge_overrides=False)
    assert docs and [rawyaml.to_python(d) for d in docs] == list(yaml.safe_load_all(FINE[case]))


OVERRIDES = {
    "own key before the merge": ("d: &d {x: 1}\nm:\n  x: 2\n  <<: *d\n", 4, "at line 3 and at line 1, merged in"),
    "own key after the merge": ("d: &d {x: 1}\nm:\n  <<: *d\n  x: 2\n", 3, "at line 4 and at line 1, merged in"),
    "two merged mappings": ("d: &d {x: 1}\ne: &e {x: 2}\nm: {<<: [*d, *e]}\n", 3, "at line 1 and at line 2, merged"),
}  # fmt: skip


@pytest.mark.parametrize("case", OVERRIDES)
def test_a_key_given_directly_and_through_a_merge_is_refused_where_readers_differ(case):
    text, line, says = OVERRIDES[case]
    assert rawyaml.load(text)  # the YAML rule is clear: the mapping's own key (or the first merged) wins
    with pytest.raises(rawyaml.YamlRefused) as err:
        rawyaml.load(text, merge_overrides=False)
    assert err.value.line == line
    assert says in str(err.value) and "go-yaml v2" in str(err.value)


_KEYS = st.sampled_from(["a", "b", "name", "path", "'a'", '"name"', "<<x", "c"])


@st.composite
def mappings(draw) -> tuple[str, bool]:
    """A flow or block mapping of scalar keys (some quoted), and whether a key repeats."""
    keys = draw(st.lists(_KEYS, min_size=1, max_size=6))
    texts = [k.strip("'\"") for k in keys]
    flow = draw(st.booleans())
    pairs = [f"{k}: {i}" for i, k in enumerate(keys)]
    text = "m: {" + ", ".join(pairs) + "}\n" if flow else "m:\n" + "".join(f"  {p}\n" for p in pairs)
    return text, len(set(texts)) != len(texts)


@given(mappings())
@settings(max_examples=200, deadline=None)
def test_refused_exactly_when_a_key_repeats(case):
    text, repeats = case
    if repeats:
        with pytest.raises(rawyaml.YamlRefused, match="written twice"):
            rawyaml.load(text)
    else:
        assert rawyaml.to_python(rawyaml.load(text)[0]) == yaml.safe_load(text)


def _build(tmp_path, kustomization: str, resource: str) -> subprocess.CompletedProcess:
    (tmp_path / "kustomization.yaml").write_text(kustomization)
    (tmp_path / "cm.yaml").write_text(resource)
    return subprocess.run([*kustomize.command(), str(tmp_path)], capture_output=True, text=True, check=False)


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"


def test_kustomize_refuses_a_key_twice_in_a_resource(tmp_path):
    proc = _build(tmp_path, "resources: [cm.yaml]\n", CM + "data:\n  a: '1'\n  a: '2'\n")
    assert proc.returncode != 0 and 'mapping key "a" already defined' in proc.stderr


def test_kustomize_takes_the_last_key_of_a_kustomization_and_the_later_merge(tmp_path):
    """Why the kustomization is read with the stricter rule: go-yaml v2 keeps the last of two keys, and
    a merged key written after the mapping's own key wins over it (PyYAML: the own key)."""
    proc = _build(tmp_path, "resources: [cm.yaml]\nnamePrefix: a-\nnamePrefix: b-\n", CM)
    assert proc.returncode == 0 and "name: b-x" in proc.stdout, proc.stderr
    proc = _build(tmp_path, "resources: [cm.yaml]\nnamePrefix: own-\n<<: {namePrefix: merged-}\n", CM)
    assert proc.returncode == 0 and "name: merged-x" in proc.stdout, proc.stderr
    assert yaml.safe_load("namePrefix: own-\n<<: {namePrefix: merged-}\n") == {"namePrefix": "own-"}

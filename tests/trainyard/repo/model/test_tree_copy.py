"""tree_copy (trainyard/repo/model/rendered.py): the copy the offline controllers make of rendered objects."""

from __future__ import annotations

import copy
import datetime

import yaml
from hypothesis import given
from hypothesis import strategies as st

from trainyard.repo.model.rendered import tree_copy

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)


@given(JSON)
def test_a_copy_equals_the_original_and_shares_no_container_with_it(tree):
    copied = tree_copy(tree)
    assert copied == tree == copy.deepcopy(tree)
    originals = {id(n) for n in _containers(tree)}
    assert not originals & {id(n) for n in _containers(copied)}


def _containers(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _containers(v)
    elif isinstance(node, list):
        yield node
        for v in node:
            yield from _containers(v)


def test_an_alias_stays_one_object_so_a_billion_laughs_stays_small():
    text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
    )
    doc = yaml.safe_load(text)  # 10**9 strings once expanded, a few dozen lists as parsed
    copied = tree_copy(doc)
    assert copied["i"][0] is copied["i"][9] and copied["b"][0] is copied["a"] and copied["a"] is not doc["a"]


def test_other_values_are_copied_as_copy_deepcopy_copies_them():
    when = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)
    tree = {"at": when, "pair": (1, [2]), "set": {3}}
    copied = tree_copy(tree)
    assert copied == tree and copied["pair"][1] is not tree["pair"][1] and copied["set"] is not tree["set"]

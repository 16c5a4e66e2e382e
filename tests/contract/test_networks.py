"""The Multus networks annotation: both forms, the interface each attachment gets, the clashes
Multus would fail on at run time, and bounded, linear-time parsing."""

from __future__ import annotations

import contextlib
import time

import pytest

from trainyard.contract import networks


def test_plain_and_json_round_trip():
    plain = networks.parse(" storage , ml/roce-network@net5")
    assert [(a.name, a.namespace, a.interface) for a in plain.attachments] == [
        ("storage", None, None),
        ("roce-network", "ml", "net5"),
    ]
    assert plain.interfaces() == ["net1", "net5"]
    assert plain.render() == "storage, ml/roce-network@net5"
    js = networks.parse('[{"name":"a","interface":"x0","ips":["10.0.0.1"]},{"name":"b"}]')
    assert js.json_form and js.interfaces() == ["x0", "net2"]
    assert networks.parse(js.render()).attachments == js.attachments


def test_the_older_interface_request_key_counts_when_interface_is_empty():
    # multus k8sclient.go: "compatibility pre v3.2": interfaceRequest when interface is empty
    js = networks.parse('[{"name":"a","interfaceRequest":"fab0"},{"name":"b","interface":"x1","interfaceRequest":"y"}]')
    assert js.interfaces() == ["fab0", "x1"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a/b/c", "more than one '/'"),
        ("Net", "is not a DNS-1123 label"),
        ("a@b@c", "more than one '@'"),
        ("a@this-name-is-too-long", "at most 15 bytes"),
        ("a@x y", "without '/' or spaces"),
        ("UPPER/a", "namespace 'UPPER'"),
        ("[{]", "not valid JSON"),
        ('{"name": "a"}', "must be a list"),
        ("[1]", "item 0 must be an object"),
        ('[{"name": 3}]', "name 3 is not a DNS-1123 label"),
        ('[{"name": "a", "interface": 5}]', "'interface' must be a string"),
        ('[{"name": "a", "interface": "a/b"}]', "without '/' or spaces"),
        ('[{"name": "a", "interfaceRequest": "' + "x" * 16 + '"}]', "at most 15 bytes"),
        ('[{"name": "a", "namespace": "Bad_NS"}]', "namespace 'Bad_NS'"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        (",".join(f"n{i}" for i in range(300)), "300 attachments; a pod may ask for at most 256"),
        ("n" * (300 * 1024), "more than all of a pod's annotations may hold"),
        (5, "must be a string"),
    ],
)
def test_errors_say_what_is_wrong(value, message):
    with pytest.raises(networks.NetworksError, match=message.replace("(", r"\(").replace("[", r"\[")):
        networks.parse(value)


def test_empty():
    assert networks.parse(None).attachments == [] and networks.parse("  ").attachments == []


@pytest.mark.parametrize(
    ("value", "clashes"),
    [
        ("a, b", {}),
        ("a@eth0", {0: "interface eth0 already exists in every pod"}),
        ("a, b@lo", {1: "interface lo already exists in every pod"}),
        (
            "b@net2, c",  # c gets net2 by position: Multus would fail the pod at run time
            {0: "interface net2 is also the interface of c", 1: "interface net2 is also the interface of b@net2"},
        ),
        ('[{"name": "a", "interface": "net2"}, {"name": "b"}]', {0: "also the interface of b", 1: "also"}),
        ("a@x, b@y, c@x", {0: "also the interface of c@x", 2: "also the interface of a@x"}),
    ],
)
def test_clashes_name_the_attachments(value, clashes):
    found = networks.parse(value).clashes()
    assert sorted(found) == sorted(clashes)
    for i, why in clashes.items():
        assert why in found[i]


def test_the_largest_annotation_parses_in_linear_time():
    big = ", ".join(f"ns{i}/net-{i}@if{i}" for i in range(256))
    wide = "n" * (256 * 1024 - 1)
    for value in (big, wide, "[" + ",".join(['{"name": "a"}'] * 256) + "]", "[" * (256 * 1024)):
        start = time.perf_counter()
        with contextlib.suppress(networks.NetworksError):
            networks.parse(value)
        assert time.perf_counter() - start < 1.0  # a few milliseconds here

"""Quantities, image references and the Multus networks annotation."""

from __future__ import annotations

from decimal import Decimal

import pytest

from trainyard.contract import networks
from trainyard.contract.images import parse_image
from trainyard.contract.quantity import QuantityError, format_bytes, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8Gi", 8 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("200G", 200 * 10**9),
        ("100m", Decimal("0.1")),
        ("1e3", 1000),
        ("2E-1", Decimal("0.2")),
        ("4", 4),
        (8, 8),
        (".5", Decimal("0.5")),
    ],
)
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["8GB", "Gi", "", "1.2.3", "8 Gi", "-", True, None, [1]])
def test_bad_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_format_bytes():
    assert [format_bytes(n) for n in (8 * 2**30, 1536 * 2**20, 1000, 2**40)] == ["8Gi", "1536Mi", "1000", "1Ti"]


@pytest.mark.parametrize(
    ("ref", "repository", "tag", "digest"),
    [
        ("busybox", "docker.io/library/busybox", None, None),
        ("busybox:1.36", "docker.io/library/busybox", "1.36", None),
        ("library/busybox", "docker.io/library/busybox", None, None),
        ("index.docker.io/library/busybox", "docker.io/library/busybox", None, None),
        ("localhost/ml/trainer:1", "localhost/ml/trainer", "1", None),
        ("localhost:5000/trainer", "localhost:5000/trainer", None, None),
        (
            "registry.example.com/ml/trainer@sha256:" + "f" * 64,
            "registry.example.com/ml/trainer",
            None,
            "sha256:" + "f" * 64,
        ),
        ("nvcr.io/nvidia/pytorch:24.09-py3", "nvcr.io/nvidia/pytorch", "24.09-py3", None),
    ],
)
def test_image_references(ref, repository, tag, digest):
    parsed = parse_image(ref)
    assert (parsed.repository, parsed.tag, parsed.digest) == (repository, tag, digest)


@pytest.mark.parametrize("ref", ["", "upper/Case", "a//b", "a:b:c", "x@sha256:short", " trainer", "trainer:"])
def test_invalid_image_references(ref):
    assert parse_image(ref) is None


def test_networks_plain_and_json_round_trip():
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


@pytest.mark.parametrize(
    "value",
    ["a/b/c", "Net", "a@b@c", "a@this-name-is-too-long", "[{]", '{"name": "a"}', "[1]", '[{"name": 3}]', 5],
)
def test_networks_errors(value):
    with pytest.raises(networks.NetworksError):
        networks.parse(value)


def test_networks_empty():
    assert networks.parse(None).attachments == [] and networks.parse("  ").attachments == []

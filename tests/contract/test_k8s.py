"""Kubernetes name patterns and ``$(VAR)`` expansion, as apimachinery and the kubelet apply them."""

from __future__ import annotations

import time

import pytest

from trainyard.contract.k8s import expand, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name

ENV = {"MASTER_ADDR": "job-master-0", "PORT": "23456", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("--rdzv_endpoint=$(MASTER_ADDR):$(PORT)", "--rdzv_endpoint=job-master-0:23456"),
        ("$(UNKNOWN)", "$(UNKNOWN)"),  # an undefined variable stays as written
        ("$$(PORT)", "$(PORT)"),  # $$ escapes: the literal $(PORT), not its value
        ("$$$(PORT)", "$23456"),
        ("$$", "$"),
        ("a$", "a$"),  # a last $ is kept
        ("$x$(EMPTY)y", "$xy"),  # $ before anything else is kept; an empty value is substituted
        ("$(PORT", "$(PORT"),  # unclosed: kept
        ("$(a$$", "$(a$"),  # unclosed, and scanning goes on: the later $$ is still an escape
        ("$()", "$()"),  # the empty name is undefined
        ("$(MASTER_ADDR)$(PORT)", "job-master-0" + "23456"),
    ],
)
def test_expand_follows_the_kubelet(text, expanded):
    assert expand(text, ENV) == expanded


@pytest.mark.parametrize("text", ["$(" * 50_000, "$" * 100_000, "$(" + "a" * 100_000, "$$(" * 30_000 + ")"])
def test_expand_is_linear_on_adversarial_text(text):
    t0 = time.perf_counter()
    expand(text, ENV)
    assert time.perf_counter() - t0 < 2.0  # about 20 ms here; 100x headroom for a loaded machine


@pytest.mark.parametrize(
    ("value", "label", "subdomain", "dns1035"),
    [
        ("trainer", True, True, True),
        ("a" * 63, True, True, True),
        ("a" * 64, False, True, False),
        ("0abc", True, True, False),  # DNS-1035 starts with a letter
        ("a.b", False, True, False),
        ("A", False, False, False),
        ("a-", False, False, False),
        ("", False, False, False),
        ("a." * 126 + "a", False, True, False),  # 253 characters: the longest subdomain
        ("a." * 126 + "ab", False, False, False),  # 254
        (".".join(["a" * 63] * 3) + ".a", False, True, False),
    ],
)
def test_name_patterns(value, label, subdomain, dns1035):
    assert is_dns1123_label(value) is label
    assert is_dns1123_subdomain(value) is subdomain
    assert is_dns1035_label(value) is dns1035


def test_name_patterns_refuse_other_types():
    assert not is_dns1123_label(None) and not is_dns1123_subdomain(5) and not is_dns1035_label(["a"])


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("nvidia.com/gpu", True),
        ("memory", True),
        ("rdma/rdma_shared_device_a", True),
        ("kubernetes.io/hostname", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("nvidia.com/", False),
        ("/gpu", False),
        ("Nvidia.com/gpu", False),  # the prefix is a DNS subdomain: lower case
        ("nvidia.com/-gpu", False),
        ("a/b/c", False),
        ("", False),
        (None, False),
    ],
)
def test_qualified_names(name, ok):
    assert is_qualified_name(name) is ok

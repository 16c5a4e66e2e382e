"""The text kube-apiserver (a Go client's types) writes back for a quantity, against
``trainyard.contract.quantity.canonical``: what Kueue v0.19.2 does to a TrainJob's quantities
when it writes the TrainJob back (trainyard/repo/validate/skew.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.test_quantity import WRITTEN_BACK
from trainyard.contract.quantity import QuantityError, canonical, parse_quantity

pytestmark = pytest.mark.cluster

NAMESPACE = "default"


@pytest.fixture(scope="module")
def kube(clusters):
    k = clusters.kube("dev")
    yield k
    k.close()


def _written_back(kube, text: object) -> str:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "quantity", "namespace": NAMESPACE},
        "spec": {"hard": {"requests.cpu": text}},
    }
    return kube.create(quota, dry_run=True)["spec"]["hard"]["requests.cpu"]


def test_the_table_is_kube_apiservers(kube):
    for text, written_back in WRITTEN_BACK:
        if parse_quantity(text) >= 0:  # a quota refuses a negative value
            assert _written_back(kube, text) == written_back, text


quantities = st.builds(
    lambda whole, fraction, suffix: f"{whole}{fraction}{suffix}",
    st.integers(0, 99999).map(str),
    st.sampled_from(["", ".", ".5", ".25", ".001", ".0001"]),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2", "E", "u", "n"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=quantities)
def test_any_quantity_comes_back_as_canonical_says(kube, text):
    try:
        expected = canonical(text)
    except QuantityError:
        return
    assert _written_back(kube, text) == expected

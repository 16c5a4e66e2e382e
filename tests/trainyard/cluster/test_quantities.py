"""The text kube-apiserver (a Go client's types) writes back for a quantity, against
``trainyard.contract.quantity.round_trip``: what Kueue v0.19.2 does to a TrainJob's quantities
when it writes the TrainJob back (trainyard/repo/validate/skew.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.test_quantity import WRITTEN_BACK
from trainyard.contract.quantity import QuantityError, parse_quantity, round_trip

pytestmark = pytest.mark.cluster

NAMESPACE = "default"


@pytest.fixture(scope="module")
def kube(clusters):
    k = clusters.kube("dev")
    k.wait_service_account(NAMESPACE)  # a pod needs its namespace's default ServiceAccount
    yield k
    k.close()


def _written_back(kube, text: object) -> str:
    """An emptyDir's sizeLimit: a Quantity kube-apiserver decodes and encodes and does not default
    (a ResourceList, as in a quota, is rounded up to milli units: SetDefaults_ResourceList)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "quantity", "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "c", "image": "registry.example.com/quantity:1"}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": text}}],
        },
    }
    return kube.create(pod, dry_run=True)["spec"]["volumes"][0]["emptyDir"]["sizeLimit"]


def test_the_table_is_kube_apiservers(kube):
    for text, written_back in WRITTEN_BACK:
        if parse_quantity(text) > 0:  # a size limit must be above 0
            assert _written_back(kube, text) == written_back, text


quantities = st.builds(
    lambda sign, whole, fraction, suffix: f"{sign}{whole}{fraction}{suffix}",
    st.sampled_from(["", "+", "0", "00"]),
    st.integers(0, 99999).map(str),
    st.sampled_from(["", ".", ".5", ".25", ".001", ".0001"]),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2", "E", "u", "n"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=quantities)
def test_any_quantity_comes_back_as_round_trip_says(kube, text):
    try:
        expected = round_trip(text)
    except QuantityError:
        return
    if parse_quantity(text) <= 0:  # a size limit must be above 0
        return
    assert _written_back(kube, text) == expected

"""Which build targets a name asks for (``trainyard cluster build NAME...``, make's kube-demo)."""

from __future__ import annotations

import pytest

from trainyard.cluster import components
from trainyard.contract.errors import UserError


def test_no_names_is_every_target() -> None:
    assert components.targets_of([]) == list(components.TARGETS)


def test_a_component_builds_its_target_once_in_the_targets_order() -> None:
    assert components.targets_of(["kueue", "kube-apiserver", "kube", "kubectl"]) == ["kube", "controllers"]
    assert components.targets_of(["argocd-repo-server"]) == ["argocd"]


@pytest.mark.parametrize("name", ["nope", "", "KUBE", "kube ", "../kube", "kube\x00"])
def test_an_unknown_name_is_refused_with_the_targets(name: str) -> None:
    with pytest.raises(UserError) as refused:
        components.targets_of(["kube", name])
    message = str(refused.value)
    assert repr(name) in message and "controllers (kueue jobset" in message

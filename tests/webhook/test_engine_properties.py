"""Properties of the engine over generated pods (hypothesis).

For every pod: the patch applies (RFC 6902, jsonpatch), the result passes kubernetes-validate
strict for 1.30, a second pass is empty, containers (and init containers) that are not trainers
are unchanged, no duplicate env name, volume or mount path is introduced, the fabric interface
NCCL is told to use is the one Multus will give the fabric attachment, and no two attachments get
one interface (a pod whose own attachments clash is denied, naming them).
"""

from __future__ import annotations

import copy
from collections import Counter

import kubernetes_validate
from hypothesis import HealthCheck, given, settings

from tests.webhook.conftest import apply
from tests.webhook.strategies import pods
from trainyard.contract import networks
from webhook.engine import MutationError, admit

PROFILE_DEFAULT = "roce"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(pod=pods())
def test_mutation_properties(policies, pod):
    original = copy.deepcopy(pod)
    try:
        decision = admit(pod, policies, PROFILE_DEFAULT, "ml")
    except MutationError as exc:
        assert pod == original, "the engine modified its input"
        assert "Multus would fail the pod's network setup" in str(exc)
        assert networks.parse(pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]).clashes()
        return
    assert pod == original, "the engine modified its input"
    if decision.action != "mutate":
        assert decision.action == "skip"
        return
    mutation = decision.mutation
    out = apply(pod, mutation.ops)
    kubernetes_validate.validate(out, "1.30", strict=True)

    again = admit(out, policies, PROFILE_DEFAULT, "ml")
    assert again.action == "mutate" and again.mutation.ops == [], again.mutation.ops

    profile = decision.profile
    for group in ("containers", "initContainers"):  # init containers running a trainer image too
        before_all, after_all = pod["spec"].get(group) or [], out["spec"].get(group) or []
        for before, after in zip(before_all, after_all, strict=True):
            if not profile.is_trainer_image(before["image"]):
                assert before == after
                continue
            before_names = Counter(e["name"] for e in before.get("env") or [])
            after_names = Counter(e["name"] for e in after["env"])
            assert all(n <= max(before_names[name], 1) for name, n in after_names.items())
            ifnames = {e.get("value") for e in after["env"] if e["name"] == "NCCL_SOCKET_IFNAME"}
            assert {v.lstrip("=") for v in ifnames} == {mutation.interface}
            paths = [m["mountPath"].rstrip("/") for m in after["volumeMounts"]]
            assert "/dev/shm" in paths and Counter(paths)["/dev/shm"] == 1
    volume_names = [v["name"] for v in out["spec"]["volumes"]]
    assert len(volume_names) == len(set(volume_names))

    attached = networks.parse(out["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
    interfaces = attached.interfaces()
    assert attached.clashes() == {}
    assert interfaces.count(mutation.interface) == 1
    fabric = interfaces.index(mutation.interface)
    assert attached.attachments[fabric].name == profile.spec.networks[0].name

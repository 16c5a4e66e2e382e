"""The ValidatingAdmissionPolicy's CEL, evaluated with cel-python, and the webhook's
matchConditions: fail-open webhook, fail-closed check of the final pod."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from trainyard.repo import cluster_facts, training_operator, vap
from webhook.engine import admit
from webhook.policy import load_policies


@pytest.fixture(scope="module")
def dev(report):
    facts = cluster_facts.collect(report.renders["dev"].resources())
    job = next(r.doc for r in report.renders["dev"].resources() if training_operator.is_job(r.doc))
    return facts, training_operator.expand_job(job)


@pytest.fixture(scope="module")
def policies(repo):
    return load_policies(repo.root / "policies")


def _mutated(pod, policies, profile="tcp"):
    decision = admit(copy.deepcopy(pod), policies, profile, "ml-training")
    assert decision.action == "mutate"
    return jsonpatch.apply_patch(pod, decision.mutation.ops)


def test_every_expression_compiles(dev):
    facts, _ = dev
    assert vap.compile_policy(facts.policy.doc) == []


def test_unmutated_trainer_pods_are_rejected_saying_the_webhook_did_not_run(dev):
    facts, pods = dev
    for pod in pods:
        verdict = vap.check(pod, facts.params.doc, facts.policy.doc)
        assert verdict.matched
        assert len(verdict.failures) == 3
        assert all("the trainyard webhook did not run" in m for m in verdict.failures)
        assert any("fabric network training-network" in m for m in verdict.failures)
        assert any("container pytorch has no /dev/shm mount" in m for m in verdict.failures)
        assert any("NCCL_SOCKET_IFNAME" in m for m in verdict.failures)
        assert all(pod["metadata"]["name"] in m for m in verdict.failures)


def test_mutated_pods_are_admitted(dev, policies):
    facts, pods = dev
    for pod in pods:
        assert vap.evaluate(_mutated(pod, policies), facts.params.doc, facts.policy.doc) == []


def test_each_missing_piece_is_caught(dev, policies):
    facts, pods = dev
    good = _mutated(pods[0], policies)
    no_net = copy.deepcopy(good)
    no_net["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "other-network"
    assert [m for m in vap.evaluate(no_net, facts.params.doc, facts.policy.doc) if "fabric network" in m]
    no_shm = copy.deepcopy(good)
    no_shm["spec"]["containers"][0]["volumeMounts"] = [
        m for m in no_shm["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] != "/dev/shm"
    ]
    assert [m for m in vap.evaluate(no_shm, facts.params.doc, facts.policy.doc) if "/dev/shm" in m]
    no_ifname = copy.deepcopy(good)
    no_ifname["spec"]["containers"][0]["env"] = [
        e for e in no_ifname["spec"]["containers"][0]["env"] if e["name"] != "NCCL_SOCKET_IFNAME"
    ]
    assert [m for m in vap.evaluate(no_ifname, facts.params.doc, facts.policy.doc) if "NCCL_SOCKET_IFNAME" in m]


@pytest.mark.parametrize(
    "networks",
    [
        "training-network",
        "ml-training/training-network",
        "storage, training-network@net2",
        '[{"name": "training-network", "interface": "net1"}]',
    ],
)
def test_both_forms_of_the_networks_annotation(dev, policies, networks):
    facts, pods = dev
    pod = _mutated(pods[0], policies)
    pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = networks
    assert vap.evaluate(pod, facts.params.doc, facts.policy.doc) == []


def test_a_similar_network_name_is_not_the_fabric(dev, policies):
    facts, pods = dev
    pod = _mutated(pods[0], policies)
    pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "training-network-2, xtraining-network"
    assert vap.evaluate(pod, facts.params.doc, facts.policy.doc)


def test_policy_does_not_apply_to_other_pods(dev):
    facts, pods = dev
    plain = copy.deepcopy(pods[0])
    plain["spec"]["containers"][0]["image"] = "registry.example.com/ml/trainer-evil:1.0"
    assert not vap.check(plain, facts.params.doc, facts.policy.doc).matched
    opted_out = copy.deepcopy(pods[0])
    opted_out["metadata"]["annotations"] = {"trainyard.dev/inject": "false"}
    assert not vap.check(opted_out, facts.params.doc, facts.policy.doc).matched
    mirror = copy.deepcopy(pods[0])
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    assert not vap.check(mirror, facts.params.doc, facts.policy.doc).matched


def test_a_fabric_the_cluster_does_not_offer(dev, policies):
    facts, pods = dev
    pod = copy.deepcopy(pods[0])
    pod["metadata"]["labels"]["trainyard.dev/fabric"] = "roce"
    mutated = _mutated(pod, policies)  # the webhook applies roce...
    failures = vap.evaluate(mutated, facts.params.doc, facts.policy.doc)
    assert any("fabric roce is not offered on this cluster" in m for m in failures)  # ...the dev cluster refuses


def test_missing_parameters_deny(dev):
    facts, pods = dev
    failures = vap.evaluate(pods[0], None, facts.policy.doc)
    assert failures and "parameterNotFoundAction: Deny" in failures[0]


def test_default_policy_is_the_repository_file(dev):
    facts, pods = dev
    assert vap.load_policy()["spec"] == facts.policy.doc["spec"]
    assert len(vap.evaluate(pods[0], facts.params.doc["data"])) == 3


def test_webhook_match_conditions(dev):
    facts, pods = dev
    mwc = facts.mutating.doc
    assert vap.webhook_matches(mwc, pods[0])
    digest = copy.deepcopy(pods[0])
    digest["spec"]["containers"][0]["image"] = "registry.example.com/ml/trainer@sha256:" + "a" * 64
    assert vap.webhook_matches(mwc, digest)
    for image in ("registry.example.com/ml/trainer-evil:1", "evil.example.com/registry.example.com/ml/trainer:1"):
        other = copy.deepcopy(pods[0])
        other["spec"]["containers"][0]["image"] = image
        assert not vap.webhook_matches(mwc, other)
    opted_out = copy.deepcopy(pods[0])
    opted_out["metadata"]["annotations"] = {"trainyard.dev/inject": "false"}
    assert not vap.webhook_matches(mwc, opted_out)


def test_webhook_is_fail_open_and_the_policy_fail_closed(dev):
    facts, _ = dev
    hook = facts.mutating.doc["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 10
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    excluded = next(e for e in hook["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn")
    assert {"kube-system", "trainyard-system"} <= set(excluded["values"])
    assert facts.mutating.annotations["cert-manager.io/inject-ca-from"] == "trainyard-system/trainyard-webhook"
    assert facts.policy.doc["spec"]["failurePolicy"] == "Fail"
    assert facts.binding.doc["spec"]["validationActions"] == ["Deny"]
    assert facts.binding.doc["spec"]["matchResources"]["namespaceSelector"] == hook["namespaceSelector"]

"""An image built FROM the trainer image and declared by the platform (policies/*.yaml list it in
trainerImages) is a trainer everywhere admission decides it, by the one identity rule:

the engine (webhook/policy.py is_trainer_image), the webhook's matchConditions and the fabric
ValidatingAdmissionPolicy (base/webhook, their CEL evaluated with the real CEL library), the
compiled MutatingAdmissionPolicies (base/mutating-policy, run by the harness and compared with the
engine's pod) and the job namespaces' pod security policy (base/pod-security), which must admit
the IPC_LOCK and RDMA resources the fabric gave the pod, whatever the spelling of its image.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.repo.generate import mutating_harness, mutating_policy, pod_security
from trainyard.repo.model import rendered_facts
from trainyard.repo.upstream import training_operator, vap
from webhook.engine import admit
from webhook.policy import load_policies

POLICIES = load_policies(REPO_ROOT / "policies")
DERIVED = "registry.example.com/teams/llm-finetune"
SHA256 = "sha256:" + "b" * 64

# (image, carries the trainer contract)
CASES = [
    (f"{DERIVED}:2026.11.3", True),
    (f"{DERIVED}@{SHA256}", True),
    (f"REGISTRY.Example.com:443/teams/llm-finetune:v7.0@{SHA256}", True),
    ("registry.example.com:0443/teams/llm-finetune:py311-cuda121-torch241", True),
    ("registry.example.com/ml/trainer:0.1.0", True),
    # look-alikes of the declared repository are not it
    ("registry.example.com/teams/llm-finetune-x:1", False),
    ("registry.example.com/teams/llm-finetunes:1", False),
    ("registry.example.com/teams/llm-finetune/sub:1", False),
    ("registry.example.com/teams/LLM-finetune:1", False),
    ("registry.example.com:5000/teams/llm-finetune:1", False),
    ("evil.example.com/teams/llm-finetune:1", False),
    ("teams/llm-finetune:1", False),  # Docker Hub's
    ("registry.example.com/teams/other:1", False),
]


def _checked_in(path: str) -> list[dict]:
    return list(yaml.safe_load_all((REPO_ROOT / path).read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def dev(report):
    resources = report.renders["dev"].resources()
    facts = rendered_facts.collect(resources)
    job = next(r.doc for r in resources if training_operator.is_job(r.doc))
    return facts, training_operator.expand_job(job)[0]


@pytest.fixture(scope="module")
def harness() -> mutating_harness.Harness:
    return mutating_harness.Harness(_checked_in(f"{mutating_policy.FOLDER}/{mutating_policy.FILE}"))


@pytest.fixture(scope="module")
def pod_security_policy() -> dict:
    return vap.policy_from(_checked_in(f"{pod_security.FOLDER}/{pod_security.FILE}"))


def _with_image(pod: dict, image: str) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0]["image"] = image
    out["spec"]["containers"][0].setdefault("resources", {})["limits"] = {"nvidia.com/gpu": "8", "memory": "64Gi"}
    return out


def test_every_profile_declares_the_derived_repository():
    for name in POLICIES.names:
        assert DERIVED in POLICIES.get(name).trainer_images
        assert POLICIES.get(name).spec.trainer_images[0] == "registry.example.com/ml/trainer"  # the runtimes' image


@pytest.mark.parametrize(("image", "trainer"), CASES)
def test_the_webhook_and_every_compiled_policy_agree_on_the_image(dev, harness, pod_security_policy, image, trainer):
    facts, template = dev
    pod = _with_image(template, image)
    for name in POLICIES.names:  # the engine's rule
        assert POLICIES.get(name).is_trainer_image(image) is trainer
    assert vap.webhook_matches(facts.mutating.doc, pod) is trainer  # base/webhook matchConditions
    assert vap.check(pod, facts.params.doc, facts.policy.doc).matched is trainer  # base/webhook VAP
    for default in ("roce", "ib", "tcp"):  # base/mutating-policy, against the engine's pod
        c = mutating_harness.compare(harness, POLICIES, pod, "ml-training", default)
        assert c.same, mutating_harness.dumps(c.engine) + mutating_harness.dumps(c.policy)
        assert (c.profile == default) is trainer
    if trainer:  # the pod the fabric made passes pod security and the fabric policy alike
        for profile in ("roce", "ib"):
            decision = admit(copy.deepcopy(pod), POLICIES, profile, "ml-training")
            assert decision.action == "mutate"
            mutated = jsonpatch.apply_patch(pod, decision.mutation.ops)
            caps = mutated["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
            assert "IPC_LOCK" in caps
            assert vap.check(mutated, None, pod_security_policy).failures == []


def test_a_lookalike_that_adds_the_fabrics_capability_itself_is_refused(dev, pod_security_policy):
    """The other side of the same rule: IPC_LOCK is the fabric's to give, to trainer containers."""
    _, template = dev
    pod = _with_image(template, "registry.example.com/teams/llm-finetune-x:1")
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    failures = vap.check(pod, None, pod_security_policy).failures
    assert any("adds IPC_LOCK" in f for f in failures), failures

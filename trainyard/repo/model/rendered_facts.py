"""Facts about one cluster, read from what it renders.

Each fact has one source in the manifests: the webhook's default profile is the ``--profile``
argument of the trainyard-webhook Deployment (its ``$(TRAINYARD_PROFILE)`` expanded from the
container's env, as the kubelet does); the admission policy's parameters are the
trainyard-fabric-params ConfigMap; the fabric networks are the NetworkAttachmentDefinitions.

A cluster in ``admission: policy`` mode renders no webhook Deployment but one MutatingAdmissionPolicy
per fabric profile (trainyard/repo/generate/mutating_policy.py); its default profile is then what the policies
read, ``defaultFabric`` of trainyard-fabric-params.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainyard.contract.k8s import expand
from trainyard.contract.names import INJECTION_NAMESPACE_LABEL
from trainyard.repo.model import nad
from trainyard.repo.model.rendered import Resource

WEBHOOK_DEPLOYMENT = "trainyard-webhook"
WEBHOOK_SERVICE = WEBHOOK_DEPLOYMENT  # base/webhook/service.yaml: the Service has the Deployment's name
WEBHOOK_CONTAINER = "webhook"
WEBHOOK_NAMESPACE = "trainyard-system"
PARAMS_CONFIGMAP = "trainyard-fabric-params"
POLICIES_CONFIGMAP = "trainyard-policies"
MUTATING_WEBHOOK = "trainyard-fabric"
VAP_NAME = "trainyard-fabric-required"
MUTATING_POLICY_PREFIX = "trainyard-fabric-"  # trainyard/repo/generate/mutating_policy.py: one per profile
TRAINING_NAMESPACE = "ml-training"
INJECTION_LABEL = INJECTION_NAMESPACE_LABEL


@dataclass
class Facts:
    profile: str | None = None
    profile_where: str | None = None
    params: Resource | None = None
    policy: Resource | None = None
    binding: Resource | None = None
    mutating: Resource | None = None
    webhook: Resource | None = None
    nads: dict[tuple[str, str], Resource] = field(default_factory=dict)  # (namespace, name)
    namespaces: dict[str, Resource] = field(default_factory=dict)
    # MutatingAdmissionPolicies and their bindings (admission: policy), by name
    mutating_policies: dict[str, Resource] = field(default_factory=dict)
    mutating_bindings: dict[str, Resource] = field(default_factory=dict)

    @property
    def mode(self) -> str:
        """``policy`` when the render applies the fabric by MutatingAdmissionPolicy and runs no
        webhook, else ``webhook``."""
        return "policy" if self.mutating_policies and self.webhook is None else "webhook"

    @property
    def default_profile(self) -> str | None:
        """The profile of unlabelled pods: the webhook's --profile, or in policy mode the
        parameters' defaultFabric (which the policies read)."""
        if self.mode == "policy":
            return self.params_data.get("defaultFabric") or None
        return self.profile

    @property
    def params_data(self) -> dict[str, str]:
        data = self.params.doc.get("data") if self.params else None
        return data if isinstance(data, dict) else {}


def webhook_profile(webhook: Resource) -> str | None:
    """The --profile the trainyard-webhook Deployment passes to ``trainyard serve``."""
    spec = ((webhook.doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    for c in spec.get("containers") or []:
        if not isinstance(c, dict) or c.get("name") != WEBHOOK_CONTAINER:
            continue
        env = {e["name"]: str(e.get("value", "")) for e in c.get("env") or [] if isinstance(e, dict) and "name" in e}
        args = [expand(str(a), env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
        for i, a in enumerate(args):
            if a == "--profile" and i + 1 < len(args):
                return args[i + 1] or None
            if a.startswith("--profile="):
                return a.split("=", 1)[1] or None
    return None


def collect(resources: Iterable[Resource]) -> Facts:
    f = Facts()
    for r in resources:
        if r.kind == "Deployment" and r.name == WEBHOOK_DEPLOYMENT:
            f.webhook = r
            f.profile = webhook_profile(r)
            f.profile_where = r.where()
        elif r.kind == "ConfigMap" and r.name == PARAMS_CONFIGMAP:
            f.params = r
        elif r.kind == "ValidatingAdmissionPolicy" and r.name == VAP_NAME:
            f.policy = r
        elif r.kind == "ValidatingAdmissionPolicyBinding" and r.name == VAP_NAME:
            f.binding = r
        elif r.kind == "MutatingWebhookConfiguration" and r.name == MUTATING_WEBHOOK:
            f.mutating = r
        elif r.kind == "MutatingAdmissionPolicy" and r.name.startswith(MUTATING_POLICY_PREFIX):
            f.mutating_policies[r.name] = r
        elif r.kind == "MutatingAdmissionPolicyBinding" and r.name.startswith(MUTATING_POLICY_PREFIX):
            f.mutating_bindings[r.name] = r
        elif nad.is_nad(r.doc):
            f.nads[(r.namespace or "default", r.name)] = r
        elif r.kind == "Namespace" and r.group == "":
            f.namespaces[r.name] = r
    return f

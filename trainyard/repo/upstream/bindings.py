"""The ValidatingAdmissionPolicies a cluster renders, with their bindings, applied to objects as
kube-apiserver applies them (through :mod:`trainyard.repo.upstream.vap`).

:func:`collect` pairs every policy with the bindings that name it; :func:`evaluate` runs each pair
whose binding selects an object (resource, namespace labels, object labels) and returns what
denies it. The namespaces' labels are the rendered Namespaces' plus ``kubernetes.io/metadata.name``,
which the API server sets on every namespace (kubernetes/api@v0.36.5:core/v1/well_known_labels.go
LabelMetadataName), so a binding that selects job namespaces by name matches offline as in the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.contract.k8s import NAMESPACE_NAME_LABEL as NAME_LABEL
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource
from trainyard.repo.upstream import matching, vap

GROUP = "admissionregistration.k8s.io"
# kind -> resource, for the kinds whose plural is not the lower-case kind plus "s"
_PLURALS = {"NetworkPolicy": "networkpolicies", "Ingress": "ingresses", "Endpoints": "endpoints"}


@dataclass(frozen=True)
class Bound:
    policy: Resource
    binding: Resource
    params: dict | None = None  # the object the binding's paramRef names, when the policy takes one

    @property
    def name(self) -> str:
        return self.policy.name


def collect(resources: list[Resource], *, skip: tuple[str, ...] = ()) -> list[Bound]:
    """Every (policy, binding) pair of ``resources``, except the policies named in ``skip``."""
    policies = {r.name: r for r in resources if r.group == GROUP and r.kind == "ValidatingAdmissionPolicy"}
    out = []
    for b in resources:
        if b.group != GROUP or b.kind != "ValidatingAdmissionPolicyBinding":
            continue
        name = (b.doc.get("spec") or {}).get("policyName")
        if name in policies and name not in skip:
            out.append(Bound(policies[name], b, _params(policies[name], b, resources)))
    return out


def _params(policy: Resource, binding: Resource, resources: list[Resource]) -> dict | None:
    kind = (policy.doc.get("spec") or {}).get("paramKind")
    ref = (binding.doc.get("spec") or {}).get("paramRef")
    if not isinstance(kind, dict) or not isinstance(ref, dict):
        return None
    for r in resources:
        if (r.api_version, r.kind, r.name) == (kind.get("apiVersion"), kind.get("kind"), ref.get("name")) and (
            r.namespace == ref.get("namespace")
        ):
            return r.doc
    return None


def namespace_labels(resources: list[Resource]) -> dict[str, dict[str, str]]:
    """The labels of every rendered Namespace, as the API server stores them."""
    out = {}
    for r in resources:
        if r.kind == "Namespace" and r.group == "":
            out[r.name] = {**{str(k): str(v) for k, v in r.labels.items()}, NAME_LABEL: r.name}
    return out


def resource_of(kind: str) -> str:
    return _PLURALS.get(kind) or (kind.lower() + ("es" if kind.endswith("s") else "s"))


def request_for(doc: dict, labels: dict[str, dict[str, str]]) -> matching.MatchRequest:
    """The CREATE of ``doc`` (its namespace, ``default`` when unset, as the API server fills it in)."""
    api_version = str(doc.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(doc.get("kind", ""))
    if (group, kind) in CLUSTER_SCOPED:
        ns_labels = None
    else:
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        ns = str(meta.get("namespace") or "default")
        ns_labels = labels.get(ns, {NAME_LABEL: ns})
    return matching.MatchRequest(resource=resource_of(kind), group=group, version=version, namespace_labels=ns_labels)


def evaluate(bound: list[Bound], doc: dict, labels: dict[str, dict[str, str]]) -> list[str]:
    """What the bound policies that deny say about the CREATE of ``doc``: '<policy>: <message>'."""
    request = request_for(doc, labels)
    out = []
    for b in bound:
        vap.require_compiles(b.policy.doc, b.policy.where())
        verdict = vap.check_bound(b.policy.doc, b.binding.doc, doc, request, b.params)
        if verdict.matched and vap.denies(b.binding.doc):
            out += [f"{b.name}: {m}" for m in verdict.failures]
    return out


def applies(bound: list[Bound], doc: dict, labels: dict[str, dict[str, str]]) -> list[str]:
    """The names of the bound policies that would evaluate the CREATE of ``doc``."""
    request = request_for(doc, labels)
    return [b.name for b in bound if matching.binding_applies(b.policy.doc, b.binding.doc, doc, request)]

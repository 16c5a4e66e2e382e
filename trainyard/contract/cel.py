"""The fabric rules as CEL, for kube-apiserver: base/webhook's matchConditions and admission policy.

kube-apiserver decides in CEL which pods the webhook sees (the MutatingWebhookConfiguration's
matchConditions) and which pods are refused without the fabric (the ValidatingAdmissionPolicy).
The webhook's engine decides the same things in Python. Both read the same names (names.py) and
the same image identity (images.py), and the CEL is built here from them, so there is one rule
with two spellings. base/webhook's YAML carries these expressions as text; the tests and
``trainyard validate`` check that it carries exactly these (:func:`same`).

What only kube-apiserver can do is here too: ``authorizer`` (apiserver pkg/cel/library/authz.go)
asks the cluster's authorizers whether the user making the request may use a verb, which is how
the opt-out becomes a privilege; the engine never sees who asks.
"""

from __future__ import annotations

from typing import Any

from trainyard.contract.images import cel_matches
from trainyard.contract.names import (
    FABRIC_LABEL,
    MIRROR_ANNOTATION,
    NETWORKS_ANNOTATION,
    OPT_OUT_ANNOTATION,
    OPT_OUT_GROUP,
    OPT_OUT_RESOURCE,
    OPT_OUT_VALUE,
    OPT_OUT_VERB,
)


def _has_key(obj: str, field: str, key: str) -> str:
    return f"has({obj}.metadata.{field}) && '{key}' in {obj}.metadata.{field}"


def is_trainer(container: str, repositories: list[str]) -> str:
    """A container (a CEL variable) runs one of ``repositories``, by images.identity."""
    return cel_matches(f"{container}.image", repositories)


def runs_a_trainer(obj: str, repositories: list[str]) -> str:
    return f"{obj}.spec.containers.exists(c, {is_trainer('c', repositories)})"


def trainers(obj: str, repositories: list[str]) -> str:
    return f"{obj}.spec.containers.filter(c, {is_trainer('c', repositories)})"


def init_trainers(obj: str, repositories: list[str]) -> str:
    """The init containers that run a trainer image (a TrainJob runtime's preflight): the engine
    gives them the env, the /dev/shm mount and the capabilities too. The list is optional."""
    return f"has({obj}.spec.initContainers) ? {obj}.spec.initContainers.filter(c, {is_trainer('c', repositories)}) : []"


def became_trainers(repositories: list[str]) -> str:
    """On UPDATE: the trainer containers and init containers of ``object`` whose container of the
    same name in ``oldObject`` did not run a trainer image. Both images may change on update, and a
    pod cannot add or remove containers (kube-apiserver pkg/apis/core/validation/validation.go,
    ValidatePodUpdate)."""
    old = is_trainer("o", repositories)
    return (
        f"variables.trainers.filter(c, !oldObject.spec.containers.exists(o, o.name == c.name && {old})) + "
        "variables.initTrainers.filter(c, !(has(oldObject.spec.initContainers) && "
        f"oldObject.spec.initContainers.exists(o, o.name == c.name && {old})))"
    )


def asks_opt_out(obj: str = "object") -> str:
    """names.asks_opt_out in CEL: the annotation with exactly the value OPT_OUT_VALUE."""
    return (
        f"{_has_key(obj, 'annotations', OPT_OUT_ANNOTATION)} && "
        f"{obj}.metadata.annotations['{OPT_OUT_ANNOTATION}'] == '{OPT_OUT_VALUE}'"
    )


# The user making the request may OPT_OUT_VERB OPT_OUT_RESOURCE.OPT_OUT_GROUP in the pod's
# namespace ("allowed" is false on "no opinion" and on errors: authz.go Decision.allowed).
MAY_OPT_OUT = (
    f"authorizer.group('{OPT_OUT_GROUP}').resource('{OPT_OUT_RESOURCE}')"
    f".namespace(request.namespace).check('{OPT_OUT_VERB}').allowed()"
)
# The authorizer is asked only when the pod asks to opt out (it can be slow: authz.go).
NOT_OPTED_OUT = f"!({asks_opt_out()} && {MAY_OPT_OUT})"
NOT_A_MIRROR_POD = f"!({_has_key('object', 'annotations', MIRROR_ANNOTATION)})"


def fabric(obj: str, default: str = "params.data.defaultFabric") -> str:
    """names.requested_fabric in CEL: the label's value, or ``default`` when absent or empty."""
    label = f"{obj}.metadata.labels['{FABRIC_LABEL}']"
    return f"{_has_key(obj, 'labels', FABRIC_LABEL)} && {label} != '' ? {label} : {default}"


def networks(obj: str) -> str:
    """The Multus networks annotation of ``obj``, or ''."""
    annotation = f"{obj}.metadata.annotations['{NETWORKS_ANNOTATION}']"
    return f"{_has_key(obj, 'annotations', NETWORKS_ANNOTATION)} ? {annotation} : ''"


def attached(fabric_expr: str, networks_expr: str) -> str:
    """The fabric is one the cluster offers (``fabric.<profile>`` in the parameters) and the
    networks annotation names its network in either Multus form."""
    network = f"params.data['fabric.' + {fabric_expr}]"
    return (
        f"('fabric.' + {fabric_expr}) in params.data && "
        f"{networks_expr}.matches('(^|[ ,/\"])' + {network} + '($|[ ,@\"])')"
    )


def same(written: object, expected: str) -> bool:
    """Whether an expression as written in YAML (folded over lines) is ``expected``."""
    return isinstance(written, str) and written.split() == expected.split()


def webhook_conditions(repositories: list[str]) -> dict[tuple[str, str], str]:
    """The MutatingWebhookConfiguration's matchConditions, by (section, name)."""
    return {
        ("matchConditions", "runs-a-trainer-image"): runs_a_trainer("object", repositories),
        ("matchConditions", "not-opted-out"): NOT_OPTED_OUT,
    }


def policy_expressions(repositories: list[str]) -> dict[tuple[str, str], str]:
    """The ValidatingAdmissionPolicy's expressions that carry these rules, by (section, name)."""
    return {
        ("matchConditions", "not-a-mirror-pod"): NOT_A_MIRROR_POD,
        ("matchConditions", "runs-a-trainer-image"): runs_a_trainer("object", repositories),
        ("matchConditions", "not-opted-out"): NOT_OPTED_OUT,
        ("variables", "trainers"): trainers("object", repositories),
        ("variables", "initTrainers"): init_trainers("object", repositories),
        ("variables", "fabric"): fabric("object"),
        ("variables", "networks"): networks("object"),
        ("variables", "attached"): attached("variables.fabric", "variables.networks"),
        ("variables", "becameTrainers"): f"variables.creating ? [] : {became_trainers(repositories)}",
        ("variables", "oldFabric"): f"variables.creating ? '' : ({fabric('oldObject')})",
        ("variables", "oldNetworks"): f"variables.creating ? '' : ({networks('oldObject')})",
        ("variables", "wasAttached"): (
            f"!variables.creating && {attached('variables.oldFabric', 'variables.oldNetworks')}"
        ),
    }


def differences(items: dict[str, list[Any]], expected: dict[tuple[str, str], str]) -> list[str]:
    """Where ``items`` (section -> list of {name, expression}) differ from ``expected``:
    '<section>[<name>]: ...' for each expression missing or written otherwise."""
    out = []
    for (section, name), expression in expected.items():
        found = [i for i in items.get(section) or [] if isinstance(i, dict) and i.get("name") == name]
        if not found:
            out.append(f"{section}[{name}]: missing; expected: {expression}")
        elif not same(found[0].get("expression"), expression):
            out.append(f"{section}[{name}]: differs from the rule; expected: {expression}")
    return out

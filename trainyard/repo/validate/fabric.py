"""Fabric checks: the webhook's default profile, its network, the admission policy's parameters
and the webhook's match agree with policies/ and with the cluster's NetworkAttachmentDefinitions;
the cluster's training runtimes are exactly those generated from the profiles it offers, and the
Kueue topology level each asks for is a level of the cluster's Topology.

The admission mode the cluster declares (clusters/<cluster>/cluster.yaml ``admission``) is the one
it renders: ``webhook``, the webhook Deployment and its MutatingWebhookConfiguration; ``policy``, no
webhook and one MutatingAdmissionPolicy and binding per profile, each exactly as
trainyard/repo/generate/mutating_policy.py generates it."""

from __future__ import annotations

from trainyard.contract import cel
from trainyard.contract.names import FABRIC_LABEL
from trainyard.repo.generate import mutating_policy, runtimes
from trainyard.repo.model import nad, rendered_facts
from trainyard.repo.model.repository import POLICIES
from trainyard.repo.upstream import kueue, trainjob, vap
from trainyard.repo.validate import ClusterCheck
from webhook.policy import CompiledProfile


def check_fabric(ctx: ClusterCheck) -> None:
    f = ctx.facts
    declared = ctx.declared.spec.admission if ctx.declared is not None else None
    if declared is not None and declared != f.mode:
        ctx.err(
            f"clusters/{ctx.cluster}/cluster.yaml",
            f"declares admission: {declared}, but the cluster renders {f.mode} admission: "
            + (
                "add the component base/mutating-policy to its admission overlay "
                f"(overlays/{ctx.cluster}/platform/webhook)"
                if declared == "policy"
                else f"remove the component base/mutating-policy from overlays/{ctx.cluster}/platform/webhook"
            ),
        )
    if f.mode == "policy":
        check_policy_mode(ctx)
        return
    if f.webhook is None:
        ctx.err(f"clusters/{ctx.cluster}", "renders no trainyard-webhook Deployment (base/webhook)")
        return
    for r in [*f.mutating_policies.values(), *f.mutating_bindings.values()]:
        ctx.err(r.where(), "a webhook-mode cluster renders a fabric MutatingAdmissionPolicy: both would mutate pods",
                r.describe())  # fmt: skip
    where_params = f.params.where() if f.params else f.webhook.where()
    if not f.profile:
        ctx.err(
            f.webhook.where(),
            "the webhook has no --profile (set defaultFabric in trainyard-fabric-params)",
            f.webhook.describe(),
        )
        return
    if ctx.policies.get(f.profile) is None:
        ctx.err(
            where_params,
            f"unknown fabric profile {f.profile!r} (defaultFabric / the webhook's --profile); {_known(ctx)}",
            f.params.describe() if f.params else None,
        )
        return
    offered = check_params(ctx, where_params)
    images = sorted({img for name in offered if (p := ctx.policies.get(name)) for img in p.spec.trainer_images})
    check_webhook_match(ctx, images)
    check_runtimes(ctx, offered, where_params)
    if f.policy is None or f.binding is None:
        ctx.err(f.webhook.where(), "renders no trainyard-fabric-required ValidatingAdmissionPolicy and binding")
    else:
        for problem in vap.compile_policy(f.policy.doc):
            ctx.err(f.policy.where(), problem, f.policy.describe())
        check_rules(ctx)
    ns = f.namespaces.get(rendered_facts.TRAINING_NAMESPACE)
    if ns is None or ns.labels.get(rendered_facts.INJECTION_LABEL) != "enabled":
        ctx.err(
            ns.where() if ns else f"clusters/{ctx.cluster}",
            f"namespace {rendered_facts.TRAINING_NAMESPACE} must exist with label "
            f"{rendered_facts.INJECTION_LABEL}=enabled "
            "(the webhook and the admission policy select namespaces by it)",
        )


def check_params(ctx: ClusterCheck, where_params: str) -> dict[str, str]:
    """The admission policy's parameters agree with the webhook and policies/; returns the fabrics
    the cluster offers (profile -> network)."""
    f, pols = ctx.facts, ctx.policies
    data = f.params_data
    if f.mode == "webhook" and data.get("defaultFabric") != f.profile:
        ctx.err(
            where_params,
            f"defaultFabric {data.get('defaultFabric')!r} differs from the webhook's --profile {f.profile!r}",
        )
    offered = {k.removeprefix("fabric."): v for k, v in data.items() if k.startswith("fabric.")}
    if f.default_profile not in offered:
        ctx.err(
            where_params,
            f"no fabric.{f.default_profile} entry: the admission policy would reject every trainer pod",
        )
    for name, network in offered.items():
        p = pols.get(name)
        if p is None:
            ctx.err(where_params, f"fabric.{name}: no such profile in {POLICIES}/ (known: {', '.join(pols.names)})")
            continue
        expected = p.spec.networks[0].name
        if network != expected:
            ctx.err(where_params, f"fabric.{name} is {network!r} but {POLICIES}/{name}.yaml attaches {expected!r}")
        check_network(ctx, p, where_params)
    return offered


def check_webhook_match(ctx: ClusterCheck, images: list[str]) -> None:
    """The MutatingWebhookConfiguration's matchConditions pass a pod of every trainer image."""
    f = ctx.facts
    if f.mutating is None:
        ctx.err(f.webhook.where() if f.webhook else f"clusters/{ctx.cluster}",
                "renders no trainyard-fabric MutatingWebhookConfiguration")  # fmt: skip
        return
    for img in images:
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": rendered_facts.TRAINING_NAMESPACE},
            "spec": {"containers": [{"name": "trainer", "image": f"{img}:1.0"}]},
        }
        if not vap.webhook_matches(f.mutating.doc, probe):
            ctx.err(
                f.mutating.where(),
                f"matchConditions do not pass a pod running {img}:<tag> (a trainer image of the profiles); "
                "the webhook would never see its pods",
                f.mutating.describe(),
            )


def check_rules(ctx: ClusterCheck) -> None:
    """The webhook's matchConditions and the admission policy spell the fabric rules (image identity
    of every profile's trainerImages, the opt-out, the fabric label) exactly as trainyard/contract/cel.py
    writes them, so they decide as the engine does."""
    f = ctx.facts
    repositories = sorted({r for p in ctx.policies.profiles.values() for r in p.trainer_images})
    for problem in cel.differences(f.policy.doc.get("spec") or {}, cel.policy_expressions(repositories)):
        ctx.err(f.policy.where(), f"spec.{problem}", f.policy.describe())
    if f.mutating is not None:
        for i, hook in enumerate(f.mutating.doc.get("webhooks") or []):
            for problem in cel.differences(hook, cel.webhook_conditions(repositories)):
                ctx.err(f.mutating.where(), f"webhooks[{i}].{problem}", f.mutating.describe())


def check_network(ctx: ClusterCheck, profile: CompiledProfile, where_params: str) -> None:
    net = profile.spec.networks[0]
    ns = net.namespace or rendered_facts.TRAINING_NAMESPACE
    found = ctx.facts.nads.get((ns, net.name))
    networks_app = ctx.render.app("trainyard-networks")
    where = networks_app.path if networks_app and networks_app.path else where_params
    if found is None:
        ctx.err(
            where,
            f"fabric profile {profile.name} attaches NetworkAttachmentDefinition {ns}/{net.name}, "
            f"which this cluster does not define; add it to the cluster's networks overlay",
        )
        return
    resource = found.doc.get("metadata", {}).get("annotations", {}).get(nad.RESOURCE_NAME_ANNOTATION)
    if resource and resource not in profile.spec.rdma_resources:
        ctx.warn(
            found.where(),
            f"the NAD asks pods for device-plugin resource {resource!r} ({nad.RESOURCE_NAME_ANNOTATION}), but "
            f"profile {profile.name} does not request it (rdmaResources); "
            "the CNI plugin gets no device unless the pod requests it",
            found.describe(),
        )


def check_runtimes(ctx: ClusterCheck, offered: dict[str, str], where_params: str) -> None:
    """One ClusterTrainingRuntime per offered profile, each exactly as its profile generates it
    (an overlay patching one would make the runtime and the webhook disagree)."""
    installed = {r.name: r for r in ctx.resources if trainjob.is_runtime(r.doc) and r.kind == "ClusterTrainingRuntime"}
    app = ctx.render.app("trainyard-runtimes")
    where = app.path if app and app.path else where_params
    levels = [str(lv.get("nodeLabel")) for r in ctx.resources if r.group == kueue.GROUP and r.kind == "Topology"
              for lv in (r.doc.get("spec") or {}).get("levels") or [] if isinstance(lv, dict)]  # fmt: skip
    for name in offered:
        profile = ctx.policies.get(name)
        if profile is None:
            continue
        wanted = runtimes.cluster_training_runtime(profile)
        found = installed.pop(runtimes.runtime_name(name), None)
        if found is None:
            ctx.warn(
                where,
                f"fabric {name} is offered here but its runtime {runtimes.runtime_name(name)} is not installed: add "
                f"base/runtimes/{name} to the cluster's runtimes overlay, or TrainJobs cannot use this fabric",
            )
        elif found.doc != wanted:
            ctx.err(
                found.where(),
                f"ClusterTrainingRuntime {found.name} differs from what policies/ generates for profile {name}: "
                "do not patch a generated runtime; change the profile and run trainyard generate",
                found.describe(),
            )
        for level in runtimes.topology_annotations(profile).values():
            if levels and level not in levels:
                ctx.err(
                    where,
                    f"profile {name} colocates on {level}, which is not a level of the cluster's Kueue Topology "
                    f"({', '.join(levels)}); add it to spec.topology of clusters/{ctx.cluster}/cluster.yaml",
                )
    for extra in installed.values():
        fabric = extra.labels.get(FABRIC_LABEL)
        if fabric and fabric not in offered:
            ctx.err(
                extra.where(),
                f"runtime {extra.name} is for fabric {fabric}, which this cluster does not offer (fabric.* in "
                "trainyard-fabric-params): its pods would be denied; remove it from the cluster's runtimes overlay",
                extra.describe(),
            )


_COMPARED = ("apiVersion", "kind", "spec")


def _known(ctx: ClusterCheck) -> str:
    return f"known profiles: {', '.join(ctx.policies.names)} ({POLICIES}/)"


def check_policy_mode(ctx: ClusterCheck) -> None:
    """admission: policy: no webhook, the parameters name a known default profile, and every
    profile's MutatingAdmissionPolicy and binding are rendered exactly as generated."""
    f = ctx.facts
    where = f.params.where() if f.params else f"overlays/{ctx.cluster}/platform/webhook"
    if f.mutating is not None:
        ctx.err(f.mutating.where(), "a policy-mode cluster renders the webhook's MutatingWebhookConfiguration",
                f.mutating.describe())  # fmt: skip
    profile = f.default_profile
    if not profile or ctx.policies.get(profile) is None:
        ctx.err(
            where,
            f"defaultFabric {profile!r} names no fabric profile (the MutatingAdmissionPolicies read it); {_known(ctx)}",
            f.params.describe() if f.params else None,
        )
        return
    offered = check_params(ctx, where)
    check_runtimes(ctx, offered, where)
    unknown = dict(f.mutating_policies)
    for name in ctx.policies.names:
        wanted = mutating_policy.generate(ctx.policies.get(name))  # type: ignore[arg-type]
        for doc, found in (
            (wanted.policy, unknown.pop(mutating_policy.policy_name(name), None)),
            (wanted.binding, f.mutating_bindings.get(mutating_policy.policy_name(name))),
        ):
            if found is None:
                ctx.err(where, f"no {doc['kind']} {doc['metadata']['name']} for fabric profile {name} "
                        f"(base/mutating-policy)")  # fmt: skip
            elif [found.doc.get(k) for k in _COMPARED] != [doc[k] for k in _COMPARED]:
                why = "an overlay must not patch it (the harness proves the generated policy, not a patched one)"
                ctx.err(found.where(), f"differs from what {POLICIES}/{name}.yaml generates: {why}", found.describe())
    for r in unknown.values():
        ctx.err(r.where(), "a fabric MutatingAdmissionPolicy of no profile in policies/", r.describe())
    if f.policy is None or f.binding is None:
        ctx.err(where, "renders no trainyard-fabric-required ValidatingAdmissionPolicy and binding")
    else:
        for problem in vap.compile_policy(f.policy.doc):
            ctx.err(f.policy.where(), problem, f.policy.describe())
        check_rules(ctx)

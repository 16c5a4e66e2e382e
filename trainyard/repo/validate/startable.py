"""Whether every pod a job becomes is created by kube-apiserver and can start: validate's verdict is
the cluster's.

For each pod of each previewed job (as admitted: with the fabric the webhook or the policies add),
what kube-apiserver itself decides, in its order (k8s.io/kubernetes@v1.36.5):

- defaulting, then LimitRanger: a container's request from its limit, then the namespace's
  LimitRange defaults (:func:`trainyard.repo.jobs.placement.with_defaults`);
- the ServiceAccount admission plugin: the pod's ServiceAccount must exist in its namespace
  (plugin/pkg/admission/serviceaccount/admission.go: "error looking up service account");
- pod validation: a request above its limit (pkg/apis/core/validation/validation.go
  validateResourceRequirements: "must be less than or equal to ... limit"); an extended resource
  (``nvidia.com/gpu``, ``rdma/...``, hugepages) requested without a limit ("Limit must be set for
  non overcommitable resources") or with a request other than its limit ("must be equal to ...
  limit");
- ResourceQuota admission: every container must say each of cpu and memory that a quota of the
  namespace counts (pkg/quota/v1/evaluator/core/pods.go Constraints, validationSet: "must specify
  ..."; not when the pod sets pod-level resources), and one pod alone must fit in every quota
  (apiserver pkg/admission/plugin/resourcequota/controller.go CheckRequest: "exceeded quota"); a
  whole job against the quota is :mod:`trainyard.repo.validate.capacity`'s.

Then what makes a created pod wait for ever, or its job never get pods:

- a job queued by Kueue whose container gives a limit without a request below the LimitRange's
  default request: Kueue takes the default as the request and never admits the job
  (kubernetes-sigs/kueue pkg/workload/resources.go AdjustResources);

- a ``schedulerName`` no scheduler of the cluster answers (``default-scheduler``, or one the
  cluster's facts declare in ``spec.schedulers``);
- a Multus network (``k8s.v1.cni.cncf.io/networks``) with no NetworkAttachmentDefinition in the
  namespace it resolves to (the attachment's own, else the pod's: multus-cni@v4.3.0
  pkg/k8sclient/k8sclient.go parsePodNetworkAnnotation): Multus fails the sandbox and the kubelet
  retries for ever;
- a PersistentVolumeClaim, ConfigMap or Secret the pod mounts or reads into its env (not marked
  ``optional``) that nothing of the cluster creates: the scheduler (claims) or the kubelet
  (CreateContainerConfigError) waits for it.

A node selector or node affinity no pool matches is :mod:`trainyard.repo.validate.capacity`'s; the
runtime a TrainJob names is checked before its pods exist (:mod:`trainyard.repo.validate.jobs`).
Every finding names the job file, the pod and container, the field and the fix.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal

from trainyard.contract import networks
from trainyard.repo.jobs import placement, preview
from trainyard.repo.model import declared
from trainyard.repo.model.nad import is_nad
from trainyard.repo.model.rendered import Resource, as_dict, as_list, dig
from trainyard.repo.upstream import kueue, training_operator, trainjob
from trainyard.repo.validate import ClusterCheck

DEFAULT_SCHEDULER = "default-scheduler"  # pkg/apis/core/v1/defaults.go SetDefaults_PodSpec
DEFAULT_ACCOUNT = "default"  # made in every namespace by kube-controller-manager's serviceaccounts controller
# kube-controller-manager publishes the API server's CA in every namespace (rootcacertpublisher)
EVERY_NAMESPACE = {"ConfigMap": {"kube-root-ca.crt"}, "ServiceAccount": {DEFAULT_ACCOUNT}}
# pods.go validationSet: the quota resources every container must then say
MUST_SPECIFY = {
    "cpu": ("requests", "cpu"),
    "requests.cpu": ("requests", "cpu"),
    "limits.cpu": ("limits", "cpu"),
    "memory": ("requests", "memory"),
    "requests.memory": ("requests", "memory"),
    "limits.memory": ("limits", "memory"),
}
REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


@dataclass(frozen=True)
class Finding:
    """One reason a pod is refused (``refused``) or created but never starts."""

    pod: str
    refused: bool
    server_says: str  # what kube-apiserver's refusal (or the stuck pod's event) says, in part
    message: str  # the whole problem: the pod, container, field, why and the fix


@dataclass
class ClusterObjects:
    """What one cluster's render creates, by namespace: the objects pods refer to, the LimitRanges
    and ResourceQuotas that judge them, and the schedulers that run."""

    names: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (kind, namespace) -> names
    limit_ranges: dict[str, list[dict]] = field(default_factory=dict)
    quotas: dict[str, list[tuple[Resource, dict[str, Decimal]]]] = field(default_factory=dict)
    schedulers: tuple[str, ...] = (DEFAULT_SCHEDULER,)

    @classmethod
    def of(cls, resources: list[Resource], facts: declared.ClusterFacts | None) -> ClusterObjects:
        out = cls()
        if facts is not None:
            out.schedulers = (DEFAULT_SCHEDULER, *facts.spec.schedulers)
        for r in resources:
            ns = r.namespace or "default"
            if r.group:
                if is_nad(r.doc):
                    out.add("NetworkAttachmentDefinition", ns, r.name)
                for name in _secrets_made(r):
                    out.add("Secret", ns, name)
                continue
            out.add(r.kind, ns, r.name)
            if r.kind == "LimitRange":
                out.limit_ranges.setdefault(ns, []).append(r.doc)
            elif r.kind == "ResourceQuota":
                out.quotas.setdefault(ns, []).append((r, placement.quota_hard(r.doc)))
        return out

    def add(self, kind: str, namespace: str, name: str) -> None:
        self.names.setdefault((kind, namespace), set()).add(name)

    def has(self, kind: str, namespace: str, name: str, made: Collection[tuple[str, str]] = ()) -> bool:
        """Whether the render (or the job's controllers, ``made``) creates it, or every namespace has it."""
        known = self.names.get((kind, namespace), set())
        return name in known or name in EVERY_NAMESPACE.get(kind, ()) or (kind, name) in made


def _secrets_made(r: Resource) -> list[str]:
    """Secrets an object of the render makes: cert-manager's Certificate (spec.secretName), an
    ExternalSecret (spec.target.name, else its name), a SealedSecret (its name)."""
    spec = as_dict(r.doc.get("spec"))
    if r.kind == "Certificate" and r.group == "cert-manager.io" and isinstance(spec.get("secretName"), str):
        return [spec["secretName"]]
    if r.kind == "ExternalSecret":
        target = as_dict(spec.get("target")).get("name")
        return [target if isinstance(target, str) and target else r.name]
    if r.kind == "SealedSecret":
        return [r.name]
    return []


# ---------------------------------------------------------------------------------------------
# Where the user changes a pod's container


def container_field(jp: preview.JobPreview, pod: dict, group: str, name: str) -> str:
    """Where in the job file a container of ``pod`` is written, for the fix."""
    job = jp.job
    if trainjob.is_trainjob(job.doc):
        if group == "containers" and name == trainjob.NODE:
            return "spec.trainer (resourcesPerNode, env, image)"
        runtime = as_dict(as_dict(job.doc.get("spec")).get("runtimeRef")).get("name")
        return f"container {name} of the runtime {runtime} (a runtimePatch, or the platform team's runtime)"
    key = REPLICA_SPECS.get(job.kind, "replicaSpecs")
    replica = as_dict(dig(pod, "metadata").get("labels")).get(training_operator.REPLICA_TYPE_LABEL, "")
    spec_keys = as_dict(as_dict(job.doc.get("spec")).get(key))
    written = next((k for k in spec_keys if str(k).lower() == str(replica).lower()), replica or "<replica>")
    return f"spec.{key}.{written}.template.spec.{group}[name={name}]"


def _containers(pod: dict) -> list[tuple[str, int, dict]]:
    spec = as_dict(pod.get("spec"))
    return [
        (group, i, c)
        for group in ("initContainers", "containers")
        for i, c in enumerate(as_list(spec.get(group)))
        if isinstance(c, dict)
    ]


def _quantity(value: object) -> Decimal | None:
    from trainyard.contract.quantity import QuantityError, parse_quantity

    try:
        return parse_quantity(value)
    except QuantityError:
        return None  # the schema check names a malformed quantity


def _overcommit_allowed(resource: str) -> bool:
    """pkg/apis/core/helper/helpers.go IsOvercommitAllowed: a native resource (no domain, or the
    kubernetes.io domain) that is not hugepages."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


# ---------------------------------------------------------------------------------------------
# The judgement


def judge(objects: ClusterObjects, jp: preview.JobPreview) -> list[Finding]:
    """Every reason a pod of ``jp`` is refused by kube-apiserver or never starts."""
    out: list[Finding] = []
    made = {(kind, name) for kind, name in jp.created}
    for pod in jp.pods:
        if pod.action == "deny":
            continue  # the webhook's refusal is the preview's problem, named there
        out += _judge_pod(objects, jp, pod.name, pod.after, made)
    return out


def _judge_pod(
    objects: ClusterObjects, jp: preview.JobPreview, name: str, after: dict, made: set[tuple[str, str]]
) -> list[Finding]:
    ns = str(as_dict(after.get("metadata")).get("namespace") or jp.job.namespace or "default")
    pod = placement.with_defaults(after, objects.limit_ranges.get(ns, []))
    spec = as_dict(pod.get("spec"))
    out: list[Finding] = []

    def refuse(says: str, message: str) -> None:
        out.append(Finding(name, True, says, f"pod {name}: {message}"))

    def stuck(says: str, message: str) -> None:
        out.append(Finding(name, False, says, f"pod {name}: {message}"))

    # the ServiceAccount admission plugin
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_ACCOUNT
    if isinstance(account, str) and not objects.has("ServiceAccount", ns, account, made):
        where = (
            "spec.template.spec.serviceAccountName of the job's pod template"
            if not trainjob.is_trainjob(jp.job.doc)
            else "the serviceAccountName its runtime or runtimePatches set"
        )
        refuse(
            "serviceaccount",
            f"spec.serviceAccountName: ServiceAccount {account!r} does not exist in namespace {ns}, so kube-apiserver "
            f"refuses the pod (its ServiceAccount admission plugin): add the ServiceAccount to the job folder, or "
            f"remove {where} to run as {DEFAULT_ACCOUNT!r}",
        )
    # pod validation: requests against limits
    for group, i, c in _containers(pod):
        cname = str(c.get("name") or f"#{i}")
        res = as_dict(c.get("resources"))
        limits, requests = as_dict(res.get("limits")), as_dict(res.get("requests"))
        fix_at = container_field(jp, pod, group, cname)
        path = f"spec.{group}[{i}] ({cname})"
        for key, value in requests.items():
            key = str(key)
            want = _quantity(value)
            if want is None:
                continue
            limit = _quantity(limits[key]) if key in limits else None
            if key not in limits and not _overcommit_allowed(key):
                refuse(
                    "Limit must be set for non overcommitable resources",
                    f"{path}.resources.requests[{key}]: {value} without a limit; kube-apiserver refuses an "
                    f'extended resource requested without one ("Limit must be set for non overcommitable '
                    f'resources"): set limits {key}: {value} in {fix_at} (the request then defaults to it)',
                )
            elif limit is not None and want != limit and not _overcommit_allowed(key):
                refuse(
                    "must be equal to",
                    f"{path}.resources.requests[{key}]: {value} but the limit is {limits[key]}; kube-apiserver "
                    f"refuses an extended resource whose request is not its limit: set only limits {key} in {fix_at}",
                )
            elif limit is not None and want > limit:
                defaulted = key not in as_dict(as_dict(_container_at(after, group, i).get("resources")).get("limits"))
                why = (
                    f"the namespace's LimitRange gives it the default limit {limits[key]}"
                    if defaulted
                    else f"its limit is {limits[key]}"
                )
                refuse(
                    "must be less than or equal to",
                    f"{path}.resources.requests[{key}]: {value} is more than its limit ({why}); kube-apiserver "
                    f"refuses the pod: set limits {key} (at least {value}) in {fix_at}",
                )
    # ResourceQuota admission
    level = as_dict(spec.get("resources"))
    pod_level = any(k in as_dict(level.get(s)) for s in ("requests", "limits") for k in ("cpu", "memory"))
    usage = placement.pod_usage(pod)
    for quota, hard in objects.quotas.get(ns, []):
        required = [k for k in hard if k in MUST_SPECIFY]
        if required and not pod_level:
            for group, i, c in _containers(pod):
                res = as_dict(c.get("resources"))
                missing = sorted(k for k in required if MUST_SPECIFY[k][1] not in as_dict(res.get(MUST_SPECIFY[k][0])))
                if missing:
                    cname = str(c.get("name") or f"#{i}")
                    fix_at = container_field(jp, pod, group, cname)
                    wanted = ", ".join(f"{MUST_SPECIFY[k][0]} {MUST_SPECIFY[k][1]}" for k in missing)
                    refuse(
                        "must specify",
                        f"spec.{group}[{i}] ({cname}).resources: the ResourceQuota {quota.name} of namespace {ns} "
                        f"counts {', '.join(missing)}, so kube-apiserver refuses a container that does not say "
                        f"them and no LimitRange gives a default: set {wanted} in {fix_at}",
                    )
        short = placement.over(usage, hard)
        if short:
            refuse(
                "exceeded quota",
                f"the ResourceQuota {quota.name} of namespace {ns} ({quota.where()}) refuses it even with nothing "
                f"else running ({'; '.join(short)}): ask for less per pod (more nodes, fewer each)",
            )
    # what leaves a created pod waiting for ever
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler not in objects.schedulers:
        stuck(
            "schedulerName",
            f"spec.schedulerName: {scheduler!r} is no scheduler of cluster {jp.cluster} (it runs "
            f"{', '.join(objects.schedulers)}; clusters/{jp.cluster}/cluster.yaml spec.schedulers): the pod stays "
            "Pending for ever; remove schedulerName (Kueue queues the job, the default scheduler places its pods)",
        )
    out += [Finding(name, False, "kueue", f"pod {name}: {m}") for m in _kueue_problems(objects, jp, after, ns)]
    out += [Finding(name, False, "network", f"pod {name}: {m}") for m in _network_problems(objects, pod, ns)]
    out += [Finding(name, False, "not found", f"pod {name}: {m}") for m in _reference_problems(objects, pod, ns, made)]
    return out


def _kueue_problems(objects: ClusterObjects, jp: preview.JobPreview, pod: dict, ns: str) -> list[str]:
    """Kueue fills a container's missing request from the LimitRange before it looks at the
    container's limit, and never admits a workload whose request then exceeds its limit
    (kubernetes-sigs/kueue pkg/workload/resources.go AdjustResources: handleLimitRange before
    UseLimitsAsMissingRequestsInPod; ValidateResources "requests must not exceed its limits")."""
    if not as_dict(jp.job.labels).get(kueue.QUEUE_LABEL):
        return []
    out = []
    for lr in objects.limit_ranges.get(ns, []):
        default_requests, _ = placement.limit_range_defaults(lr)
        for group, i, c in _containers(pod):
            res = as_dict(c.get("resources"))
            limits, requests = as_dict(res.get("limits")), as_dict(res.get("requests"))
            for key, limit in limits.items():
                default = default_requests.get(str(key))
                if key in requests or default is None:
                    continue
                have, given = _quantity(limit), _quantity(default)
                if have is not None and given is not None and given > have:
                    cname = str(c.get("name") or f"#{i}")
                    out.append(
                        f"spec.{group}[{i}] ({cname}).resources.limits[{key}]: {limit} with no request; Kueue takes "
                        f"the request from the namespace's LimitRange ({default}), above the limit, and never admits "
                        f"the job: set requests {key}: {limit} too in {container_field(jp, pod, group, cname)}"
                    )
    return out


def _container_at(pod: dict, group: str, i: int) -> dict:
    items = as_list(as_dict(pod.get("spec")).get(group))
    return as_dict(items[i]) if i < len(items) else {}


def _network_problems(objects: ClusterObjects, pod: dict, ns: str) -> list[str]:
    value = as_dict(as_dict(pod.get("metadata")).get("annotations")).get(networks.ANNOTATION)
    if value is None or value == "":
        return []
    try:
        parsed = networks.parse(value)
    except networks.NetworksError as exc:
        return [f"metadata.annotations[{networks.ANNOTATION}]: Multus cannot read it ({exc}); the pod never starts"]
    out = []
    for a in parsed.attachments:
        where = a.namespace or ns
        if not objects.has("NetworkAttachmentDefinition", where, a.name):
            known = sorted(objects.names.get(("NetworkAttachmentDefinition", where), set()))
            out.append(
                f"metadata.annotations[{networks.ANNOTATION}]: network {a.plain()!r}: no NetworkAttachmentDefinition "
                f"{a.name} in namespace {where} (there: {', '.join(known) or 'none'}); Multus fails the pod's sandbox "
                "and it never starts: name one of those, or leave the network to the fabric"
            )
    return out


def _reference_problems(objects: ClusterObjects, pod: dict, ns: str, made: set[tuple[str, str]]) -> list[str]:
    spec = as_dict(pod.get("spec"))
    out = []

    def need(kind: str, name: object, optional: object, where: str, why: str) -> None:
        if optional is True or not isinstance(name, str) or not name:
            return
        if not objects.has(kind, ns, name, made):
            out.append(
                f"{where}: {kind} {name!r} is in no file of the cluster (namespace {ns}); {why}: add it to the job "
                "folder" + ("" if kind == "PersistentVolumeClaim" else ", or mark the reference optional: true")
            )

    for i, v in enumerate(as_list(spec.get("volumes"))):
        v = as_dict(v)
        at = f"spec.volumes[{i}] ({v.get('name')})"
        claim = as_dict(v.get("persistentVolumeClaim"))
        need("PersistentVolumeClaim", claim.get("claimName"), None, f"{at}.persistentVolumeClaim.claimName",
             "the pod is never scheduled")  # fmt: skip
        cm = as_dict(v.get("configMap"))
        need("ConfigMap", cm.get("name"), cm.get("optional"), f"{at}.configMap.name", "the kubelet never mounts it")
        secret = as_dict(v.get("secret"))
        need("Secret", secret.get("secretName"), secret.get("optional"), f"{at}.secret.secretName",
             "the kubelet never mounts it")  # fmt: skip
        for j, source in enumerate(as_list(as_dict(v.get("projected")).get("sources"))):
            for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                ref = as_dict(as_dict(source).get(key))
                need(kind, ref.get("name"), ref.get("optional"), f"{at}.projected.sources[{j}].{key}.name",
                     "the kubelet never mounts it")  # fmt: skip
    for group, i, c in _containers(pod):
        at = f"spec.{group}[{i}] ({c.get('name')})"
        for j, env in enumerate(as_list(c.get("env"))):
            source = as_dict(as_dict(env).get("valueFrom"))
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                ref = as_dict(source.get(key))
                need(kind, ref.get("name"), ref.get("optional"), f"{at}.env[{j}].valueFrom.{key}.name",
                     "the container is never started (CreateContainerConfigError)")  # fmt: skip
        for j, env_from in enumerate(as_list(c.get("envFrom"))):
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                ref = as_dict(as_dict(env_from).get(key))
                need(kind, ref.get("name"), ref.get("optional"), f"{at}.envFrom[{j}].{key}.name",
                     "the container is never started (CreateContainerConfigError)")  # fmt: skip
    return out


def check_startable(ctx: ClusterCheck) -> None:
    objects = ClusterObjects.of(ctx.resources, ctx.declared)
    for jp in ctx.previews:
        for f in judge(objects, jp):
            ctx.err(jp.job.where(), f.message, jp.job.describe())

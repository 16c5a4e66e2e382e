"""Preview: the pods a job folder becomes, what the webhook injects, what admission decides.

For each job a folder renders, the pods its controllers create: for a TrainJob, the JobSet
Kubeflow Trainer builds from the job's ClusterTrainingRuntime, the Jobs and pods JobSet and the
Job controller make of it (:mod:`trainyard.repo.upstream.trainjob`), after Kueue has admitted the job when
it names a LocalQueue (:mod:`trainyard.repo.upstream.kueue`); for a v1 job (PyTorchJob, TFJob, MPIJob) the
pods the Training Operator creates (:mod:`trainyard.repo.upstream.training_operator`). Each pod is sent
through the same engine the webhook server runs (``webhook.engine.admit``, patch applied with
jsonpatch), then checked as kube-apiserver would: the cluster's ValidatingAdmissionPolicy (with
CEL, :mod:`trainyard.repo.upstream.vap`) and the Pod schema (kubernetes-validate, strict). The policy must
reject the pod before the webhook and admit it after; anything else is reported. The admitted pod
then goes through every other ValidatingAdmissionPolicy the cluster binds to its namespace (the
job namespaces' pod security, :mod:`trainyard.repo.generate.pod_security`), read from the cluster's render.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import jsonpatch

from trainyard.contract.errors import UserError
from trainyard.contract.names import JOB_LABELS, KUEUE_TOPOLOGY_GATE, requested_fabric
from trainyard.repo.generate import mutating_harness
from trainyard.repo.jobs import fabric_settings
from trainyard.repo.model import jobfolder, kustomize, rawyaml, rendered_facts, schema
from trainyard.repo.model.rendered import Resource, name_of, namespace_of, tree_copy
from trainyard.repo.model.repository import OVERLAYS, POLICIES, Repository
from trainyard.repo.upstream import bindings, jobset, kueue, strategic_merge, training_operator, trainjob, vap

JOB_KINDS = "TrainJob, PyTorchJob, TFJob or MPIJob"


def is_job(doc: object) -> bool:
    """A job trainyard previews: a TrainJob or a Training Operator (v1) job."""
    return trainjob.is_trainjob(doc) or training_operator.is_job(doc)


@dataclass
class Context:
    """What admission looks like on one cluster, and what its TrainJobs run on."""

    cluster: str
    policies: object  # webhook.policy.PolicySet
    profile: str
    params: dict
    policy: dict
    runtimes: list[dict] = field(default_factory=list)  # ClusterTrainingRuntimes the cluster installs
    queues: kueue.Queues = field(default_factory=kueue.Queues)
    bound: list[bindings.Bound] = field(default_factory=list)  # other policies (pod security) and bindings
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> labels
    # admission: policy (no webhook): the cluster's MutatingAdmissionPolicies, compiled
    harness: mutating_harness.Harness | None = None

    @property
    def mode(self) -> str:
        return "webhook" if self.harness is None else "policy"


@dataclass
class PodPreview:
    name: str
    before: dict
    after: dict
    action: str  # mutate | skip | deny
    profile: str | None
    reason: str = ""
    ops: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    vap_before: vap.Verdict | None = None
    vap_after: vap.Verdict | None = None
    schema_errors: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)  # the other bound policies that evaluate the admitted pod
    denied: list[str] = field(default_factory=list)  # '<policy>: <message>' of those that reject it
    limits: list[str] = field(default_factory=list)  # policy mode: the rules of mutating_policy.LIMITS it hits
    # the pod's own fabric settings that admission would rewrite or that conflict (fabric_settings.py)
    conflicts: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # the same, where the job still runs as it says
    by: str = "the webhook"  # what mutates it: the webhook, or on admission: policy clusters the policies

    def problems(self) -> list[str]:
        """What would go wrong at admission, in words."""
        out = [f"pod {self.name}: {c}" for c in self.conflicts]
        if self.action == "deny":
            out.append(f"pod {self.name}: {self.by} denies it: {self.reason}")
        if self.vap_after and self.vap_after.failures:
            out += [
                f"pod {self.name}: the admission policy rejects it after {self.by}: {m}"
                for m in self.vap_after.failures
            ]
        trainer = self.vap_before is not None and self.vap_before.matched
        if trainer and self.vap_before is not None and not self.vap_before.failures:
            out.append(
                f"pod {self.name}: the admission policy admits it even without {self.by}; "
                f"it would not catch {self.by} failing for this pod"
            )
        out += [f"pod {self.name}: {e}" for e in self.schema_errors]
        for d in self.denied:
            policy, _, message = d.partition(": ")
            out.append(f"the admission policy {policy} rejects it: {message}")
        return out


@dataclass
class JobPreview:
    job: Resource
    cluster: str
    profile: str
    pods: list[PodPreview]
    notes: list[str] = field(default_factory=list)  # what the controllers made, in words
    refused: list[str] = field(default_factory=list)  # why a controller or Kueue would not run it
    created: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) of what its controllers create

    def problems(self) -> list[str]:
        return [*self.refused, *(p for pod in self.pods for p in pod.problems())]


# overlays/<cluster>/platform/<folder> (base/apps/platform.yaml): admission, runtimes, queues, the job namespaces
PLATFORM_FOLDERS = ("webhook", "runtimes", "kueue", "namespaces")


def platform_resources(repo: Repository, cluster: str) -> list[Resource]:
    """What ``cluster``'s webhook, runtimes, Kueue and namespaces overlays render."""
    resources = []
    for folder in PLATFORM_FOLDERS:
        path = repo.root / OVERLAYS / cluster / "platform" / folder
        if folder == "webhook" or kustomize.is_kustomization(path):
            resources += kustomize.build(repo, path)
    return resources


def load_context(repo: Repository, cluster: str, resources: list[Resource] | None = None) -> Context:
    """Admission on ``cluster``: from its rendered resources, or by building its webhook,
    runtimes and Kueue overlays."""
    from webhook.policy import load_policies

    if resources is None:
        resources = platform_resources(repo, cluster)
    facts = rendered_facts.collect(resources)
    where = f"{OVERLAYS.as_posix()}/{cluster}/platform/webhook"
    if facts.params is None or facts.policy is None:
        raise UserError(f"{where}: the cluster renders no trainyard-fabric-params ConfigMap or admission policy")
    harness = None
    if facts.mode == "policy":
        if not facts.default_profile:
            raise UserError(f"{facts.params.where()}: no defaultFabric: the MutatingAdmissionPolicies read it")
        harness = mutating_harness.Harness([r.doc for r in facts.mutating_policies.values()])
    elif facts.webhook is None or not facts.profile:
        raise UserError(
            f"{where}: the cluster renders no {rendered_facts.WEBHOOK_DEPLOYMENT} Deployment with a --profile "
            "(admission: webhook) nor MutatingAdmissionPolicies (admission: policy); it needs base/webhook "
            "and a defaultFabric in trainyard-fabric-params"
        )
    profile = facts.default_profile or ""
    policies = load_policies(repo.root / POLICIES)
    if policies.get(profile) is None:
        raise UserError(
            f"{facts.profile_where or facts.params.where()}: the default profile {profile!r} names no profile in "
            f"{POLICIES}/ (known: {', '.join(policies.names)})"
        )
    vap.require_compiles(facts.policy.doc, facts.policy.where())
    runtimes = [r.doc for r in resources if trainjob.is_runtime(r.doc)]
    bound = bindings.collect(resources, skip=(rendered_facts.VAP_NAME,))
    return Context(cluster, policies, profile, facts.params.doc, facts.policy.doc, runtimes,
                   kueue.Queues.collect(resources), bound, bindings.namespace_labels(resources),
                   harness)  # fmt: skip


def _admit_by_policy(out: PodPreview, pod: dict, namespace: str, ctx: Context) -> None:
    """Policy mode: the pod through the cluster's MutatingAdmissionPolicies (their CEL, evaluated)."""
    assert ctx.harness is not None
    data = ctx.params.get("data") if isinstance(ctx.params.get("data"), dict) else {}
    offered = {k.removeprefix("fabric."): v for k, v in data.items() if k.startswith("fabric.")}
    before = mutating_harness.normalise(pod)
    try:
        outcome = ctx.harness.admit(before, namespace=namespace, default=ctx.profile, offered=offered)
    except mutating_harness.HarnessError as exc:  # failurePolicy Ignore: the pod goes on unmutated
        out.warnings.append(f"the mutating admission policy fails on it, so it is not mutated: {exc}")
        return
    wanted = requested_fabric((pod.get("metadata") or {}).get("labels")) or ctx.profile
    profile = ctx.policies.get(wanted) if isinstance(wanted, str) else None
    out.limits = mutating_harness.limits_hit(before, profile)
    out.warnings += [f"the policy is skipped for an error (failurePolicy Ignore): {e}" for e in outcome.errors]
    if outcome.profile is None:
        out.reason = "no MutatingAdmissionPolicy matches it"
        return
    out.action, out.profile, out.ops, out.after = "mutate", outcome.profile, outcome.ops, outcome.pod


def preview_pod(pod: dict, ctx: Context, env_field: str = "") -> PodPreview:
    """``pod`` through admission; ``env_field``: where its job sets the containers' env (messages)."""
    from webhook.engine import MutationError, admit

    name = jobset.pod_name(pod)
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    out = PodPreview(name=name, before=pod, after=pod, action="skip", profile=None)
    if ctx.harness is not None:
        out.by = "the MutatingAdmissionPolicies"
        _admit_by_policy(out, pod, namespace, ctx)
        _own_settings(out, ctx, namespace, env_field)
        return _admitted(out, ctx)
    try:
        decision = admit(tree_copy(pod), ctx.policies, ctx.profile, namespace)
    except MutationError as exc:
        out.action, out.reason = "deny", str(exc)
        return out
    out.action, out.reason = decision.action, decision.reason
    out.profile = decision.profile.name if decision.profile else None
    if decision.action == "mutate" and decision.mutation is not None:
        out.ops = decision.mutation.ops
        out.warnings = decision.mutation.warnings
        out.after = jsonpatch.apply_patch(tree_copy(pod), decision.mutation.ops, in_place=True)
        _own_settings(out, ctx, namespace, env_field)
    return _admitted(out, ctx)


def _own_settings(out: PodPreview, ctx: Context, namespace: str, env_field: str) -> None:
    profile = ctx.policies.get(out.profile) if out.action == "mutate" and out.profile else None
    if profile is not None:
        found = fabric_settings.check(out.before, out.after, profile, namespace, env_field)
        out.conflicts, out.notices = found.errors, found.warnings


def _admitted(out: PodPreview, ctx: Context) -> PodPreview:
    """What the ValidatingAdmissionPolicies and the schema say of the pod before and after mutation."""
    pod = out.before
    out.vap_before = vap.check(pod, ctx.params, ctx.policy)
    out.vap_after = vap.check(out.after, ctx.params, ctx.policy) if out.action != "deny" else None
    out.schema_errors = schema.validate(out.after)
    if out.action != "deny":
        out.policies = bindings.applies(ctx.bound, out.after, ctx.namespaces)
        out.denied = bindings.evaluate(ctx.bound, out.after, ctx.namespaces)
    return out


def preview_job(job: Resource, ctx: Context) -> JobPreview:
    """The job's pods through admission. Raises JobError / TrainJobError when the job's
    controller would refuse the job outright."""
    if trainjob.is_trainjob(job.doc):
        return preview_trainjob(job, ctx)
    pods = training_operator.expand_job(job.doc)
    kind = training_operator.KINDS[job.kind]
    jp = JobPreview(job=job, cluster=ctx.cluster, profile=ctx.profile,
                    pods=[preview_pod(p, ctx, _replica_env(kind, p)) for p in pods])  # fmt: skip
    jp.created = [("Pod", name_of(p)) for p in pods]
    name = name_of(job.doc)
    if job.kind == "MPIJob":  # kubeflow/trainer@v1.9.4:pkg/controller.v1/mpi/mpijob.go configSuffix, launcherSuffix
        jp.created += [("ConfigMap", f"{name}-config"), ("ServiceAccount", f"{name}-launcher"),
                       ("Role", f"{name}-launcher"), ("RoleBinding", f"{name}-launcher")]  # fmt: skip
    else:  # a headless Service per pod, named as the pod (pkg/controller.v1/common/service.go, GenGeneralName)
        jp.created += [("Service", name_of(p)) for p in pods]
    return jp


@dataclass
class TrainJobRun:
    """A TrainJob as it runs on a cluster: its runtime, Kueue's admission and the objects it becomes."""

    runtime: dict
    admission: kueue.Admission | None
    expansion: trainjob.Expansion
    admitted: dict  # the TrainJob with Kueue's runtime patch, unsuspended


def run_trainjob(job: Resource, ctx: Context) -> TrainJobRun:
    """Raises TrainJobError naming what Trainer, JobSet or Kueue would refuse."""
    doc = job.doc
    runtime = trainjob.find_runtime(doc, ctx.runtimes)
    problems = trainjob.admission_problems(doc, runtime)
    if runtime is None and not problems:
        known = ", ".join(sorted(name_of(r) for r in ctx.runtimes)) or "none"
        problems = [f"{trainjob.missing_runtime(doc)} (runtimes on cluster {ctx.cluster}: {known})"]
    if problems:
        raise trainjob.TrainJobError("; ".join(problems))
    uid = jobset.stand_in_uid("TrainJob", namespace_of(doc), name_of(doc))
    admission, refused = kueue.admit(doc, trainjob.build_jobset(doc, runtime), ctx.queues, uid)
    if refused:
        raise trainjob.TrainJobError("Kueue would never admit it: " + "; ".join(refused))
    admitted = tree_copy(doc)
    if admission is not None:  # the Kueue webhook appends its patch; admission fills it and unsuspends
        spec = admitted.setdefault("spec", {})
        spec["runtimePatches"] = [*(spec.get("runtimePatches") or []), admission.patch]
        spec["suspend"] = False
    try:
        expansion = trainjob.expand(admitted, runtime)
    except (jobset.JobSetError, strategic_merge.PatchError) as exc:
        raise trainjob.TrainJobError(str(exc)) from None
    return TrainJobRun(runtime, admission, expansion, admitted)


def preview_trainjob(job: Resource, ctx: Context) -> JobPreview:
    run = run_trainjob(job, ctx)
    e = run.expansion
    notes = [
        f"runtime {name_of(run.runtime)}: JobSet {name_of(e.jobset)}, "
        + ", ".join(f"Job {name_of(j)} ({j['spec'].get('completions', 1)} pods)" for j in e.jobs),
        f"headless Service {name_of(e.service)}: each pod is reached at <hostname>.{name_of(e.service)}"
        + (f"; PET_MASTER_ADDR {e.master_addr}" if e.master_addr else ""),
    ]
    if run.admission is not None:
        a = run.admission
        notes.append(
            f"Kueue: LocalQueue {kueue.queue_name(job.doc)} -> ClusterQueue {a.cluster_queue}, flavor {a.flavor}, "
            f"Workload {a.workload}; pods are created with Kueue's topology gate and placed by Kueue"
        )
    elif kueue.queue_name(job.doc) is None:
        notes.append(f"Kueue: not queued (no {kueue.QUEUE_LABEL} label); the webhook's affinity places the pods")
    pods = [preview_pod(p, ctx, "spec.trainer.env, or the runtime's") for p in e.pods]
    jp = JobPreview(job=job, cluster=ctx.cluster, profile=ctx.profile, pods=pods, notes=notes)
    name = name_of(job.doc)
    # kubeflow/trainer@v2.3.0: the JobSet (plugins/jobset), the runtime snapshot (runtime/core/snapshot.go
    # runtimeSnapshotSuffix), the MPI plugin's Secret and ConfigMap (constants.go MPISSHAuthSecretSuffix,
    # MPIHostfileConfigMapSuffix); JobSet v0.12.0: its Jobs and the headless Service of its subdomain.
    jp.created = [("JobSet", name_of(e.jobset)), ("Service", name_of(e.service)),
                  *(("Job", name_of(j)) for j in e.jobs), ("ConfigMap", f"{name}-runtime-snapshot")]  # fmt: skip
    if "mpi" in ((run.runtime.get("spec") or {}).get("mlPolicy") or {}):
        jp.created += [("Secret", f"{name}-mpi-ssh-auth"), ("ConfigMap", f"{name}-mpi-hostfile")]
    if run.admission is not None:
        jp.created.append(("Workload", run.admission.workload))
    return jp


def _replica_env(kind: training_operator.JobKind, pod: dict) -> str:
    """Where a v1 job's pod template sets a container's env: spec.<kind>ReplicaSpecs.<Type>.template.spec."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get("training.kubeflow.org/replica-type") or ""
    typ = next((t for t in kind.replica_types if t.lower() == str(label).lower()), None)
    return f"spec.{kind.replicas_field}.{typ}.template.spec" if typ else ""


def cluster_of(repo: Repository, path: Path) -> str:
    """The cluster of a job folder overlays/<cluster>/jobs/<job>."""
    rel = Path(repo.rel(path))
    parts = rel.parts
    if len(parts) < 3 or parts[0] != OVERLAYS.as_posix() or parts[2] != "jobs":
        raise UserError(f"{rel}: not a job folder; preview takes overlays/<cluster>/jobs/<job>")
    return repo.require_cluster(parts[1])


def cluster_job_pods(repo: Repository, cluster: str = "*") -> list[dict]:
    """The pods of every job folder of ``cluster`` (of every cluster for "*"), as their controllers
    create them, job by job: what the benchmarks and the cluster tests send through admission."""
    folders = sorted(p for p in (repo.root / "overlays").glob(f"{cluster}/jobs/*") if p.is_dir())
    return [pod.before for folder in folders for job in preview_path(repo, folder) for pod in job.pods]


def preview_path(repo: Repository, path: str | Path) -> list[JobPreview]:
    """Preview every Training Operator job that the job folder ``path`` renders."""
    folder = Path(path)
    if not folder.is_absolute():
        folder = (Path.cwd() / folder).resolve()
    cluster = cluster_of(repo, folder)
    refused = jobfolder.scan(repo, folder)
    if refused:
        raise UserError("\n".join(f"{p.where}: {p.message}" for p in refused))
    resources = kustomize.build(repo, folder)
    jobs = [r for r in resources if is_job(r.doc)]
    if not jobs:
        raise UserError(f"{repo.rel(folder)}: renders no {JOB_KINDS}")
    ctx = load_context(repo, cluster)
    out = []
    for job in jobs:
        try:
            out.append(preview_job(job, ctx))
        except (training_operator.JobError, trainjob.TrainJobError) as exc:
            raise UserError(f"{job.where()}: {job.describe()}: {exc}") from None
    return out


# ---------------------------------------------------------------------------------------------
# Presentation


def _containers(pod: dict, group: str = "containers") -> dict[str, dict]:
    spec = pod.get("spec") or {}
    return {c.get("name", f"#{i}"): c for i, c in enumerate(spec.get(group) or []) if isinstance(c, dict)}


def _env_map(c: dict) -> dict[str, str]:
    out = {}
    for e in c.get("env") or []:
        if isinstance(e, dict) and "name" in e:
            out[e["name"]] = e.get("value", "(valueFrom)") if "valueFrom" not in e else "(valueFrom)"
    return out


def injected(before: dict, after: dict) -> list[str]:
    """What changed between the pod as created and as admitted, one line per setting."""
    lines: list[str] = []
    ann_b = (before.get("metadata") or {}).get("annotations") or {}
    ann_a = (after.get("metadata") or {}).get("annotations") or {}
    for k, v in ann_a.items():
        if ann_b.get(k) != v:
            lines.append(f"annotation {k}: {v}")
    changed = _container_changes(_containers(before), _containers(after))
    lines += [f"container {name}: {line}" for name, items in changed.items() for line in items]
    for name, items in _container_changes(
        _containers(before, "initContainers"), _containers(after, "initContainers")
    ).items():
        same = next((c for c, theirs in changed.items() if theirs and set(items) <= set(theirs)), None)
        if same is not None and items:
            lines.append(f"init container {name}: the same {_kinds(items)} as container {same}")
        else:
            lines += [f"init container {name}: {line}" for line in items]
    sb, sa = before.get("spec") or {}, after.get("spec") or {}
    vols_b = {v.get("name") for v in sb.get("volumes") or []}
    for v in sa.get("volumes") or []:
        if v.get("name") not in vols_b:
            detail = v.get("emptyDir")
            lines.append(
                f"volume {v.get('name')}: emptyDir {rawyaml.safe_dump(detail, default_flow_style=True).strip()}"
            )
    tol_b = sb.get("tolerations") or []
    for t in sa.get("tolerations") or []:
        if t not in tol_b:
            lines.append(f"toleration {t.get('key', '*')} {t.get('operator', 'Equal')} {t.get('effect', '')}".rstrip())
    aff_b = rawyaml.safe_dump(sb.get("affinity") or {})
    if rawyaml.safe_dump(sa.get("affinity") or {}) != aff_b:
        label = next((k for k in JOB_LABELS if k in ((after.get("metadata") or {}).get("labels") or {})), "job")
        lines.append(f"affinity: co-locate the job's pods (podAffinity on {label})")
    for t in sa.get("topologySpreadConstraints") or []:
        if t not in (sb.get("topologySpreadConstraints") or []):
            lines.append(
                f"topology spread: {t.get('topologyKey')} maxSkew {t.get('maxSkew')} ({t.get('whenUnsatisfiable')})"
            )
    return lines


def _container_changes(cb: dict[str, dict], ca: dict[str, dict]) -> dict[str, list[str]]:
    """Per container: what it gained (env, capabilities, mounts, limits), one item per setting."""
    out: dict[str, list[str]] = {}
    for name, c in ca.items():
        old = cb.get(name, {})
        lines = out.setdefault(name, [])
        env_b, env_a = _env_map(old), _env_map(c)
        for k, v in env_a.items():
            if k not in env_b:
                lines.append(f"env {k}={v}")
            elif env_b[k] != v:
                lines.append(f"env {k}={v} (was {env_b[k]})")
        caps_b = ((old.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        caps_a = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        lines += [f"capability {cap}" for cap in caps_a if cap not in caps_b]
        mounts_b = {m.get("mountPath") for m in old.get("volumeMounts") or []}
        for m in c.get("volumeMounts") or []:
            if m.get("mountPath") not in mounts_b:
                lines.append(f"mount {m.get('name')} at {m.get('mountPath')}")
        lim_b = (old.get("resources") or {}).get("limits") or {}
        lim_a = (c.get("resources") or {}).get("limits") or {}
        lines += [f"limit {k}: {v}" for k, v in lim_a.items() if k not in lim_b]
    return out


def _kinds(items: list[str]) -> str:
    """'env, mount and capability' for a list of changes, in words."""
    words = {"env": "env", "mount": "/dev/shm mount", "capability": "capabilities", "limit": "limits"}
    seen = list(dict.fromkeys(words[i.split(" ", 1)[0]] for i in items))
    return seen[0] if len(seen) == 1 else ", ".join(seen[:-1]) + " and " + seen[-1]


def _yaml(doc: dict) -> list[str]:
    return rawyaml.safe_dump(doc, sort_keys=False, width=120).splitlines(keepends=True)


def unified_diff(pod: PodPreview) -> str:
    return "".join(
        difflib.unified_diff(
            _yaml(pod.before), _yaml(pod.after), fromfile=f"{pod.name} (created)", tofile=f"{pod.name} (admitted)"
        )
    )


def format_job(jp: JobPreview, *, diff: bool = False) -> str:
    job = jp.job
    lines = [
        f"{job.describe()} ({job.where()}) on cluster {jp.cluster}, default fabric profile {jp.profile}: "
        f"{len(jp.pods)} pod(s)"
    ]
    lines += [f"  {note}" for note in jp.notes]
    lines += [f"  error: {p}" for p in jp.refused]
    for pod in jp.pods:
        lines.append("")
        head = f"pod {pod.name}: "
        if pod.action == "mutate":
            head += f"profile {pod.profile}, {len(pod.ops)} patch operations"
        else:
            head += f"{pod.action}: {pod.reason}"
        lines.append(head)
        lines.append("  " + _origin(pod.before))
        for item in injected(pod.before, pod.after):
            lines.append(f"  + {item}")
        if any(
            g.get("name") == KUEUE_TOPOLOGY_GATE for g in (pod.after.get("spec") or {}).get("schedulingGates") or []
        ):
            lines.append(f"  placement: Kueue (scheduling gate {KUEUE_TOPOLOGY_GATE}); the webhook adds no affinity")
        for w in [*pod.warnings, *pod.notices]:
            lines.append(f"  warning: {w}")
        if pod.vap_before is not None and pod.vap_before.matched:
            before = "rejected" if pod.vap_before.failures else "ADMITTED"
            after = "admitted" if pod.vap_after and not pod.vap_after.failures else "REJECTED"
            lines.append(f"  admission policy: without {pod.by} {before}; after {pod.by} {after}")
        elif pod.vap_before is not None:
            lines.append("  admission policy: does not apply (not a trainer pod)")
        for name in pod.policies:
            verdict = "REJECTED" if any(d.startswith(name + ": ") for d in pod.denied) else "admitted"
            lines.append(f"  admission policy {name}: {verdict}")
        for p in pod.problems():
            lines.append(f"  error: {p}")
        if diff:
            lines.append(unified_diff(pod).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _origin(pod: dict) -> str:
    """Which controller made the pod, and the env it set for the job's ranks, in one line."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    env = {k: v for c in _containers(pod).values() for k, v in _env_map(c).items()}
    ranks = [
        f"{k}={env[k]}" for k in sorted(env) if k.startswith(("MASTER_", "PET_", "WORLD_SIZE", "RANK", "TF_CONFIG"))
    ]
    if jobset.JOB_INDEX_LABEL in labels:
        dns = jobset.pod_dns_name(pod)
        head = (
            f"from Trainer/JobSet: Job {labels.get(jobset.JOB_NAME_LABELS[0])} index "
            f"{labels.get(jobset.COMPLETION_INDEX)}" + (f", reached at {dns}" if dns else "")
        )
    else:
        head = (
            f"from the operator: replica {labels.get(training_operator.REPLICA_TYPE_LABEL)}"
            f" {labels.get(training_operator.REPLICA_INDEX_LABEL, '')}".rstrip()
        )
    return head + (f"; {' '.join(ranks)}" if ranks else "")


def pods_yaml(jp: JobPreview) -> str:
    return rawyaml.safe_dump_all([p.after for p in jp.pods], sort_keys=False, width=120)

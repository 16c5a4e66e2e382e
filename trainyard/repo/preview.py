"""Preview: the pods a job folder becomes, what the webhook injects, what admission decides.

For each Training Operator job a folder renders: the pods the operator creates
(:func:`expand_job`), each sent through the same engine the webhook server runs
(``webhook.engine.admit``, patch applied with jsonpatch), then checked as kube-apiserver would:
the cluster's ValidatingAdmissionPolicy (with CEL, :mod:`trainyard.repo.vap`) and the Pod schema
(kubernetes-validate, strict). The policy must reject the pod before the webhook and admit it
after; anything else is reported.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path

import jsonpatch
import yaml

from trainyard.contract.errors import UserError
from trainyard.repo import cluster_facts, kustomize, schema, training_operator, vap
from trainyard.repo.rendered import Resource
from trainyard.repo.repository import OVERLAYS, POLICIES, Repository

expand_job = training_operator.expand_job  # the pods the Training Operator creates for a job


@dataclass
class Context:
    """What admission looks like on one cluster."""

    cluster: str
    policies: object  # webhook.policy.PolicySet
    profile: str
    params: dict
    policy: dict


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

    def problems(self) -> list[str]:
        """What would go wrong at admission, in words."""
        out = []
        if self.action == "deny":
            out.append(f"pod {self.name}: the webhook denies it: {self.reason}")
        if self.vap_after and self.vap_after.failures:
            out += [
                f"pod {self.name}: the admission policy rejects it after the webhook: {m}"
                for m in self.vap_after.failures
            ]
        trainer = self.vap_before is not None and self.vap_before.matched
        if trainer and self.vap_before is not None and not self.vap_before.failures:
            out.append(
                f"pod {self.name}: the admission policy admits it even without the webhook; "
                "it would not catch a webhook outage for this pod"
            )
        out += [f"pod {self.name}: {e}" for e in self.schema_errors]
        return out


@dataclass
class JobPreview:
    job: Resource
    cluster: str
    profile: str
    pods: list[PodPreview]

    def problems(self) -> list[str]:
        return [p for pod in self.pods for p in pod.problems()]


def load_context(repo: Repository, cluster: str, resources: list[Resource] | None = None) -> Context:
    """Admission on ``cluster``: from its rendered resources, or by building its webhook overlay."""
    from webhook.policy import load_policies

    if resources is None:
        resources = kustomize.build(repo, f"{OVERLAYS.as_posix()}/{cluster}/platform/webhook")
    facts = cluster_facts.collect(resources)
    where = f"{OVERLAYS.as_posix()}/{cluster}/platform/webhook"
    if facts.webhook is None or not facts.profile:
        raise UserError(
            f"{where}: the cluster renders no {cluster_facts.WEBHOOK_DEPLOYMENT} Deployment with a --profile; "
            "it needs base/webhook and a defaultFabric in trainyard-fabric-params"
        )
    if facts.params is None or facts.policy is None:
        raise UserError(f"{where}: the cluster renders no trainyard-fabric-params ConfigMap or admission policy")
    policies = load_policies(repo.root / POLICIES)
    if policies.get(facts.profile) is None:
        raise UserError(
            f"{facts.profile_where}: the webhook's --profile {facts.profile!r} names no profile in "
            f"{POLICIES}/ (known: {', '.join(policies.names)})"
        )
    return Context(cluster, policies, facts.profile, facts.params.doc, facts.policy.doc)


def preview_pod(pod: dict, ctx: Context) -> PodPreview:
    from webhook.engine import MutationError, admit

    name = str((pod.get("metadata") or {}).get("name", ""))
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    out = PodPreview(name=name, before=pod, after=pod, action="skip", profile=None)
    try:
        decision = admit(copy.deepcopy(pod), ctx.policies, ctx.profile, namespace)
    except MutationError as exc:
        out.action, out.reason = "deny", str(exc)
        return out
    out.action, out.reason = decision.action, decision.reason
    out.profile = decision.profile.name if decision.profile else None
    if decision.action == "mutate" and decision.mutation is not None:
        out.ops = decision.mutation.ops
        out.warnings = decision.mutation.warnings
        out.after = jsonpatch.apply_patch(pod, decision.mutation.ops)
    out.vap_before = vap.check(pod, ctx.params, ctx.policy)
    out.vap_after = vap.check(out.after, ctx.params, ctx.policy) if out.action != "deny" else None
    out.schema_errors = schema.validate(out.after)
    return out


def preview_job(job: Resource, ctx: Context) -> JobPreview:
    pods = expand_job(job.doc)
    return JobPreview(job=job, cluster=ctx.cluster, profile=ctx.profile, pods=[preview_pod(p, ctx) for p in pods])


def cluster_of(repo: Repository, path: Path) -> str:
    """The cluster of a job folder overlays/<cluster>/jobs/<job>."""
    rel = Path(repo.rel(path))
    parts = rel.parts
    if len(parts) < 3 or parts[0] != OVERLAYS.as_posix() or parts[2] != "jobs":
        raise UserError(f"{rel}: not a job folder; preview takes overlays/<cluster>/jobs/<job>")
    return repo.require_cluster(parts[1])


def preview_path(repo: Repository, path: str | Path) -> list[JobPreview]:
    """Preview every Training Operator job that the job folder ``path`` renders."""
    folder = Path(path)
    if not folder.is_absolute():
        folder = (Path.cwd() / folder).resolve()
    cluster = cluster_of(repo, folder)
    resources = kustomize.build(repo, folder)
    jobs = [r for r in resources if training_operator.is_job(r.doc)]
    if not jobs:
        raise UserError(f"{repo.rel(folder)}: renders no PyTorchJob, TFJob or MPIJob")
    ctx = load_context(repo, cluster)
    out = []
    for job in jobs:
        try:
            out.append(preview_job(job, ctx))
        except training_operator.JobError as exc:
            raise UserError(f"{job.where()}: {exc}") from None
    return out


# ---------------------------------------------------------------------------------------------
# Presentation


def _containers(pod: dict) -> dict[str, dict]:
    spec = pod.get("spec") or {}
    return {c.get("name", f"#{i}"): c for i, c in enumerate(spec.get("containers") or []) if isinstance(c, dict)}


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
    cb, ca = _containers(before), _containers(after)
    for name, c in ca.items():
        old = cb.get(name, {})
        env_b, env_a = _env_map(old), _env_map(c)
        for k, v in env_a.items():
            if k not in env_b:
                lines.append(f"container {name}: env {k}={v}")
            elif env_b[k] != v:
                lines.append(f"container {name}: env {k}={v} (was {env_b[k]})")
        caps_b = ((old.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        caps_a = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        for cap in caps_a:
            if cap not in caps_b:
                lines.append(f"container {name}: capability {cap}")
        mounts_b = {m.get("mountPath") for m in old.get("volumeMounts") or []}
        for m in c.get("volumeMounts") or []:
            if m.get("mountPath") not in mounts_b:
                lines.append(f"container {name}: mount {m.get('name')} at {m.get('mountPath')}")
        lim_b = (old.get("resources") or {}).get("limits") or {}
        lim_a = (c.get("resources") or {}).get("limits") or {}
        for k, v in lim_a.items():
            if k not in lim_b:
                lines.append(f"container {name}: limit {k}: {v}")
    sb, sa = before.get("spec") or {}, after.get("spec") or {}
    vols_b = {v.get("name") for v in sb.get("volumes") or []}
    for v in sa.get("volumes") or []:
        if v.get("name") not in vols_b:
            detail = v.get("emptyDir")
            lines.append(f"volume {v.get('name')}: emptyDir {yaml.safe_dump(detail, default_flow_style=True).strip()}")
    tol_b = sb.get("tolerations") or []
    for t in sa.get("tolerations") or []:
        if t not in tol_b:
            lines.append(f"toleration {t.get('key', '*')} {t.get('operator', 'Equal')} {t.get('effect', '')}".rstrip())
    aff_b = yaml.safe_dump(sb.get("affinity") or {})
    if yaml.safe_dump(sa.get("affinity") or {}) != aff_b:
        lines.append("affinity: co-locate the job's pods (podAffinity on the job-name label)")
    for t in sa.get("topologySpreadConstraints") or []:
        if t not in (sb.get("topologySpreadConstraints") or []):
            lines.append(
                f"topology spread: {t.get('topologyKey')} maxSkew {t.get('maxSkew')} ({t.get('whenUnsatisfiable')})"
            )
    return lines


def _yaml(doc: dict) -> list[str]:
    return yaml.safe_dump(doc, sort_keys=False, width=120).splitlines(keepends=True)


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
    for pod in jp.pods:
        lines.append("")
        head = f"pod {pod.name}: "
        if pod.action == "mutate":
            head += f"profile {pod.profile}, {len(pod.ops)} patch operations"
        else:
            head += f"{pod.action}: {pod.reason}"
        lines.append(head)
        role = (pod.before.get("metadata") or {}).get("labels", {})
        env = {k: v for c in _containers(pod.before).values() for k, v in _env_map(c).items()}
        operator_env = [
            f"{k}={env[k]}" for k in sorted(env) if k.startswith(("MASTER_", "PET_", "WORLD_SIZE", "RANK", "TF_CONFIG"))
        ]
        lines.append(
            f"  from the operator: replica {role.get(training_operator.REPLICA_TYPE_LABEL)}"
            f" {role.get(training_operator.REPLICA_INDEX_LABEL, '')}".rstrip()
            + (f"; {' '.join(operator_env)}" if operator_env else "")
        )
        for item in injected(pod.before, pod.after):
            lines.append(f"  + {item}")
        for w in pod.warnings:
            lines.append(f"  warning: {w}")
        if pod.vap_before is not None and pod.vap_before.matched:
            before = "rejected" if pod.vap_before.failures else "ADMITTED"
            after = "admitted" if pod.vap_after and not pod.vap_after.failures else "REJECTED"
            lines.append(f"  admission policy: without the webhook {before}; after the webhook {after}")
        elif pod.vap_before is not None:
            lines.append("  admission policy: does not apply (not a trainer pod)")
        for p in pod.problems():
            lines.append(f"  error: {p}")
        if diff:
            lines.append(unified_diff(pod).rstrip("\n"))
    return "\n".join(lines) + "\n"


def pods_yaml(jp: JobPreview) -> str:
    return yaml.safe_dump_all([p.after for p in jp.pods], sort_keys=False, width=120)

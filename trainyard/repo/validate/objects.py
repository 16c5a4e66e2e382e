"""Checks of every rendered object: schema, scope, images, the NCCL env of every container."""

from __future__ import annotations

import re

import yaml

from trainyard.contract.images import FLOATING_FIX, floating
from trainyard.contract.k8s import (
    ANNOTATIONS_MAX_BYTES,
    annotations_size,
    label_value_problem,
    qualified_name_problem,
)
from trainyard.contract.nccl import lint_env
from trainyard.repo.model import kustomize, nad, rawyaml, releases, schema
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource, containers, pod_templates
from trainyard.repo.upstream import training_operator, trainjob
from trainyard.repo.validate import ClusterCheck


def check_resource(ctx: ClusterCheck, r: Resource) -> None:
    where, obj = r.where(), r.describe()
    if not r.kind or not r.api_version:
        ctx.err(where, "apiVersion and kind are required", obj)
        return
    if (r.group, r.kind) in CLUSTER_SCOPED and r.namespace:
        set_at = _namespace_line(ctx, r)
        if set_at:  # kustomize sets the namespace on kinds it does not know to be cluster-scoped
            ctx.err(where, f"{r.kind} is cluster-scoped, but the namespace: {r.namespace} of {set_at} gives it "
                    f"metadata.namespace {r.namespace!r}, which kube-apiserver refuses on it; move the {r.kind} "
                    "to a folder without namespace:, or out of a job folder", obj)  # fmt: skip
        else:
            ctx.err(where, f"{r.kind} is cluster-scoped but has metadata.namespace {r.namespace!r}; remove it", obj)
    check_metadata(ctx, r, "metadata", r.doc.get("metadata"))
    for path, tpl in pod_templates(r.doc):
        if path:
            check_metadata(ctx, r, f"{path}.metadata", tpl.get("metadata"))
    if schema.has_schema(r.kind, r.api_version):
        for e in schema.validate(r.doc):
            ctx.err(where, f"schema (Kubernetes {schema.KUBERNETES_VERSION}, strict): {e}", obj)
    elif training_operator.is_job(r.doc) or trainjob.is_runtime(r.doc):
        for path, tpl in pod_templates(r.doc):
            for e in schema.validate_pod_template(tpl):
                ctx.err(where, f"{path} as a PodTemplateSpec: {e}", obj)
        if trainjob.is_runtime(r.doc):
            for p in trainjob.runtime_problems(r.doc):
                ctx.err(where, f"Kubeflow Trainer {trainjob.TRAINER_VERSION} would refuse it: {p}", obj)
            jobset = ((r.doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            if isinstance(jobset, dict) and jobset.get("ttlSecondsAfterFinished") is not None:
                # a TrainJob's runtimePatches cannot set it (JobSetSpecPatch holds replicatedJobs only)
                ctx.err(
                    where,
                    "spec.template.spec.ttlSecondsAfterFinished: JobSet deletes the finished JobSet, and Kubeflow "
                    f"Trainer {trainjob.TRAINER_VERSION} then recreates a failed TrainJob's JobSet with its restart "
                    "count reset (kubeflow/trainer#3737, #3779); leave it unset (`trainyard pins` lists this issue)",
                    obj,
                )
    elif nad.is_nad(r.doc):
        errors, warnings = nad.config_problems(r.doc)
        for e in errors:
            ctx.err(where, e, obj)
        for w in warnings:
            ctx.warn(where, w, obj)
    for path, tpl in pod_templates(r.doc):
        for cpath, c in containers(tpl):
            check_image(ctx, r, f"{path}.{cpath}".lstrip("."), c)
            if not training_operator.is_job(r.doc):  # jobs: linted with their fabric's transport (check_jobs)
                check_env(ctx, r, f"{path}.{cpath}".lstrip("."), c)


# a controller told which image to start for others (cert-manager's --acme-http01-solver-image=)
_IMAGE_FLAG = re.compile(r"^--[a-z0-9-]*image=(.+)$")


def check_image(ctx: ClusterCheck, r: Resource, path: str, c: dict) -> None:
    image = c.get("image")
    if isinstance(image, str) and image:  # required-ness is the schema's business
        _check_reference(ctx, r, f"{path}.image", image)
    for i, arg in enumerate(c.get("args") or []):
        m = _IMAGE_FLAG.match(arg) if isinstance(arg, str) else None
        if m:
            _check_reference(ctx, r, f"{path}.args[{i}]", m[1])


def _check_reference(ctx: ClusterCheck, r: Resource, path: str, image: str) -> None:
    why = floating(image)
    if why is None:
        return
    release = releases.of_upstream(r)
    came = f" (upstream: {release.name} {release.version}, Application {r.app})" if release else ""
    fix = FLOATING_FIX
    if release:
        fix += " (a kustomization's images: or the Application's Helm values)"
    ctx.err(r.where(), f"{path} {image!r} {why}{came}: {fix}", r.describe())


def check_env(ctx: ClusterCheck, r: Resource, path: str, c: dict, expect: str | None = None) -> None:
    env = c.get("env")
    if not isinstance(env, list):
        return
    pairs = [
        (e["name"], e.get("value") if isinstance(e.get("value"), str) else None)
        for e in env
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    ]
    for f in lint_env(pairs, expect_transport=expect):
        line = f"{path}.env {f.name}: {f.message}"
        (ctx.err if f.severity == "error" else ctx.warn)(r.where(), line, r.describe())


def _namespace_line(ctx: ClusterCheck, r: Resource) -> str | None:
    """``file:line`` of the ``namespace:`` in the kustomization of the folder ``r`` was built from,
    when that is where its namespace comes from (the file that defines it sets none)."""
    if not r.source or not r.origin:
        return None
    origin = ctx.repo.root / r.origin
    file = kustomize.kustomization_file(ctx.repo.root / r.source)
    try:
        if file is None or not origin.is_file() or origin.stat().st_size > 4 << 20:
            return None
        if re.search(rf"(?m)^\s+namespace:\s*['\"]?{re.escape(r.namespace or '')}['\"]?\s*$", origin.read_text()):
            return None  # the file itself names it
        for doc in rawyaml.load(file.read_text()):
            node = rawyaml.get(doc, "namespace")
            if node is not None and rawyaml.scalar(node) == r.namespace:
                return f"{ctx.repo.rel(file)}:{rawyaml.line(node)}"
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return None


def check_metadata(ctx: ClusterCheck, r: Resource, path: str, meta: object) -> None:
    """Labels and annotations within Kubernetes' limits (apimachinery ValidateLabels,
    ValidateAnnotations, ValidateAnnotationsSize), on the object as rendered: what a kustomization's
    common labels or several patches add up to. Job folders are also checked line by line before
    kustomize runs (trainyard.repo.model.jobfolder)."""
    if not isinstance(meta, dict):
        return
    labels, annotations = meta.get("labels"), meta.get("annotations")
    for key, value in (labels or {}).items() if isinstance(labels, dict) else ():
        problem = qualified_name_problem(str(key)) or label_value_problem(str(value))
        if problem:
            ctx.err(r.where(), f"{path}.labels: {problem}", r.describe())
    if isinstance(annotations, dict):
        for key in annotations:
            problem = qualified_name_problem(str(key).lower())
            if problem:
                ctx.err(r.where(), f"{path}.annotations: key {problem}", r.describe())
        size = annotations_size(annotations)
        if size > ANNOTATIONS_MAX_BYTES:
            ctx.err(
                r.where(),
                f"{path}.annotations: {size:,} bytes in all (keys and values), over Kubernetes' limit of "
                f"{ANNOTATIONS_MAX_BYTES:,} (256 KiB); the API server refuses the object",
                r.describe(),
            )

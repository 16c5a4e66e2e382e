"""The offline check of custom resources against their CRDs' schemas (validate's
``check_custom_schema``) agrees with kube-apiserver's strict field validation: every Argo CD and
Prometheus Operator object the dev cluster renders, broken in several ways (an unknown field at
each level, each scalar given another type), is refused by both or accepted by both. Those kinds
have no admission webhook, so kube-apiserver's answer is its schema's alone."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from trainyard.cluster.client import ApiError
from trainyard.cluster.up import render_for
from trainyard.repo.model import declared, repository, schema, upstream
from trainyard.repo.validate import installs

pytestmark = pytest.mark.cluster

GROUPS = {"argoproj.io", declared.MONITORING_GROUP}


def mutations(doc: dict) -> Iterator[tuple[str, dict]]:
    """(what changed, the changed copy): an unknown field in each mapping of ``spec`` (the first
    levels), and each of the first scalars of ``spec`` with another type."""
    mappings: list[list] = []
    scalars: list[list] = []

    def walk(node: object, path: list) -> None:
        if isinstance(node, dict):
            if len(path) <= 4:
                mappings.append(path)
            for k, v in node.items():
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node[:2]):
                walk(v, [*path, i])
        else:
            scalars.append(path)

    walk(doc.get("spec"), ["spec"])
    for path in mappings[:12]:
        changed = copy.deepcopy(doc)
        at(changed, path)["zzUnknownField"] = "x"
        yield f"unknown field at {'.'.join(map(str, path))}", changed
    for path in scalars[:12]:
        changed = copy.deepcopy(doc)
        parent, key = at(changed, path[:-1]), path[-1]
        value = parent[key]
        parent[key] = 7 if isinstance(value, str) else ("seven" if not isinstance(value, bool) else "yes")
        yield f"{'.'.join(map(str, path))} as {type(parent[key]).__name__}", changed


def at(doc: object, path: list) -> dict:
    for step in path:
        doc = doc[step]  # type: ignore[index]
    return doc  # type: ignore[return-value]


def test_offline_crd_schema_check_agrees_with_kube_apiserver(clusters):
    repo = repository.load(REPO_ROOT)
    render = render_for(repo, "dev")
    crds = [r.doc for r in render.resources() if r.kind == "CustomResourceDefinition"]
    crds += upstream.bootstrap_crds(True)
    schemas = installs.crd_schemas(crds)
    objects = [r for r in render.resources() if r.group in GROUPS]
    objects += [a.app.resource for a in render.apps if a.app.generated_by]
    assert {r.kind for r in objects} >= {"Application", "ApplicationSet", "AppProject", "PodMonitor"}
    disagree, checked, refusals = [], 0, 0
    with clusters.kube("dev") as kube:
        for r in objects:
            _, openapi = schemas[(r.group, r.kind, r.api_version.rpartition("/")[2])]
            for what, doc in [("as rendered", copy.deepcopy(r.doc)), *mutations(r.doc)]:
                doc["metadata"] = {**doc["metadata"], "name": f"{r.name[:40]}-probe"}
                doc["metadata"].pop("annotations", None)  # the probe is about the schema, not the tooling's notes
                offline = schema.validate_custom(doc, openapi)
                try:
                    kube.create(doc, dry_run=True)
                    refused = ""
                except ApiError as exc:
                    assert exc.code in (400, 422), f"{r.describe()} {what}: {exc}"
                    refused = str(exc)
                checked += 1
                refusals += bool(refused)
                if bool(offline) != bool(refused):
                    disagree.append(f"{r.describe()} {what}: offline {offline or 'accepts'}; kube-apiserver "
                                    f"{refused or 'accepts'}")  # fmt: skip
    # both answers occur: most changes are refused, the objects as rendered and some changes are not
    assert checked > 200 and 100 < refusals < checked, (checked, refusals)
    assert not disagree, "\n".join(disagree)

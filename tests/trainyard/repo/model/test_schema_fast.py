"""The two validators of the Kubernetes schemas agree (trainyard/repo/model/schema.py): jsonschema-rs
decides whether an object is valid, jsonschema gives the messages of an invalid one, so the two
must give the same verdict on every object the repository renders and on broken ones."""

from __future__ import annotations

import copy
import json

import pytest

from trainyard.repo.jobs import preview
from trainyard.repo.model import schema
from trainyard.repo.upstream import app_render


def verdicts(doc: dict, kind: str | None = None) -> tuple[bool, bool]:
    kind = kind or doc["kind"]
    api_version = "v1" if kind == "PodTemplateSpec" else doc["apiVersion"]
    data = json.loads(json.dumps(doc, default=str))
    fast = schema._fast_validator(kind, api_version).is_valid(data)
    slow = not list(schema._validator(kind, api_version).iter_errors(data))
    return fast, slow


@pytest.fixture(scope="module")
def rendered(repo) -> list[dict]:
    docs = [r.doc for r in app_render.render_cluster(repo, "dev").resources()]
    return [d for d in docs if schema.has_schema(str(d.get("kind")), str(d.get("apiVersion")))]


@pytest.fixture(scope="module")
def pod(repo) -> dict:
    [job] = preview.preview_path(repo, "overlays/dev/jobs/smoke-ddp")
    return job.pods[0].after


def test_they_agree_on_every_rendered_object(rendered):
    assert len(rendered) > 20
    for doc in rendered:
        fast, slow = verdicts(doc)
        assert fast == slow, f"{doc['kind']} {doc['metadata'].get('name')}: jsonschema-rs {fast}, jsonschema {slow}"


BREAKS = [
    lambda p: p["spec"]["containers"][0].__setitem__("nmae", "x"),  # unknown field (strict)
    lambda p: p["spec"]["containers"][0].__setitem__("ports", [{"containerPort": "http"}]),  # wrong type
    lambda p: p["spec"]["containers"][0].pop("name"),  # required
    lambda p: p["spec"]["containers"][0]["env"].append({"value": "no name"}),  # required, nested
    lambda p: p["spec"].__setitem__("restartPolicy", 3),
    lambda p: p["metadata"].__setitem__("labels", {"a": 1}),  # a label value is a string
    lambda p: p["spec"].__setitem__("containers", "not a list"),
    lambda p: p["spec"]["containers"][0].__setitem__("imagePullPolicy", ["Always"]),
    lambda p: p["spec"]["volumes"].append({"name": "v", "emptyDir": {"sizeLimit": {"not": "a quantity"}}}),
]


@pytest.mark.parametrize("index", range(len(BREAKS)))
def test_they_agree_on_broken_pods(pod, index):
    broken = copy.deepcopy(pod)
    BREAKS[index](broken)
    assert verdicts(broken) == (False, False)
    assert schema.validate(broken), "an invalid pod must get jsonschema's messages"


def test_a_valid_pod_and_template_pass_both(pod):
    assert verdicts(pod) == (True, True) and schema.validate(pod) == []
    template = {"metadata": pod["metadata"], "spec": pod["spec"]}
    assert verdicts(template, "PodTemplateSpec") == (True, True) and schema.validate_pod_template(template) == []

"""The AdmissionReview v1 contract, without HTTP."""

from __future__ import annotations

import base64

import orjson
import pytest

from tests.webhook.conftest import apply, example, pod, trainer
from webhook.review import MAX_WARNING, admission_review, review

NETWORKS = "k8s.v1.cni.cncf.io/networks"


def answer(policies, body: dict | bytes) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    status, payload, _ = review(raw, policies, "roce")
    return status, orjson.loads(payload)


def test_pod_create_gets_a_base64_json_patch_with_the_same_uid(policies):
    p = example("pytorchjob-worker.yaml")
    req = admission_review(p)
    status, out = answer(policies, req)
    assert status == 200
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == req["request"]["uid"] and resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    mutated = apply(p, orjson.loads(base64.b64decode(resp["patch"])))
    env = {e["name"]: e.get("value") for e in mutated["spec"]["containers"][0]["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "net1"
    assert resp["warnings"] and all(len(w) <= MAX_WARNING for w in resp["warnings"])
    assert any(w.startswith("trainyard: container pytorch: NCCL_SOCKET_IFNAME eth0 -> net1") for w in resp["warnings"])


def test_already_mutated_pod_is_allowed_without_a_patch(policies):
    p = example("tfjob-chief.yaml")
    _, first = answer(policies, admission_review(p))
    mutated = apply(p, orjson.loads(base64.b64decode(first["response"]["patch"])))
    _, second = answer(policies, admission_review(mutated))
    assert second["response"]["allowed"] is True and "patch" not in second["response"]


@pytest.mark.parametrize(
    ("operation", "kind", "group"),
    [("UPDATE", "Pod", ""), ("DELETE", "Pod", ""), ("CREATE", "Deployment", "apps"), ("CREATE", "Pod", "example.com")],
)
def test_other_kinds_and_operations_are_allowed_untouched(policies, operation, kind, group):
    _, out = answer(policies, admission_review(pod(trainer()), operation=operation, kind=kind, group=group))
    assert out["response"]["allowed"] is True and "patch" not in out["response"]


def test_subresources_and_system_namespaces_are_untouched(policies):
    _, sub = answer(policies, admission_review(pod(trainer()), subResource="ephemeralcontainers"))
    _, system = answer(policies, admission_review(pod(trainer()), namespace="kube-system"))
    assert "patch" not in sub["response"] and "patch" not in system["response"]


def test_unknown_profile_is_denied_with_a_message(policies):
    _, out = answer(policies, admission_review(pod(trainer(), labels={"trainyard.dev/fabric": "nvlink"})))
    resp = out["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "known profiles: ib, roce, tcp" in resp["status"]["message"]


def test_malformed_networks_annotation_is_denied(policies):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "a/b/c"})
    _, out = answer(policies, admission_review(p))
    assert out["response"]["allowed"] is False and "networks" in out["response"]["status"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (
            b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}',
            "expected apiVersion",
        ),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no 'request'"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}', "request.uid"),
    ],
)
def test_bad_bodies_are_400_with_a_message(policies, body, message):
    status, out = answer(policies, body)
    assert status == 400 and message in out["error"]


def test_missing_object_on_pod_create_is_400(policies):
    req = admission_review(pod(trainer()))
    req["request"]["object"] = None
    status, out = answer(policies, req)
    assert status == 400 and "request.object" in out["error"]


def test_warnings_are_cut_to_120_characters(policies):
    long_name = "c" * 63
    p = pod(trainer(long_name, env=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth0" * 20}]))
    _, out = answer(policies, admission_review(p))
    assert all(len(w) <= 120 for w in out["response"]["warnings"])
    assert any(w.endswith("...") for w in out["response"]["warnings"])


def test_an_engine_bug_denies_the_pod_and_logs_it(policies, monkeypatch, caplog):
    # never admitted without its fabric: the pod is denied, saying which review to look up
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("webhook.review.admit", broken)
    req = admission_review(pod(trainer()))
    status, out = answer(policies, req)
    resp = out["response"]
    assert status == 200 and resp["allowed"] is False and resp["status"]["code"] == 500
    assert f"internal error giving the pod its fabric (review {req['request']['uid']})" in resp["status"]["message"]
    assert "RuntimeError: a bug" in caplog.text


def test_a_patch_over_the_cap_is_denied_with_its_size(policies, monkeypatch):
    monkeypatch.setattr("webhook.review.MAX_PATCH_BYTES", 200)
    status, out = answer(policies, admission_review(example("pytorchjob-worker.yaml")))
    resp = out["response"]
    assert status == 200 and resp["allowed"] is False and "patch" not in resp
    assert "the fabric patch for this pod would be" in resp["status"]["message"]
    assert "bytes, over the 200 allowed" in resp["status"]["message"]


def test_the_largest_pod_patch_fits_under_the_cap(policies):
    containers = [trainer(f"t{i}", gpus=1, memory="64Gi") for i in range(256)]
    networks = ", ".join(f"n{i}@x{i}" for i in range(255))
    status, out = answer(policies, admission_review(pod(*containers, annotations={NETWORKS: networks})))
    assert status == 200 and out["response"]["allowed"] is True and out["response"]["patch"]


def test_a_body_of_too_many_json_values_is_refused_before_parsing(policies):
    body = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "x": [' + b"[]," * 100_000 + b"[]]}"
    status, out = answer(policies, body)
    assert status == 400 and "JSON values, more than the 100,000 a review may" in out["error"]


def test_the_value_count_runs_on_every_body_that_could_exceed_it(policies):
    """A body of at most MAX_JSON_VALUES bytes cannot hold more values, so it is parsed without a
    count; one byte more and a body of nothing but separators is refused by the count."""
    status, out = answer(policies, b"," * 100_000)
    assert status == 400 and "not JSON" in out["error"]
    status, out = answer(policies, b"," * 100_001)
    assert status == 400 and "100,001 JSON values, more than the 100,000" in out["error"]


def test_json_nested_past_orjsons_depth_is_400(policies):
    status, out = answer(policies, b"[" * 2000 + b"]" * 2000)
    assert status == 400 and "not JSON" in out["error"]


@pytest.mark.parametrize("number", [str(2**64), str(2**70), "-" + str(2**70)])
def test_an_integer_past_64_bits_is_denied_naming_the_field(policies, number):
    """orjson reads an integer past 64 bits as a double: the quantity is still refused, by name."""
    body = orjson.dumps(admission_review(pod(trainer(gpus=1))))
    hostile = body.replace(b'"nvidia.com/gpu":1', b'"nvidia.com/gpu":' + number.encode())
    assert hostile != body
    status, out = answer(policies, hostile)
    assert status == 200 and out["response"]["allowed"] is False
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in out["response"]["status"]["message"]


@pytest.mark.parametrize("number", ["9" * 400, "1e999", "-1e400"])
def test_a_number_past_a_doubles_range_is_400(policies, number):
    body = orjson.dumps(admission_review(pod(trainer(gpus=1))))
    status, out = answer(policies, body.replace(b'"nvidia.com/gpu":1', b'"nvidia.com/gpu":' + number.encode()))
    assert status == 400 and "not JSON" in out["error"]


def test_a_name_of_megabytes_is_read_and_answered(policies):
    p = pod(trainer(gpus=1))
    p["metadata"]["name"] = "a" * 2_000_000
    status, out = answer(policies, admission_review(p))
    assert status == 200 and out["response"]["patchType"] == "JSONPatch"

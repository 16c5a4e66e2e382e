"""The benchmarks' pods (bench/cluster_pods.py) are what kube-apiserver sends a mutating webhook,
and the webhook answers each under its own uid."""

from __future__ import annotations

import base64
import importlib.util
import random

import orjson

from tests.webhook.conftest import ROOT, apply, example
from webhook.review import review

_spec = importlib.util.spec_from_file_location("cluster_pods", ROOT / "bench" / "cluster_pods.py")
cluster_pods = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cluster_pods)


def _sent(pod: dict, count: int = 2) -> list[dict]:
    bodies = cluster_pods.bodies([cluster_pods.template(pod)], count, seed=3)
    return [orjson.loads(body) for body in bodies]


def test_every_container_mounts_a_token_volume_of_the_pods_own():
    first, second = _sent(example("sidecar.yaml"))
    names = []
    for doc in (first, second):
        spec = doc["request"]["object"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
        suffix = volume["name"].removeprefix("kube-api-access-")
        assert len(suffix) == 5 and set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")
        assert volume["projected"] == {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
            "defaultMode": 0o644,
        }
        for c in spec["initContainers"] + spec["containers"]:
            assert {
                "name": volume["name"],
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            } in c["volumeMounts"]
        assert spec["serviceAccountName"] == "default"
        names.append(volume["name"])
    assert names[0] != names[1]
    assert first["request"]["uid"] != second["request"]["uid"]


def test_a_pod_created_with_generate_name_has_no_name_yet():
    pod = example("pytorchjob-worker.yaml")
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "name"} | {"generateName": "w-"}
    (doc,) = _sent(pod, 1)
    assert doc["request"]["name"] == ""
    meta = doc["request"]["object"]["metadata"]
    assert "name" not in meta and meta["generateName"] == "w-" and meta["creationTimestamp"] is None


def test_defaults_and_tolerations_are_there_as_kube_apiserver_adds_them():
    (doc,) = _sent(example("pytorchjob-worker.yaml"), 1)
    spec = doc["request"]["object"]["spec"]
    container = spec["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # quantities travel as strings
    assert container["imagePullPolicy"] == "IfNotPresent" and container["terminationMessagePolicy"] == "File"
    assert spec["priority"] == 0 and spec["schedulerName"] == "default-scheduler"
    assert [t["key"] for t in spec["tolerations"]] == ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]


def test_the_webhook_answers_each_review_under_its_own_uid(policies):
    rng = random.Random(5)
    template = cluster_pods.template(example("sidecar.yaml"))
    for _ in range(3):
        body = cluster_pods.fill(template, rng)
        status, payload, _ = review(body, policies, "roce")
        sent = orjson.loads(body)["request"]
        response = orjson.loads(payload)["response"]
        assert status == 200 and response["uid"] == sent["uid"] and response["allowed"] is True
        mutated = apply(sent["object"], orjson.loads(base64.b64decode(response["patch"])))
        token = [v["name"] for v in sent["object"]["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
        assert [v["name"] for v in mutated["spec"]["volumes"] if v["name"].startswith("kube-api-access-")] == token

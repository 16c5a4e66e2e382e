"""TrainJob -> JobSet -> Jobs -> pods, field by field as Kubeflow Trainer v2.3.0, JobSet v0.12.0 and
the Job controller make them, and what Trainer's and JobSet's webhooks refuse."""

from __future__ import annotations

import copy
import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT
from trainyard.repo.generate import runtimes
from trainyard.repo.upstream import jobset, strategic_merge, trainjob
from webhook.policy import load_policies


@pytest.fixture(scope="module")
def runtime() -> dict:
    return runtimes.cluster_training_runtime(load_policies(REPO_ROOT / "policies").get("tcp"))


def job(**trainer) -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "smoke", "namespace": "ml-training"},
        "spec": {
            "runtimeRef": {"name": "trainyard-tcp"},
            "trainer": {
                "numNodes": 2,
                "numProcPerNode": 1,
                "args": ["--", "--model", "tiny"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "8Gi"}},
                **trainer,
            },
        },
    }


def env(container: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_the_jobset_trainer_builds_and_jobset_defaults(runtime):
    js = trainjob.expand(job(), runtime).jobset
    assert js["metadata"]["name"] == "smoke" and js["metadata"]["namespace"] == "ml-training"
    assert js["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    (rj,) = js["spec"]["replicatedJobs"]
    assert (rj["name"], rj["replicas"], rj["groupName"]) == ("node", 1, "default")
    assert rj["template"]["spec"]["parallelism"] == rj["template"]["spec"]["completions"] == 2  # numNodes
    assert rj["template"]["spec"]["completionMode"] == "Indexed"
    assert rj["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert js["spec"]["successPolicy"] == {"operator": "All"}


def test_the_pods_as_the_webhook_sees_them(runtime):
    e = trainjob.expand(job(), runtime)
    assert [j["metadata"]["name"] for j in e.jobs] == ["smoke-node-0"]
    assert [p["metadata"]["generateName"] for p in e.pods] == ["smoke-node-0-0-", "smoke-node-0-1-"]
    pod = e.pods[1]
    assert "name" not in pod["metadata"], "the API server names the pod after admission"
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("smoke-node-0-1", "smoke")
    labels = pod["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "smoke"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert labels["jobset.sigs.k8s.io/job-index"] == labels["jobset.sigs.k8s.io/job-global-index"] == "0"
    assert labels["jobset.sigs.k8s.io/job-key"] == hashlib.sha1(b"ml-training/smoke-node-0").hexdigest()
    assert labels["batch.kubernetes.io/job-completion-index"] == "1"
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "smoke-node-0"
    assert labels["trainyard.dev/fabric"] == "tcp"  # from the runtime: the webhook's profile
    assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    node = pod["spec"]["containers"][0]
    assert node["command"] == ["trainyard", "launch"] and node["args"] == ["--", "--model", "tiny"]
    assert node["resources"] == {"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "8Gi"}}
    assert node["ports"] == [runtimes.METRICS_PORT, {"containerPort": 29500}]  # the runtime's, then torch's
    rank = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    index = {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}
    assert list(env(node).items()) == [
        (ENV_METRICS_PORT, str(DEFAULT_METRICS_PORT)),  # the runtime's
        ("PET_NNODES", "2"),
        ("PET_NPROC_PER_NODE", "1"),
        ("PET_NODE_RANK", rank),
        ("PET_MASTER_ADDR", "smoke-node-0-0.smoke"),
        ("PET_MASTER_PORT", "29500"),
        ("JOB_COMPLETION_INDEX", index),
    ]
    # envInjection: the preflight init container gets the same PET_* variables
    (preflight,) = pod["spec"]["initContainers"]
    assert preflight["name"] == "preflight" and env(preflight) == {k: v for k, v in env(node).items()
                                                                     if k != ENV_METRICS_PORT}  # fmt: skip


def test_the_master_address_is_the_first_pods_name_under_the_headless_service(runtime):
    e = trainjob.expand(job(numNodes=3), runtime)
    assert e.master_addr == jobset.pod_dns_name(e.pods[0]) == "smoke-node-0-0.smoke"
    assert e.service["metadata"]["name"] == "smoke" and e.service["spec"]["clusterIP"] == "None"
    assert e.service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "smoke"}
    assert len(e.pods) == 3


@pytest.mark.parametrize(
    ("resources", "nproc", "expected"),
    [
        ({"limits": {"nvidia.com/gpu": 4}}, None, "auto"),  # torchrun counts the GPUs
        ({"limits": {"cpu": "3"}}, None, "3"),  # no GPU: the CPUs
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "6"}}, None, "2"),  # the request before the limit
        ({"limits": {"cpu": "500m"}}, None, "1"),  # at least one
        ({"limits": {"nvidia.com/gpu": 8}}, 2, "2"),  # the job's own number wins
    ],
)
def test_processes_per_node(runtime, resources, nproc, expected):
    trainer = {"resourcesPerNode": resources, "numProcPerNode": nproc}
    node = trainjob.expand(job(**trainer), runtime).pods[0]["spec"]["containers"][0]
    assert env(node)["PET_NPROC_PER_NODE"] == expected


def test_trainer_env_image_and_command(runtime):
    e = trainjob.expand(
        job(env=[{"name": "LR", "value": "0.1"}], image="registry.example.com/ml/trainer:0.2.0", command=["python"]),
        runtime,
    )
    node = e.pods[0]["spec"]["containers"][0]
    assert node["image"] == "registry.example.com/ml/trainer:0.2.0" and node["command"] == ["python"]
    assert list(env(node))[:3] == [ENV_METRICS_PORT, "LR", "PET_NNODES"]  # the runtime's, the job's, torch's
    assert e.pods[0]["spec"]["initContainers"][0]["image"].endswith(":0.1.0"), "only the node container"


CACHE = {"name": "cache", "mountPath": "/cache"}


def test_runtime_patches_merge_strategically_in_order(runtime):
    j = job()
    j["spec"]["runtimePatches"] = [
        {
            "manager": "example.com/team",
            "trainingRuntimeSpec": {
                "template": {
                    "metadata": {"labels": {"team": "vision"}},
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "metadata": {"labels": {"team": "vision"}},
                                            "spec": {
                                                "nodeSelector": {"pool": "a"},
                                                "tolerations": [{"key": "x", "operator": "Exists"}],
                                                "volumes": [{"name": "cache", "emptyDir": {}}],
                                                "containers": [{"name": "node", "volumeMounts": [CACHE]}],
                                            },
                                        }
                                    }
                                },
                            }
                        ]
                    },
                }
            },
        }
    ]  # fmt: skip
    e = trainjob.expand(j, runtime)
    assert e.jobset["metadata"]["labels"] == {"team": "vision"}
    pod = e.pods[0]
    assert pod["metadata"]["labels"]["team"] == "vision"
    assert pod["spec"]["nodeSelector"] == {"pool": "a"}
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["checkpoints", "datasets", "cache"]  # merged by name
    assert [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]] == ["/checkpoints", "/data", "/cache"]
    assert trainjob.admission_problems(j, runtime) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda j: j["metadata"].update(name="Smoke_1"), "must be a DNS-1035 label"),
        (lambda j: j["metadata"].update(name="s" * 49), "JobSet would name a pod"),
        (lambda j: j["spec"]["trainer"].update(env=[{"name": "PET_NNODES"}]), "must not have reserved envs"),
        (lambda j: j["spec"]["trainer"].update(numNodes=0), "spec.trainer.numNodes: 0 must be a whole number from 1"),
        (lambda j: j["spec"]["trainer"].update(nodes=2), "spec.trainer.nodes: not a field of Trainer"),
        (lambda j: j["spec"].update(labels={"a": "b"}), "spec.labels: not a field of TrainJob"),
        (lambda j: j["spec"].update(managedBy="me"), "ManagedBy must be trainer.kubeflow.org/trainjob-controller"),
        (lambda j: j["spec"]["runtimeRef"].update(kind="Runtime"), "unsupported runtime: Runtime.trainer.kubeflow.org"),
        (lambda j: j["spec"].pop("runtimeRef"), "spec.runtimeRef.name: required"),
        (lambda j: j["spec"]["trainer"]["resourcesPerNode"].update(limits={"cpu": "x"}), "not a Kubernetes quantity"),
        (
            lambda j: j["spec"].update(runtimePatches=[{"manager": "nodomain"}]),
            "must be a domain-prefixed path",
        ),
        (
            lambda j: j["spec"].update(runtimePatches=[{"manager": "a.io/x", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "launcher"}]}}}}]),
            "must not have replicated job that doesn't exist",
        ),
        (
            lambda j: j["spec"].update(runtimePatches=[{"manager": "a.io/x", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]}}}}}]}}}}]),
            "must not have envs for the node container",
        ),
    ],
)  # fmt: skip
def test_what_trainer_and_jobset_refuse(runtime, change, expected):
    j = job()
    change(j)
    problems = trainjob.admission_problems(j, runtime)
    assert any(expected in p for p in problems), problems


def test_an_envinjection_target_must_exist(runtime):
    broken = copy.deepcopy(runtime)
    broken["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].pop(
        "initContainers"
    )
    assert any(
        "container 'preflight' not found in runtime template" in p for p in trainjob.admission_problems(job(), broken)
    )


def test_patch_directives_are_refused_not_guessed(runtime):
    j = job()
    j["spec"]["runtimePatches"] = [{"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "$patch": "delete"}]}}}}]  # fmt: skip
    with pytest.raises(strategic_merge.PatchError, match=r"replicatedJobs\[0\]: strategic-merge directives"):
        trainjob.expand(j, runtime)


def test_a_suspended_job_without_kueue_has_no_pods(runtime):
    j = job()
    j["spec"]["suspend"] = True
    e = trainjob.expand(j, runtime)
    assert e.jobs[0]["spec"]["suspend"] is True and e.pods == []


def test_the_generated_runtime_passes_trainers_runtime_rules(runtime):
    assert trainjob.runtime_problems(runtime) == []
    two = copy.deepcopy(runtime)
    two["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    two["spec"]["mlPolicy"]["mpi"] = {}
    problems = trainjob.runtime_problems(two)
    assert any("replicas: must be 1 for a trainer job" in p for p in problems)
    assert any("Only one of the policy can be configured" in p for p in problems)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=25,
)
FIELDS = st.sampled_from(["runtimeRef", "trainer", "runtimePatches", "suspend", "managedBy", "initializer"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.dictionaries(FIELDS, JSONISH, max_size=5), name=st.text(max_size=80))
def test_hostile_trainjobs_get_problems_never_a_traceback(runtime, spec, name):
    doc = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name}, "spec": spec}
    problems = trainjob.admission_problems(doc, runtime)
    assert all(isinstance(p, str) for p in problems)
    if not problems:
        trainjob.expand(doc, runtime)  # what Trainer admits, the expansion follows


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,30}[a-z0-9]", fullmatch=True),
    nodes=st.integers(1, 6),
    args=st.lists(st.text(max_size=200), max_size=10),
    env=st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True), st.text(max_size=50), max_size=5),
    selector=st.dictionaries(st.from_regex(r"[a-z]{1,10}", fullmatch=True), st.text(max_size=20), max_size=3),
)
def test_valid_trainjobs_expand_to_one_pod_per_node(runtime, name, nodes, args, env, selector):
    env = {k: v for k, v in env.items() if k not in trainjob.PET_ENV}
    doc = job(numNodes=nodes, args=args, env=[{"name": k, "value": v} for k, v in env.items()])
    doc["metadata"]["name"] = name
    pod_patch = {"template": {"spec": {"nodeSelector": selector}}}
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": pod_patch}}]}
    doc["spec"]["runtimePatches"] = [{"manager": "example.com/x", "trainingRuntimeSpec": {"template": {"spec": patch}}}]
    problems = trainjob.admission_problems(doc, runtime)
    if len(name) + len("-node-0--abcde") + len(str(nodes - 1)) > 63:
        assert any("JobSet would name a pod" in p for p in problems)
        return
    assert problems == []
    e = trainjob.expand(doc, runtime)
    assert [p["spec"]["hostname"] for p in e.pods] == [f"{name}-node-0-{i}" for i in range(nodes)]
    for pod in e.pods:
        assert pod["spec"]["containers"][0]["args"] == args
        assert pod["spec"].get("nodeSelector", {}) == selector
        env_of = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert all(env_of[k] == v for k, v in env.items())
        assert env_of["PET_NNODES"] == str(nodes) and env_of["PET_MASTER_ADDR"] == f"{name}-node-0-0.{name}"

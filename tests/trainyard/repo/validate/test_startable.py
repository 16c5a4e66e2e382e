"""validate's verdict on each pod a job becomes, as kube-apiserver decides it (created or refused)
and whether it can start: each check with a pod it refuses, its positive control, and hostile
pods (nulls, wrong types, huge and unicode values) that get a verdict and never a traceback."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import edit, errors_of
from tests.webhook import strategies
from trainyard.repo import validate
from trainyard.repo.generate import limits
from trainyard.repo.jobs import placement, preview
from trainyard.repo.model import declared
from trainyard.repo.model.rendered import Resource
from trainyard.repo.validate import startable

NS = "ml-training"
JOB_FILE = "overlays/dev/jobs/x/job.yaml"
FACTS = {
    "apiVersion": "trainyard.dev/v1alpha1",
    "kind": "ClusterFacts",
    "metadata": {"name": "dev"},
    "spec": {
        "kubernetesVersion": "1.33",
        "nodePools": [
            {
                "name": "gpu",
                "count": 2,
                "labels": {"nvidia.com/gpu.present": "true", "zone": "a"},
                "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"},
            }
        ],
    },
}
QUOTA = {"requests.cpu": "16", "requests.memory": "64Gi", "limits.memory": "64Gi", "requests.nvidia.com/gpu": "2"}
LIMIT_RANGE = {
    "apiVersion": "v1",
    "kind": "LimitRange",
    "metadata": {"name": "job-defaults", "namespace": NS},
    "spec": {
        "limits": [{"type": "Container", "default": {"memory": "8Gi"}, "defaultRequest": {"cpu": "2", "memory": "8Gi"}}]
    },
}


def facts(**spec) -> declared.ClusterFacts:
    data = copy.deepcopy(FACTS)
    data["spec"].update(spec)
    return declared.ClusterFacts.model_validate(data)


def _res(doc: dict) -> Resource:
    return Resource(doc, origin="overlays/dev/platform/namespaces/x.yaml")


def objects(*extra: dict, limit_range: bool = True, quota: dict | None = QUOTA, **spec) -> startable.ClusterObjects:
    docs = [*extra]
    if limit_range:
        docs.append(LIMIT_RANGE)
    if quota is not None:
        docs.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "training-quota",
                     "namespace": NS}, "spec": {"hard": quota}})  # fmt: skip
    return startable.ClusterObjects.of([_res(d) for d in docs], facts(**spec))


def pod(*containers: dict, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x-worker-0", "namespace": NS, "labels": {"training.kubeflow.org/replica-type": "worker"}},
        "spec": {"containers": list(containers) or [{"name": "pytorch", "image": "pytorch:2.5"}], **spec},
    }


def container(name: str = "pytorch", **resources) -> dict:
    return {"name": name, "image": "pytorch:2.5", "resources": resources}


def job_preview(*pods: dict, created: list | None = None) -> preview.JobPreview:
    job = Resource(
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x", "namespace": NS},
         "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}},
        origin=JOB_FILE,
    )  # fmt: skip
    previews = [preview.PodPreview(p["metadata"]["name"], p, p, "skip", None) for p in pods]
    return preview.JobPreview(job, "dev", "tcp", previews, created=created or [])


def judge(
    p: dict, objs: startable.ClusterObjects | None = None, created: list | None = None
) -> list[startable.Finding]:
    return startable.judge(objs or objects(), job_preview(p, created=created))


def refused(findings: list[startable.Finding]) -> list[str]:
    return [f.message for f in findings if f.refused]


def stuck(findings: list[startable.Finding]) -> list[str]:
    return [f.message for f in findings if not f.refused]


# --- LimitRanger, then the quota ------------------------------------------------------------------


def test_a_container_that_says_nothing_is_refused_by_the_quota_without_a_limit_range():
    found = judge(pod(), objects(limit_range=False))
    (message,) = refused(found)
    assert "spec.containers[0] (pytorch).resources" in message
    assert "counts limits.memory, requests.cpu, requests.memory" in message
    assert "set limits memory, requests cpu, requests memory in spec.pytorchReplicaSpecs.Worker" in message
    assert found[0].server_says == "must specify"


def test_the_limit_range_gives_what_the_quota_demands():
    assert judge(pod()) == []
    # a limit alone is a request too (SetDefaults_Pod), so a quota without a LimitRange takes it
    full = container(limits={"cpu": "1", "memory": "1Gi"})
    assert judge(pod(full), objects(limit_range=False)) == []


def test_pod_level_resources_lift_the_per_container_demand():
    p = pod(resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
    assert refused(judge(p, objects(limit_range=False))) == []


def test_a_request_above_the_default_limit_is_refused_and_named():
    p = pod(container(requests={"memory": "32Gi"}))
    (message,) = refused(judge(p))
    assert "requests[memory]: 32Gi is more than its limit (the namespace's LimitRange gives it the default " in message
    assert "set limits memory (at least 32Gi)" in message
    assert refused(judge(pod(container(requests={"memory": "32Gi"}, limits={"memory": "32Gi"})))) == []


def test_a_pod_alone_over_the_quota_is_refused():
    p = pod(container(limits={"nvidia.com/gpu": "4", "cpu": "1", "memory": "1Gi"}))
    (message,) = refused(judge(p))
    assert "ResourceQuota training-quota" in message and "requests.nvidia.com/gpu 4 > 2" in message


@pytest.mark.parametrize(
    ("limit_range", "want"),
    [
        ({"type": "Container", "max": {"memory": "4Gi"}}, ({"memory": "4Gi"}, {"memory": "4Gi"})),
        ({"type": "Container", "min": {"cpu": "1"}}, ({"cpu": "1"}, {})),
        ({"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "1"}}, ({"cpu": "1"}, {"cpu": "2"})),
        ({"type": "Pod", "max": {"cpu": "1"}}, ({}, {})),
        (None, ({}, {})),
        ("text", ({}, {})),
    ],
)
def test_limit_range_items_default_as_kube_apiserver_stores_them(limit_range, want):
    doc = {"spec": {"limits": [limit_range]}}
    assert placement.limit_range_defaults(doc) == want


def test_defaults_never_replace_what_a_container_says():
    p = pod(container(limits={"memory": "1Gi"}))
    got = placement.with_defaults(p, [LIMIT_RANGE])["spec"]["containers"][0]["resources"]
    assert got == {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi", "cpu": "2"}}
    assert p["spec"]["containers"][0]["resources"] == {"limits": {"memory": "1Gi"}}  # the pod is not changed


# --- pod validation: extended resources -----------------------------------------------------------


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "rdma/rdma_shared_device_a", "hugepages-2Mi"])
def test_an_extended_resource_requested_without_a_limit_is_refused(resource):
    p = pod(container(requests={resource: "1"}))
    (finding,) = [f for f in judge(p) if f.refused]
    assert finding.server_says == "Limit must be set for non overcommitable resources"
    assert f"spec.containers[0] (pytorch).resources.requests[{resource}]: 1 without a limit" in finding.message
    assert f"set limits {resource}: 1 in spec.pytorchReplicaSpecs.Worker.template.spec.containers" in finding.message


def test_an_extended_resource_whose_request_is_not_its_limit_is_refused():
    p = pod(container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}))
    (message,) = refused(judge(p))
    assert "requests[nvidia.com/gpu]: 1 but the limit is 2" in message


def test_an_extended_resource_given_as_a_limit_is_admitted():
    assert judge(pod(container(limits={"nvidia.com/gpu": "1"}))) == []
    assert judge(pod(container(requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": "1"}))) == []


# --- ServiceAccount -------------------------------------------------------------------------------


def test_a_service_account_nothing_creates_is_refused():
    (message,) = refused(judge(pod(serviceAccountName="trainer-sa")))
    assert "ServiceAccount 'trainer-sa' does not exist in namespace ml-training" in message


def test_a_service_account_the_render_or_the_controller_makes_is_admitted():
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer-sa", "namespace": NS}}
    assert judge(pod(serviceAccountName="trainer-sa"), objects(sa)) == []
    assert judge(pod(serviceAccountName="x-launcher"), created=[("ServiceAccount", "x-launcher")]) == []
    assert judge(pod(serviceAccountName="default")) == []
    # a ServiceAccount of another namespace is not this one's
    other = {**sa, "metadata": {"name": "trainer-sa", "namespace": "elsewhere"}}
    assert refused(judge(pod(serviceAccountName="trainer-sa"), objects(other)))


# --- what leaves a pod Pending for ever -----------------------------------------------------------


NAD = {
    "apiVersion": "k8s.cni.cncf.io/v1",
    "kind": "NetworkAttachmentDefinition",
    "metadata": {"name": "roce-network", "namespace": NS},
    "spec": {"config": "{}"},
}


def _with_networks(value: object) -> dict:
    p = pod()
    p["metadata"]["annotations"] = {"k8s.v1.cni.cncf.io/networks": value}
    return p


def test_a_network_that_is_not_in_the_namespace_never_starts():
    (message,) = stuck(judge(_with_networks("roce-network, sriov-net@net5"), objects(NAD)))
    assert "network 'sriov-net@net5': no NetworkAttachmentDefinition sriov-net in namespace ml-training" in message
    assert "(there: roce-network)" in message
    assert stuck(judge(_with_networks('[{"name": "roce-network"}]'), objects(NAD))) == []
    # the attachment's own namespace is where Multus looks
    (message,) = stuck(judge(_with_networks("kube-system/roce-network"), objects(NAD)))
    assert "in namespace kube-system (there: none)" in message


@pytest.mark.parametrize("value", ["[{", "a b c", '[{"name": 3}]', "ü/ñ@€", "x" * 300_000, "[]" * 5])
def test_an_unreadable_networks_annotation_gets_a_verdict(value):
    for f in judge(_with_networks(value), objects(NAD)):
        assert not f.refused and "k8s.v1.cni.cncf.io/networks" in f.message


def test_a_scheduler_the_cluster_does_not_run_never_starts():
    (message,) = stuck(judge(pod(schedulerName="volcano")))
    assert "spec.schedulerName: 'volcano' is no scheduler of cluster dev (it runs default-scheduler;" in message
    assert judge(pod(schedulerName="volcano"), objects(schedulers=["volcano"])) == []
    assert judge(pod(schedulerName="default-scheduler")) == []


@pytest.mark.parametrize("name", ["default-scheduler", "Volcano", "", "a" * 300])
def test_a_declared_scheduler_must_be_another_valid_name(name):
    with pytest.raises(ValueError, match="name a scheduler"):
        facts(schedulers=[name])


def test_claims_config_maps_and_secrets_nothing_creates_never_start():
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "cfg", "configMap": {"name": "train-config"}},
        {"name": "opt", "configMap": {"name": "maybe", "optional": True}},
        {"name": "tok", "secret": {"secretName": "hf-token"}},
        {"name": "ca", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}},
    ]
    c = container()
    c["env"] = [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}}}]
    c["envFrom"] = [{"configMapRef": {"name": "env-cm", "optional": False}}]
    messages = stuck(judge(pod(c, volumes=volumes)))
    assert [m.split(": ", 2)[1] for m in messages] == [
        "spec.volumes[0] (data).persistentVolumeClaim.claimName",
        "spec.volumes[1] (cfg).configMap.name",
        "spec.volumes[3] (tok).secret.secretName",
        "spec.containers[0] (pytorch).env[0].valueFrom.secretKeyRef.name",
        "spec.containers[0] (pytorch).envFrom[0].configMapRef.name",
    ]
    made = [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "datasets", "namespace": NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-config", "namespace": NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env-cm", "namespace": NS}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "c", "namespace": NS},
         "spec": {"secretName": "hf-token"}},
        {"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret", "metadata": {"name": "wandb",
         "namespace": NS}, "spec": {}},
    ]  # fmt: skip
    assert judge(pod(c, volumes=volumes), objects(*made)) == []


# --- node selection (capacity's, with the labels named) -------------------------------------------


def test_a_node_selector_no_pool_matches_names_its_labels():
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "H100", "zone": "a"}}
    fit = placement.node_fit({"spec": spec}, facts())
    assert fit.pool is None
    assert fit.unmatched == "spec.nodeSelector asks for nvidia.com/gpu.product=H100, which no node pool has"
    # the kubelet's own labels are on every node
    assert placement.node_fit({"spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}}, facts()).pool is not None


def test_a_required_node_affinity_no_pool_matches_names_the_requirement():
    def affinity(*exprs: dict) -> dict:
        terms = [{"matchExpressions": list(exprs)}]
        return {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
            }
        }

    ok = affinity(
        {"key": "zone", "operator": "In", "values": ["a", "b"]}, {"key": "gpu-count", "operator": "DoesNotExist"}
    )
    assert placement.node_fit({"spec": ok}, facts()).pool is not None
    bad = affinity({"key": "zone", "operator": "In", "values": ["b", "c"]})
    assert placement.node_fit({"spec": bad}, facts()).unmatched.endswith(
        "asks for zone in (b,c), which no node pool has"
    )
    assert (
        placement.node_fit({"spec": affinity({"key": "zone", "operator": "Gt", "values": ["x"]})}, facts()).pool is None
    )
    empty = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    }
    assert "an empty term" in placement.node_fit({"spec": empty}, facts()).unmatched


def test_validate_names_the_labels_of_an_unmatched_selector(repo_copy):
    edit(repo_copy, "overlays/dev/jobs/mnist-ddp/job.yaml", "- op:", "- op: add\n  path: /spec/pytorchReplicaSpecs"
         "/Worker/template/spec/nodeSelector\n  value: {nvidia.com/gpu.product: H100}\n- op:")  # fmt: skip
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    (message,) = [e for e in errors if "can never be scheduled" in e]
    assert "nvidia.com/gpu.product=H100, which no node pool has" in message
    assert "lab-gpu: topology.kubernetes.io/zone=lab, nvidia.com/gpu.present=true" in message
    assert "ask for less" not in message


def test_validate_refuses_a_gpu_request_without_a_limit(repo_copy):
    path = repo_copy.root / "overlays/dev/jobs/mnist-ddp/job.yaml"
    path.write_text(path.read_text() + "- op: add\n  path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"
                    "/resources/requests\n  value: {nvidia.com/gpu: '1'}\n")  # fmt: skip
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    assert any("pod mnist-ddp-worker-0: spec.containers[0] (pytorch).resources.requests[nvidia.com/gpu]" in e
               for e in errors), errors  # fmt: skip


# --- the generated LimitRange ---------------------------------------------------------------------


def test_the_defaults_come_from_the_smallest_node(repo):
    assert limits.defaults(declared.load(repo, "dev")) == {"cpu": "250m", "memory": "1Gi", "limit.memory": "8Gi"}
    assert limits.defaults(declared.load(repo, "prod-ib")) == {"cpu": "2", "memory": "16Gi", "limit.memory": "128Gi"}
    pools = [
        {"name": "a", "count": 1, "allocatable": {"cpu": "3", "memory": "10Gi"}},
        {"name": "b", "count": 1, "allocatable": {"cpu": "64", "memory": "1Ti", "nvidia.com/gpu": "16"}},
    ]
    assert limits.defaults(facts(nodePools=pools)) == {"cpu": "46m", "memory": "160Mi", "limit.memory": "1280Mi"}
    tiny = [{"name": "a", "count": 1, "allocatable": {"cpu": "1m", "memory": "1Ki"}}]
    with pytest.raises(declared.DeclarationError, match="too small"):
        limits.defaults(facts(nodePools=tiny))


def test_a_queued_job_with_a_limit_below_the_default_request_is_never_admitted_by_kueue():
    p = pod(container(limits={"cpu": "1", "memory": "16Gi"}))
    jp = job_preview(p)
    jp.job.doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "training"}
    (message,) = stuck(startable.judge(objects(), jp))
    assert "limits[cpu]: 1 with no request; Kueue takes the request from the namespace's LimitRange (2)" in message
    assert "set requests cpu: 1 too in spec.pytorchReplicaSpecs.Worker" in message
    assert startable.judge(objects(), job_preview(p)) == []  # not queued: the API server defaults it from the limit
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    assert startable.judge(objects(), jp) == []


# --- hostile pods ---------------------------------------------------------------------------------


HOSTILE = [
    {"spec": None},
    {"spec": {"containers": None, "initContainers": [None, 3, "x"]}},
    {"spec": {"containers": [{"name": None, "resources": None}]}},
    {"spec": {"containers": [{"name": "c", "resources": {"requests": [], "limits": "x"}}]}},
    {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": {"a": 1}}}}]}},
    {"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "9" * 2000, "cpu": "1e18"}}}]}},
    {"spec": {"containers": [{"name": "ç", "resources": {"requests": {"ü/ñ": "1"}}}], "serviceAccountName": "ü"}},
    {"spec": {"serviceAccountName": 7, "schedulerName": ["x"], "volumes": [None, {"configMap": None}]}},
    {"spec": {"nodeSelector": None, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [None, {"matchExpressions": [None, {"key": 1, "operator": "Gt", "values": None}]}]}}}}},
    {"metadata": None, "spec": {"resources": None}},
]  # fmt: skip


@pytest.mark.parametrize("p", HOSTILE)
def test_a_hostile_pod_gets_a_verdict_never_a_traceback(p):
    full = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, **p}
    if full["metadata"] is None:
        full["metadata"] = {"name": "p"}
    for f in judge(full):
        assert f.message.startswith("pod x-worker-0: ") or f.message.startswith("pod p: ")
    placement.node_fit(full, facts())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=strategies.pods(), sa=st.one_of(st.none(), st.text(max_size=20)), limit_range=st.booleans())
def test_generated_pods_get_a_verdict(p, sa, limit_range):
    p.setdefault("metadata", {})["namespace"] = NS
    if sa is not None:
        p.setdefault("spec", {})["serviceAccountName"] = sa
    for f in judge(p, objects(NAD, limit_range=limit_range)):
        assert isinstance(f.refused, bool) and f.message


def test_an_extended_resource_no_pool_has_is_named():
    p = pod(container(limits={"rdma/rdma_shared_device_eth": "1", "nvidia.com/gpu": "1"}))
    fit = placement.node_fit(p, facts())
    assert (fit.pool, fit.absent, fit.short) == (
        None,
        ("rdma/rdma_shared_device_eth",),
        "rdma/rdma_shared_device_eth 1",
    )
    # a native resource no pool declares (ephemeral-storage) is not judged
    assert placement.node_fit(pod(container(limits={"ephemeral-storage": "1Ti"})), facts()).pool is not None

"""The upstream controllers as ``trainyard cluster up`` runs them: from the pinned releases, as their
ServiceAccounts, with their webhooks answering kube-apiserver on loopback."""

from __future__ import annotations

import base64
import copy
import os
import re
import signal
import ssl
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from trainyard.cluster import controllers, services
from trainyard.cluster.client import ApiError
from trainyard.cluster.components import KUBE_MODULE, TARGETS
from trainyard.cluster.processes import free_port, wait_for
from trainyard.repo.model import releases, repository
from trainyard.repo.upstream import app_render, training_operator, trainjob
from trainyard.sandbox.processes import descendants

NAMESPACE = "trainyard-test-controllers"


def _go_mod_requires(path) -> dict[str, str]:
    text = path.read_text()
    return dict(re.findall(r"^\s+(\S+) (v\S+)\s*$", text.split("require (", 1)[1].split("\n)", 1)[0], re.M))


def test_each_controller_runs_from_its_applications_render():
    """The Deployment, webhook Service and Secret each controller takes are in what its Application
    renders (the objects validate checks and Argo CD applies), in the Install's namespace."""
    render = app_render.render_cluster(repository.load(KUBE_MODULE.parent), "dev")
    for install in controllers.INSTALLS:
        ar = render.app(install.app)
        assert ar is not None and ar.upstream, install.app
        found = {(r.kind, r.namespace, r.name) for r in ar.resources}
        for c in install.controllers:
            for kind, name in (("Deployment", c.deployment), ("Service", c.service), ("Secret", c.secret)):
                assert (kind, install.namespace, name) in found, (install.app, kind, name)
    pinned = _go_mod_requires(KUBE_MODULE / "controllers" / "go.mod")
    assert pinned == {m: releases.BY_MODULE[m].version for m in pinned}
    built = set(TARGETS["controllers"].names)
    assert built == {c.binary for i in controllers.INSTALLS for c in i.controllers}


def test_a_rotator_keeps_the_pair_it_is_given():
    """What cert-controller@v0.16.0 ValidCert checks, checked here on the pair the Secret gets."""
    data = controllers.rotator_secret_data("jobset-ca", "jobset-webhook-service.kubeflow-system.svc")
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    ) == ["jobset-ca"]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["jobset-webhook-service.kubeflow-system.svc"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    leaf.verify_directly_issued_by(ca)
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days >= 90 + 1
    assert data["ca.key"].startswith(b"-----BEGIN RSA PRIVATE KEY-----")  # PKCS#1, as the rotator parses


@pytest.mark.cluster
def test_every_controller_runs_and_its_webhooks_reach_it_through_its_service_with_its_own_ca(clusters):
    started = clusters["dev"]
    alive = {d.name: d for d in started.state.daemons if d.alive()}
    assert {c.binary for i in controllers.INSTALLS for c in i.controllers} <= set(alive)
    with started.client() as kube:
        cas = set()
        for install in controllers.INSTALLS:
            for c in install.controllers:
                secret = kube.get(f"/api/v1/namespaces/{install.namespace}/secrets/{c.secret}")
                cas.add(secret["data"]["ca.crt"])
                cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
                # the rotator kept the pair it was given: its own would name no IP address
                sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"], c.secret
                # its Service leads to its process: one slice of ours, to the host kube-apiserver
                # alone resolves, at a port the controller listens on
                slices = kube.get(
                    f"/apis/discovery.k8s.io/v1/namespaces/{install.namespace}/endpointslices",
                    params={"labelSelector": f"kubernetes.io/service-name={c.service},"
                            f"endpointslice.kubernetes.io/managed-by={services.MANAGER}"},
                )["items"]  # fmt: skip
                assert len(slices) == 1, c.service
                assert slices[0]["endpoints"][0]["addresses"] == [services.HOST]
                assert slices[0]["ports"][0]["port"] in alive[c.binary].ports, c.service
        configs = [
            *kube.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")["items"],
            *kube.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")["items"],
        ]
        release = [c for c in configs if c["metadata"]["name"] != "trainyard-fabric"]
        services_of = {c.service for i in controllers.INSTALLS for c in i.controllers}
        assert len(release) >= 6
        for config in release:
            for hook in config["webhooks"]:
                # as the release registers it: its Service, not a URL
                assert "url" not in hook["clientConfig"], config["metadata"]["name"]
                assert hook["clientConfig"]["service"]["name"] in services_of, config["metadata"]["name"]
                # the CA of the Secret its rotator kept, injected by the rotator
                assert hook["clientConfig"]["caBundle"] in cas, config["metadata"]["name"]


def _namespace(kube) -> None:
    kube.create_if_absent({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})


def _refused(kube, obj: dict) -> str:
    with pytest.raises(ApiError) as refused:
        kube.create({**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACE}}, dry_run=True)
    return refused.value.message


@pytest.mark.cluster
def test_the_controllers_own_webhooks_refuse_what_they_refuse(clusters):
    with clusters.kube("dev") as kube:
        _namespace(kube)
        message = _refused(
            kube,
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "no-runtime"},
                "spec": {"runtimeRef": {"name": "no-such-runtime"}},
            },
        )
        # Kueue's TrainJob webhook and Trainer's both look the runtime up; kube-apiserver calls
        # validating webhooks in parallel and reports the first refusal to arrive
        # (apiserver@v0.36.5:pkg/admission/plugin/webhook/validating/dispatcher.go)
        webhooks = r'admission webhook "(vtrainjob\.kb\.io|validator\.trainjob\.trainer\.kubeflow\.org)" denied'
        assert re.search(webhooks, message), message
        # Trainer's in the words `trainyard validate` uses (trainjob.missing_runtime); Kueue's its own
        offline = trainjob.missing_runtime({"spec": {"runtimeRef": {"name": "no-such-runtime"}}})
        not_found, sentence = offline.removeprefix("spec.runtimeRef: ").split(": ", 1)
        if "vtrainjob.kb.io" in message:
            assert message.endswith("denied the request: runtime 'no-such-runtime' not found"), message
        else:
            assert not_found in message and sentence in message, (message, offline)
        container = {"name": "pytorch", "image": "registry.example.com/ml/trainer:0.1.0"}
        replica = {"replicas": 2, "template": {"spec": {"containers": [container]}}}
        message = _refused(
            kube,
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "two-masters"},
                "spec": {"pytorchReplicaSpecs": {"Master": replica}},
            },
        )
        assert 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied' in message, message
        job = {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}}
        message = _refused(
            kube,
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "bad-success-policy"},
                "spec": {
                    "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}],
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["no-such-job"]},
                },
            },
        )
        assert 'admission webhook "vjobset.kb.io" denied the request' in message, message


@pytest.mark.cluster
def test_kueue_converts_its_objects_through_its_conversion_webhook_and_service(clusters):
    with clusters.kube("dev") as kube:
        crd = kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterqueues.kueue.x-k8s.io")
        conversion = crd["spec"]["conversion"]
        assert conversion["strategy"] == "Webhook"
        client = conversion["webhook"]["clientConfig"]
        assert client["service"]["name"] == "kueue-webhook-service" and "url" not in client
        assert client["caBundle"]  # Kueue's rotator injects it into its CRDs too
        served = [v["name"] for v in crd["spec"]["versions"] if v["served"] and not v.get("storage")]
        assert served, "no second served version to convert to"
        got = kube.get(f"/apis/kueue.x-k8s.io/{served[0]}/clusterqueues")["items"]
        assert got and all(q["apiVersion"] == f"kueue.x-k8s.io/{served[0]}" for q in got)


def _pytorchjob(specs: dict) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "refused", "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": specs},
    }


TRAINER = {"name": "pytorch", "image": "registry.example.com/ml/trainer:0.1.0"}
ONE_MASTER = {"replicas": 1, "template": {"spec": {"containers": [TRAINER]}}}
REFUSED = {
    "two masters": {"Master": {**ONE_MASTER, "replicas": 2}},
    "no pytorch container": {
        "Master": {**ONE_MASTER, "template": {"spec": {"containers": [{**TRAINER, "name": "x"}]}}}
    },
    "no image": {"Master": {**ONE_MASTER, "template": {"spec": {"containers": [{"name": "pytorch"}]}}}},
    "no worker": {"Master": ONE_MASTER, "Worker": {**ONE_MASTER, "replicas": 0}},
}


@pytest.mark.cluster
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_operator_refuses_validate_refuses_with_its_message(clusters, case):
    """``trainyard validate`` (training_operator.admission_problems) names the field the
    operator's webhook names, with the webhook's message (and a hint after it)."""
    doc = _pytorchjob(REFUSED[case])
    with clusters.kube("dev") as kube:
        _namespace(kube)
        message = _refused(kube, doc)
    prefix = 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
    assert message.startswith(prefix), message
    field_path, said = message[len(prefix) :].split(": ", 1)
    dotted = re.sub(r"\[([A-Z]\w*)\]", r".\1", field_path)  # spec.pytorchReplicaSpecs[Master] -> .Master
    offline = training_operator.admission_problems(doc)
    assert any(p.startswith(f"{dotted}: {said}") for p in offline), (message, offline)


@pytest.mark.cluster
def test_a_controller_whose_webhook_is_down_stops_its_objects_until_it_answers(clusters):
    """Trainer's webhooks fail closed (failurePolicy Fail, as its release registers them): while
    nothing answers where its webhook's Service leads (its controller down, as kube-apiserver sees
    it), kube-apiserver refuses a TrainJob naming the webhook it could not call; once the webhook
    answers again, the same TrainJob is accepted. The controller itself is left running (a stopped
    one would lose its leader election and exit, as it does in a cluster): the configuration is
    pointed for a while at a Service that leads to a closed port (a changed configuration gets a
    new client; kube-apiserver keeps its open connections to an endpoint that is still there)."""
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/defaulter.trainer.kubeflow.org"
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "while-down", "namespace": NAMESPACE},
        "spec": {"runtimeRef": {"name": "trainyard-tcp"}},
    }
    nowhere = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "trainer-down", "namespace": "kubeflow-system"},
        "spec": {"ports": [{"name": "webhook-server", "port": 443}]},
    }
    with clusters.kube("dev") as kube:
        _namespace(kube)
        kube.create_if_absent(nowhere)
        services.route(kube, "kubeflow-system", "trainer-down", free_port())  # nothing listens there
        config = kube.get(path)
        names = [hook["clientConfig"]["service"]["name"] for hook in config["webhooks"]]
        down = copy.deepcopy(config)
        for hook in down["webhooks"]:
            hook["clientConfig"]["service"]["name"] = "trainer-down"
        kube.request("PUT", path, json=down)
        try:
            refused = wait_for(lambda: _refused_or_none(kube, job), timeout=15, what="the TrainJob refused")
        finally:
            config = kube.get(path)
            for hook, name in zip(config["webhooks"], names, strict=True):
                hook["clientConfig"]["service"]["name"] = name
            kube.request("PUT", path, json=config)
            kube.delete(nowhere)
            kube.delete(services.endpoint_slice("kubeflow-system", "trainer-down", "webhook-server", 1))
        assert 'failed calling webhook "defaulter.trainjob.trainer.kubeflow.org"' in refused, refused
        assert "connection refused" in refused
        accepted = wait_for(lambda: _accepted(kube, job), timeout=15, what="the TrainJob accepted again")
        assert accepted["metadata"]["name"] == "while-down"


def _refused_or_none(kube, job: dict) -> str | None:
    try:
        kube.create(job, dry_run=True)
    except ApiError as exc:
        return exc.message
    return None  # kube-apiserver's informer has not seen the changed slice yet


def _accepted(kube, job: dict) -> dict | None:
    try:
        return kube.create(job, dry_run=True)
    except ApiError:
        return None  # kube-apiserver's informer has not seen the restored configuration yet


@pytest.mark.cluster
def test_a_controller_that_crashes_is_restarted_and_serves_again(clusters):
    """As its Deployment's kubelet would (restartPolicy Always, the first restart at once): the JobSet
    controller killed with SIGKILL runs again and its webhook answers."""
    started = clusters["dev"]
    daemon = next(d for d in started.state.daemons if d.name == "jobset")

    def running() -> list[int]:
        return [pid for pid in descendants({daemon.pid}) if _command(pid).endswith("/jobset")]

    (first,) = running()
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "after-crash", "namespace": NAMESPACE},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
            "containers": [TRAINER], "restartPolicy": "Never"}}}}}]},
    }  # fmt: skip
    with started.client() as kube:
        _namespace(kube)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: controllers.RESTARTING in daemon.log_tail(20000), timeout=10, what="the exit seen")
        again = wait_for(lambda: [p for p in running() if p != first], timeout=30, what="started again", interval=0.5)
        assert again and daemon.alive()
        accepted = wait_for(lambda: _accepted(kube, jobset), timeout=60, what="its webhook answering again")
        assert accepted["metadata"]["name"] == "after-crash"
    assert "with status 137; restarting it in 0 s" in daemon.log_tail(20000)


def _command(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


@pytest.mark.cluster
def test_kueues_visibility_api_answers_through_the_front_proxy_for_the_caller(clusters):
    """Kueue's visibility API (an aggregated API server inside its controller), behind the
    APIServices its release renders, applied as Argo CD applies them: kube-apiserver finds them
    Available, and proxies a caller's request with the front proxy's certificate and the caller's
    name, which Kueue authorizes in turn: a ServiceAccount is refused until it is bound to Kueue's
    pending-workloads viewer role, then answered."""
    started = clusters["dev"]
    render = app_render.render_cluster(clusters.repo, "dev")
    kueue = render.app("trainyard-kueue")
    assert kueue is not None
    apis = [r.doc for r in kueue.resources if r.kind == "APIService"]
    assert sorted(a["metadata"]["name"] for a in apis) == [
        "v1beta1.visibility.kueue.x-k8s.io",
        "v1beta2.visibility.kueue.x-k8s.io",
    ]
    (queue,) = [r.name for r in render.resources() if r.kind == "ClusterQueue"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "trainyard-test-pending-workloads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kueue-pending-workloads-cq-viewer-role"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE}],
    }  # fmt: skip
    with started.client() as kube:
        _namespace(kube)
        try:
            for api in apis:
                kube.apply(api, manager="argocd-controller")

            def available() -> bool:
                for api in apis:
                    live = kube.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{api['metadata']['name']}")
                    conditions = (live.get("status") or {}).get("conditions") or []
                    if not any(c["type"] == "Available" and c["status"] == "True" for c in conditions):
                        return False
                return True

            wait_for(available, timeout=60, what="Kueue's APIServices Available")
            path = f"{VISIBILITY}/clusterqueues/{queue}/pendingworkloads"
            assert wait_for(lambda: kube.get(path), timeout=30, what="an answer")["kind"] == "PendingWorkloadsSummary"
            wait_for(lambda: _default_account(kube), timeout=30, what="the namespace's default ServiceAccount")
            token = controllers._token(kube, NAMESPACE, "default")
            context = ssl.create_default_context(cafile=str(started.paths.pki.ca))
            with httpx.Client(base_url=started.state.server, verify=context, timeout=10) as caller:
                headers = {"Authorization": f"Bearer {token}"}
                refused = caller.get(path, headers=headers)
                assert refused.status_code == 403, refused.text
                assert f"system:serviceaccount:{NAMESPACE}:default" in refused.json()["message"]
                kube.apply(binding, manager="trainyard-test")
                answered = wait_for(
                    lambda: (r := caller.get(path, headers=headers)).status_code == 200 and r,
                    timeout=30,
                    what="the bound ServiceAccount answered",
                )
                assert answered.json()["kind"] == "PendingWorkloadsSummary"
        finally:
            kube.delete(binding)
            for api in apis:
                kube.delete(api)


def _default_account(kube) -> bool:
    try:
        return bool(kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"))
    except ApiError:
        return False

"""Admission for real: pods created through kube-apiserver v1.36 with the cluster's admission.

Differential: the pod kube-apiserver would store equals the engine's answer, field by field. The
engine's answer is computed from the pod exactly as kube-apiserver hands it to the mutating
admission (decoded, defaulted, with its service-account token volume: a dry-run create in a
namespace no trainyard admission selects), then defaulted again as kube-apiserver does after
mutation. Every create here is ``dryRun=All``: the cluster validates and admits it, stores nothing.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings

from tests.trainyard.cluster.conftest import same_token_volume
from tests.webhook import strategies
from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.processes import wait_for
from trainyard.cluster.up import render_for
from trainyard.repo.generate.cel_jsonpatch import object_initializers
from trainyard.repo.generate.mutating_harness import Harness, limits_hit, normalise
from trainyard.repo.jobs.preview import cluster_job_pods
from trainyard.repo.model import repository
from trainyard.repo.upstream.applications import ClusterRender
from webhook import engine
from webhook.defaults import SERVICE_DNS_NAME
from webhook.policy import PolicySet, load_policies

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[3]
JOBS = "ml-training"  # the job namespace, labelled trainyard.dev/injection=enabled
PLAIN = "trainyard-test-plain"  # selected by no trainyard admission
# selected by the fabric admission like the job namespace, without its quota (the dev cluster's
# quota is a lab's: the example pods of bigger clusters exceed it) nor its job pod-security policy
INJECTED = "trainyard-test-fabric"
INJECTION_LABEL = {"trainyard.dev/injection": "enabled"}
TRAINER = "registry.example.com/ml/trainer"  # the examples' trainer image
SERVER_SET = ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields")


# --- helpers ------------------------------------------------------------------------------------


def _namespace(kube: Kube, name: str, labels: dict | None = None) -> None:
    kube.create_if_absent({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    kube.wait_service_account(name)


def _plain_namespace(kube: Kube) -> None:
    _namespace(kube, PLAIN)
    _namespace(kube, INJECTED, INJECTION_LABEL)


_ACCOUNTS: set[tuple[str, str, str]] = set()


def _accounts(kube: Kube, pod: dict, *namespaces: str) -> None:
    """The ServiceAccount a job pod names, in the test namespaces too (the job namespace has it)."""
    name = (pod.get("spec") or {}).get("serviceAccountName")
    for namespace in namespaces if name and name != "default" else ():
        if (kube.server, namespace, name) in _ACCOUNTS:
            continue
        kube.create_if_absent(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        )
        _ACCOUNTS.add((kube.server, namespace, name))


def _in(pod: dict, namespace: str) -> dict:
    out = copy.deepcopy(pod)
    meta = out.setdefault("metadata", {})
    meta["namespace"] = namespace
    for key in SERVER_SET:
        meta.pop(key, None)
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = "differential-"
    elif meta.get("name") and not meta["name"].endswith("-dryrun"):  # the controllers made the job's pods
        meta["name"] = meta["name"][:56] + "-dryrun"
    out.pop("status", None)
    return out


def _comparable(pod: dict) -> dict:
    """What two creates of one pod may not differ in: server-set metadata, the generated name, the
    random suffix of the token volume's name and the clock time of a condition kube-apiserver sets
    at creation (PodScheduled False for a gated pod) left out."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    for key in (*SERVER_SET, "namespace"):
        meta.pop(key, None)
    for condition in (out.get("status") or {}).get("conditions") or []:
        condition.pop("lastTransitionTime", None)
    if meta.get("generateName"):
        meta.pop("name", None)
    spec = out["spec"]
    same_token_volume(spec)
    return out


def as_sent(kube: Kube, pod: dict, namespace: str) -> dict:
    """``pod`` as kube-apiserver hands it to the mutating admission of ``namespace``."""
    _accounts(kube, pod, PLAIN, INJECTED)
    sent = _plain_dry_run(kube, pod)
    return _in(sent, namespace) | {"status": sent.get("status", {})}


def _plain_dry_run(kube: Kube, pod: dict) -> dict:
    """``pod`` created as a dry run in PLAIN. Kueue's pod webhook looks a pod's owning job up in the
    pod's namespace (a job's pod exists only once its job does), and the job is not in PLAIN; an
    owner reference is never defaulted, so it is left out there and put back."""
    body = _in(pod, PLAIN)
    owners = body["metadata"].pop("ownerReferences", None)
    created = kube.create(body, dry_run=True)
    if owners:
        created["metadata"]["ownerReferences"] = owners
    return created


def engine_answer(kube: Kube, pod: dict, policies: PolicySet, default: str, namespace: str) -> dict | None:
    """The pod the engine makes of ``pod``, defaulted by kube-apiserver; None if the engine refuses it."""
    sent = as_sent(kube, pod, namespace)
    decision = engine.admit(sent, policies, default, namespace)
    if decision.action == "deny":
        return None
    ops = decision.mutation.ops if decision.action == "mutate" and decision.mutation else []
    mutated = jsonpatch.apply_patch(sent, ops)
    return _plain_dry_run(kube, mutated)


def _owners_exist(kube: Kube, pod: dict, namespace: str, timeout: float = 60.0) -> None:
    """Wait for the objects the pod names as owners: Kueue's pod webhook looks a Job's pod's Job up,
    and in a cluster the Job controller makes a pod only once its Job exists (JobSet makes the Job
    a moment after the TrainJob's sync)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        group_version = ref.get("apiVersion", "")
        base = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        path = f"{base}/namespaces/{namespace}/{ref['kind'].lower()}s/{ref['name']}"
        wait_for(lambda p=path: kube.http.get(p).status_code == 200, timeout=timeout, what=path, interval=0.2)


def stored(kube: Kube, pod: dict, namespace: str = INJECTED, headers: dict | None = None) -> dict:
    """``pod`` as kube-apiserver stores it in ``namespace`` (a dry run). In its job's namespace its
    owners must exist first; elsewhere they cannot (the job is not there), so the owner references
    are left out for Kueue's pod webhook and put back, as for PLAIN."""
    body = _in(pod, namespace)
    owners = None
    if namespace == (pod.get("metadata") or {}).get("namespace"):
        _owners_exist(kube, pod, namespace)
    else:
        owners = body["metadata"].pop("ownerReferences", None)
    created = kube.create(body, dry_run=True, headers=headers)
    if owners:
        created["metadata"]["ownerReferences"] = owners
    return created


def _diff(a: dict, b: dict) -> str:
    return "\n".join(f"{op['op']} {op['path']}: {op.get('value')!r}" for op in jsonpatch.make_patch(a, b).patch)


def assert_same(kube: Kube, pod: dict, policies: PolicySet, default: str, namespace: str = JOBS) -> dict:
    expected = engine_answer(kube, pod, policies, default, namespace)
    assert expected is not None, "the engine refuses this pod"
    got = stored(kube, pod, namespace)
    a, b = _comparable(expected), _comparable(got)
    assert a == b, f"the stored pod differs from the engine's answer (engine -> stored):\n{_diff(a, b)}"
    return got


def _examples() -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted((REPO_ROOT / "examples/pods").glob("*.yaml"))]


def _job_pods(cluster: str) -> list[dict]:
    return cluster_job_pods(repository.load(REPO_ROOT), cluster)


@functools.cache
def _render(cluster: str) -> ClusterRender:
    """The cluster as `up` applied it, rendered once for this module."""
    return render_for(repository.load(REPO_ROOT), cluster)


@functools.cache
def _fabric_params(cluster: str) -> dict[str, str]:
    """The cluster's trainyard-fabric-params: defaultFabric and fabric.<profile>: <attachment>."""
    params = next(
        r for r in _render(cluster).resources() if r.kind == "ConfigMap" and r.name == "trainyard-fabric-params"
    )
    return params.doc["data"]


def _default_fabric(cluster: str) -> str:
    return _fabric_params(cluster)["defaultFabric"]


def _offered(cluster: str) -> dict[str, str]:
    """profile -> network attachment the cluster offers."""
    return {k.removeprefix("fabric."): v for k, v in _fabric_params(cluster).items() if k.startswith("fabric.")}


@functools.cache
def _harness(cluster: str) -> Harness:
    return Harness([r.doc for r in _render(cluster).resources() if r.kind == "MutatingAdmissionPolicy"])


def _admission(clusters, cluster: str):
    """A client of ``cluster`` (its PLAIN namespace made), the policies and its default fabric."""
    kube = clusters.kube(cluster)
    _plain_namespace(kube)
    yield kube, load_policies(REPO_ROOT / "policies"), _default_fabric(cluster)
    kube.close()


@pytest.fixture(scope="module")
def dev(clusters):
    yield from _admission(clusters, "dev")


@pytest.fixture(scope="module")
def prod_ib(clusters):
    yield from _admission(clusters, "prod-ib")


# --- webhook mode -------------------------------------------------------------------------------


def test_example_pods_get_exactly_the_engines_fabric(dev):
    kube, policies, default = dev
    for pod in _examples():
        got = assert_same(kube, pod, policies, default, INJECTED)
        trainers = [c for c in got["spec"]["containers"] if c["image"].startswith(TRAINER)]
        if trainers:  # the fabric really is on it: the shm volume and the network annotation
            assert NETWORKS in got["metadata"]["annotations"]
            assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in got["spec"]["volumes"])


@pytest.mark.parametrize("cluster", ["dev", "prod-roce"])
def test_every_jobs_pods_get_exactly_the_engines_fabric(clusters, cluster):
    kube = clusters.kube(cluster)
    _plain_namespace(kube)
    policies, default = load_policies(REPO_ROOT / "policies"), _default_fabric(cluster)
    pods = _job_pods(cluster)
    assert pods
    for pod in pods:
        assert_same(kube, pod, policies, default, JOBS)
    kube.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pod=strategies.pods())
def test_generated_pods_get_exactly_the_engines_fabric(dev, pod):
    kube, policies, default = dev
    try:
        sent = as_sent(kube, pod, INJECTED)
    except ApiError as exc:
        if exc.code == 422:  # a pod kube-apiserver itself refuses never reaches admission
            event("refused by kube-apiserver's validation")
            return
        raise
    try:
        decision = engine.admit(sent, policies, default, INJECTED)
    except engine.MutationError:
        decision = engine.Decision("deny")
    if decision.action == "deny":  # the webhook refuses it; so does the API server, with the reason
        with pytest.raises(ApiError) as refused:
            stored(kube, pod, INJECTED)
        assert "fabric.trainyard.dev" in refused.value.message
        return
    if decision.action == "mutate" and decision.profile.name not in _offered("dev"):
        # the engine gives any profile's fabric; the cluster's ValidatingAdmissionPolicy then refuses
        # a fabric the cluster does not offer (trainyard-fabric-params)
        with pytest.raises(ApiError) as refused:
            stored(kube, pod, INJECTED)
        assert "trainyard-fabric-required" in refused.value.message
        assert f"fabric {decision.profile.name} is not offered on this cluster" in refused.value.message
        return
    assert_same(kube, pod, policies, default, INJECTED)


# --- refusals and the opt-out --------------------------------------------------------------------


def _trainer_pod(annotations: dict | None = None) -> dict:
    """A pod of one trainer container and nothing of the fabric."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "trainer-", "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "trainer", "image": "registry.example.com/ml/trainer:0.1.0"}]},
    }


OPT_OUT = {"trainyard.dev/inject": "false"}
NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _as(user: str, *groups: str) -> dict:
    headers = {"Impersonate-User": user}
    if groups:
        headers["Impersonate-Group"] = ",".join(groups)  # httpx sends one header; the server splits on ","
    return headers


def test_the_opt_out_is_honoured_only_for_a_user_granted_skip(dev, pod_creators):
    kube = dev[0]
    pod = _trainer_pod(OPT_OUT)
    # the platform group is bound to trainyard:fabric-opt-out (base/webhook/opt-out-rbac.yaml)
    platform = stored(kube, pod, headers=_as("alice", "trainyard:platform"))
    assert NETWORKS not in (platform["metadata"].get("annotations") or {})
    # anyone else asking for it gets the fabric all the same
    other = stored(kube, pod, headers=_as("bob", "developers"))
    assert NETWORKS in other["metadata"]["annotations"]


def test_a_jobs_controller_cannot_opt_its_pods_out(dev, pod_creators):
    kube = dev[0]
    controller = "system:serviceaccount:kubeflow-system:jobset-controller-manager"
    got = stored(kube, _trainer_pod(OPT_OUT), headers=_as(controller, "system:serviceaccounts"))
    assert NETWORKS in got["metadata"]["annotations"]


@pytest.fixture(scope="module")
def pod_creators(dev):
    """RBAC for the impersonated requesters: creating pods in the job namespace, as a job's
    controller may (JobSet's manager role grants it cluster-wide) and as a person may."""
    kube, _, _ = dev
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "test-pod-creator"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "update", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "test-pod-creator", "namespace": INJECTED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-pod-creator"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
            {"kind": "ServiceAccount", "name": "jobset-controller-manager", "namespace": "kubeflow-system"},
        ],
    }
    for obj in (role, binding):
        kube.apply(obj, manager="tests")
    # the RBAC authorizer reads bindings from an informer: wait until it answers with this one
    # (a SubjectAccessReview asks the same authorizer the create will meet)
    for user in ("alice", "bob", "system:serviceaccount:kubeflow-system:jobset-controller-manager"):
        wait_for(functools.partial(_may_create_pods, kube, user), timeout=30, what=f"RBAC lets {user} create pods")
    yield
    for obj in (binding, role):
        kube.delete(obj)


def _may_create_pods(kube: Kube, user: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"namespace": INJECTED, "verb": "create", "resource": "pods"}},
    }
    return bool(kube.create(review)["status"].get("allowed"))


def test_without_the_webhook_the_policy_refuses_a_trainer_pod(clusters, dev):
    """failurePolicy Ignore lets the pod past a webhook that does not answer; the fail-closed
    ValidatingAdmissionPolicy then refuses it for want of its fabric."""
    import os
    import signal

    kube, _, _ = dev
    hook = next(d for d in clusters["dev"].state.daemons if d.name == "trainyard-webhook")
    os.killpg(hook.pid, signal.SIGSTOP)  # stopped: kube-apiserver's call times out (timeoutSeconds 5)
    try:
        with pytest.raises(ApiError) as refused:
            stored(kube, _trainer_pod())
    finally:
        os.killpg(hook.pid, signal.SIGCONT)
    assert refused.value.code == 422
    assert "trainyard-fabric-required" in refused.value.message
    assert NETWORKS in stored(kube, _trainer_pod())["metadata"]["annotations"]  # answering again


def test_an_update_cannot_strip_the_fabric(dev):
    kube, _, _ = dev
    body = _in(_trainer_pod(), INJECTED)
    body["metadata"] |= {"name": "update-strip"}
    body["metadata"].pop("generateName", None)
    pod = kube.create(body)
    try:
        assert NETWORKS in pod["metadata"]["annotations"]
        # a merge patch (an UPDATE to admission) that takes the attachment away; a patch, not a PUT
        # of what was read, since the scheduler writes the unschedulable pod's status meanwhile
        strip = {"metadata": {"annotations": {NETWORKS: None}}}
        with pytest.raises(ApiError) as refused:
            kube.request(
                "PATCH",
                kube.path(pod),
                content=json.dumps(strip),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        assert refused.value.code == 422 and "trainyard-fabric-required" in refused.value.message
    finally:
        kube.delete(pod)


# --- policy mode ---------------------------------------------------------------------------------


def test_policy_mode_pods_get_the_engines_fabric_and_the_harness_agrees(clusters, prod_ib):
    """prod-ib runs by MutatingAdmissionPolicy on Kubernetes 1.36: the same pods through the real
    policies equal the engine's answer except where a named limit applies; and the offline CEL
    harness (validate's fast pre-check) gives the very pod the API server stores."""
    kube, policies, default = prod_ib
    harness = _harness("prod-ib")
    offered = _offered("prod-ib")
    checked = limited_seen = 0
    for pod in _examples() + _job_pods("prod-ib"):
        sent = as_sent(kube, pod, INJECTED)
        decision = engine.admit(sent, policies, default, INJECTED)
        limited = decision.action == "mutate" and limits_hit(sent, decision.profile)
        outcome = harness.admit(normalise(sent), namespace=INJECTED, default=default, offered=offered)
        try:
            got = stored(kube, pod)
        except ApiError as exc:
            # a named limit: the policy leaves the pod alone and the fail-closed policy refuses it
            # (docs/admission.md); the harness too leaves it alone
            assert limited, f"{pod['metadata'].get('name')}: refused outside the named limits: {exc}"
            assert "trainyard-fabric-required" in exc.message
            assert outcome.profile is None
            limited_seen += 1
            continue
        harness_pod = kube.create(_in(outcome.pod, PLAIN), dry_run=True)
        assert _comparable(harness_pod) == _comparable(got), _diff(_comparable(harness_pod), _comparable(got))
        if not limited:
            assert_same(kube, pod, policies, default, INJECTED)
            checked += 1
    assert limited_seen >= 1  # the examples include a pod in Multus's JSON form
    assert checked >= 5


ALIASED = "trainyard-test-140419"  # bound only by the policy below


def test_an_object_in_a_jsonpatch_list_reaches_the_pod(clusters, prod_ib):
    """kubernetes#140419, fixed in v1.36.5: kube-apiserver v1.36.0-v1.36.4 panics on a JSONPatch
    value holding an ``Object`` initializer inside a list (the request fails with an internal
    error, failurePolicy notwithstanding). The generated prod-ib policy with one such mutation more,
    bound to a namespace of its own: every pod gets the fabric of the generated policy, and the
    host alias. (The compiler itself never writes that shape: tests/trainyard/repo/generate.) On
    v1.36.4 this test fails: the server drops the connection (docs/cluster.md)."""
    kube, _, _ = prod_ib
    alias = {"ip": "10.0.0.1", "hostnames": ["probe.local"]}
    value = f"[Object.spec.hostAliases{{ip: '{alias['ip']}', hostnames: ['{alias['hostnames'][0]}']}}]"
    assert object_initializers(value) == ["Object.spec.hostAliases"]
    expression = f"[JSONPatch{{op: 'add', path: '/spec/hostAliases', value: {value}}}]"
    # every profile's policy (a pod's fabric picks one), each with the mutation added
    added: list[dict] = []
    for r in _render("prod-ib").resources():
        if r.kind not in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"):
            continue
        doc = copy.deepcopy(r.doc)
        name = r.name.replace("trainyard-fabric", ALIASED)
        doc["metadata"] = {"name": name}
        if r.kind == "MutatingAdmissionPolicy":
            doc["spec"]["failurePolicy"] = "Fail"  # an error in the added mutation refuses the pod, never hides
            doc["spec"]["mutations"].append({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
        else:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace("trainyard-fabric", ALIASED)
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ALIASED}}
            }
        added.append(doc)
    assert len(added) == 6  # tcp, roce, ib
    _namespace(kube, ALIASED)
    checked = 0
    try:
        for doc in added:
            kube.create(doc)
        for pod in _examples():
            try:
                want = _comparable(stored(kube, pod, INJECTED))
            except ApiError:  # a named limit: refused (test_policy_mode_pods_get_the_engines_fabric...)
                continue
            if not any(c["image"].startswith(TRAINER) for c in want["spec"]["containers"]):
                continue
            _accounts(kube, pod, ALIASED)
            # kube-apiserver loads a new policy from its informer: ask until this one applies
            got = wait_for(
                lambda pod=pod: (p := stored(kube, pod, ALIASED)).get("spec", {}).get("hostAliases") and p,
                what=f"{ALIASED} to apply",
            )
            assert got["spec"]["hostAliases"] == [alias]
            want["spec"]["hostAliases"] = [alias]
            assert _comparable(got) == want, _diff(want, _comparable(got))
            checked += 1
    finally:
        for doc in reversed(added):
            kube.delete(doc)
    assert checked >= 3


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pod=strategies.pods())
def test_every_harness_verdict_on_generated_pods_is_the_api_servers(prod_ib, pod):
    """The offline CEL harness stays as validate's fast pre-check: on odd but valid pods, what it
    makes of a pod is what the real policies make of it."""
    kube, _, default = prod_ib
    try:
        sent = as_sent(kube, pod, INJECTED)
    except ApiError as exc:
        if exc.code == 422:  # refused before admission: nothing to compare
            event("refused by kube-apiserver's validation")
            return
        raise
    harness = _harness("prod-ib")
    outcome = harness.admit(normalise(sent), namespace=INJECTED, default=default, offered=_offered("prod-ib"))
    try:
        got = stored(kube, pod)
    except ApiError as exc:
        # refused after the policies: the harness's pod must be refused alike
        with pytest.raises(ApiError) as again:
            kube.create(_in(outcome.pod, INJECTED), dry_run=True)
        assert again.value.message.split(": ", 1)[-1] == exc.message.split(": ", 1)[-1]
        return
    harness_pod = kube.create(_in(outcome.pod, PLAIN), dry_run=True)
    assert _comparable(harness_pod) == _comparable(got), _diff(_comparable(harness_pod), _comparable(got))


def test_only_kube_apiserver_may_call_the_webhook(clusters, dev):
    """The API server's calls succeed (every test above); a client without the certificate
    kube-apiserver presents is refused at the TLS handshake, before any HTTP."""
    import socket
    import ssl

    started = clusters["dev"]
    hook = next(d for d in started.state.daemons if d.name == "trainyard-webhook")

    def answer(client_cert: bool) -> bytes:
        context = ssl.create_default_context(cafile=str(started.folder / "webhook" / "tls" / "ca.crt"))
        if client_cert:
            p = started.paths.pki
            context.load_cert_chain(p.cert("kube-apiserver-webhook-client"), p.key("kube-apiserver-webhook-client"))
        request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        try:
            with (
                socket.create_connection(("127.0.0.1", hook.ports[0]), timeout=10) as raw,
                # its certificate names its Service, which kube-apiserver calls it by
                context.wrap_socket(raw, server_hostname=SERVICE_DNS_NAME) as tls,
            ):
                tls.sendall(request)  # TLS 1.3: the server's refusal arrives on the first read
                return tls.recv(64)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return b""

    assert answer(client_cert=True).startswith(b"HTTP/1.1 200")  # kube-apiserver's certificate
    assert answer(client_cert=False) == b""


# --- an image built FROM the trainer image, declared in every profile's trainerImages -------------

DECLARED = "registry.example.com/teams/llm-finetune"


@pytest.mark.parametrize("cluster", ["dev", "prod-ib"])
def test_a_declared_image_built_from_the_trainer_image_gets_the_fabric(clusters, cluster):
    """In webhook mode (dev) and policy mode (prod-ib), in the job namespace with its pod security
    policy: the API server stores the engine's pod for the declared repository in any spelling the
    identity rule folds, and leaves a look-alike without a fabric."""
    kube = clusters.kube(cluster)
    _plain_namespace(kube)
    policies, default = load_policies(REPO_ROOT / "policies"), _default_fabric(cluster)
    template = _job_pods(cluster)[0]
    cases = [(f"{DECLARED}:v1.4.0", True), ("REGISTRY.example.com:443/teams/llm-finetune:v1.4.0", True),
             ("registry.example.com/teams/llm-finetune-x:v1.4.0", False)]  # fmt: skip
    for image, trainer in cases:
        pod = copy.deepcopy(template)
        for c in pod["spec"]["containers"]:
            if policies.get(default).is_trainer_image(c.get("image")):
                c["image"] = image
        got = assert_same(kube, pod, policies, default, JOBS)
        assert (NETWORKS in got["metadata"].get("annotations", {})) is trainer, image
    kube.close()

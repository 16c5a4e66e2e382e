"""The admission configuration of base/webhook, evaluated with compiled CEL (cel-cpp) on RE2: the webhook's
matchConditions and the ValidatingAdmissionPolicy. Fail-open webhook, fail-closed check of the
final pod at CREATE and UPDATE, one image identity and one opt-out rule with the engine, and the
opt-out decided by kube-apiserver's authorizer (emulated RBAC) from the rendered RBAC."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.contract.image_cases import CASES, HUB, HUB_CASES, TRAINER
from trainyard.contract import cel
from trainyard.repo.generate import runtimes
from trainyard.repo.model import rendered_facts
from trainyard.repo.upstream import training_operator, trainjob, vap
from trainyard.repo.upstream.rbac import Rbac, User
from trainyard.repo.upstream.vap import Request
from webhook.engine import admit
from webhook.policy import load_policies

PLATFORM = User("alice@example.com", ("trainyard:platform", "system:authenticated"))
DEVELOPER = User("bob@example.com", ("ml-engineers", "system:authenticated"))


@pytest.fixture(scope="module")
def dev(report):
    resources = report.renders["dev"].resources()
    facts = rendered_facts.collect(resources)
    job = next(r.doc for r in resources if training_operator.is_job(r.doc))
    return facts, training_operator.expand_job(job)


@pytest.fixture(scope="module")
def rbac(report):
    return Rbac(r.doc for r in report.renders["dev"].resources())


@pytest.fixture(scope="module")
def policies(repo):
    return load_policies(repo.root / "policies")


def _mutated(pod, policies, profile="tcp"):
    decision = admit(copy.deepcopy(pod), policies, profile, "ml-training")
    assert decision.action == "mutate"
    return jsonpatch.apply_patch(pod, decision.mutation.ops)


def _with_image(pod: dict, image: str) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0]["image"] = image
    return out


def _annotated(pod: dict, **annotations: str) -> dict:
    out = copy.deepcopy(pod)
    out["metadata"].setdefault("annotations", {}).update(annotations)
    return out


# --- the text: the rules as trainyard/contract/cel.py writes them ------------------------------------


def test_every_expression_compiles(dev):
    facts, _ = dev
    assert vap.compile_policy(facts.policy.doc) == []


def test_the_policy_and_the_webhook_spell_the_rules_as_cel_py_writes_them(dev, policies):
    facts, _ = dev
    repositories = sorted({r for p in policies.profiles.values() for r in p.trainer_images})
    assert repositories == [TRAINER, "registry.example.com/teams/llm-finetune"]  # every profile lists both
    assert cel.differences(facts.policy.doc["spec"], cel.policy_expressions(repositories)) == []
    for hook in facts.mutating.doc["webhooks"]:
        assert cel.differences(hook, cel.webhook_conditions(repositories)) == []


# --- CREATE --------------------------------------------------------------------------------------


def test_unmutated_trainer_pods_are_rejected_saying_the_webhook_did_not_run(dev):
    facts, pods = dev
    for pod in pods:
        verdict = vap.check(pod, facts.params.doc, facts.policy.doc)
        assert verdict.matched
        assert len(verdict.failures) == 3
        assert all("the trainyard webhook did not run" in m for m in verdict.failures)
        assert any("fabric network training-network" in m for m in verdict.failures)
        assert any("container pytorch has no /dev/shm mount" in m for m in verdict.failures)
        assert any("NCCL_SOCKET_IFNAME" in m for m in verdict.failures)
        assert all(pod["metadata"]["name"] in m for m in verdict.failures)


def test_mutated_pods_are_admitted(dev, policies):
    facts, pods = dev
    for pod in pods:
        assert vap.evaluate(_mutated(pod, policies), facts.params.doc, facts.policy.doc) == []


def test_each_missing_piece_is_caught(dev, policies):
    facts, pods = dev
    good = _mutated(pods[0], policies)
    no_net = copy.deepcopy(good)
    no_net["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = "other-network"
    assert [m for m in vap.evaluate(no_net, facts.params.doc, facts.policy.doc) if "fabric network" in m]
    no_shm = copy.deepcopy(good)
    no_shm["spec"]["containers"][0]["volumeMounts"] = [
        m for m in no_shm["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] != "/dev/shm"
    ]
    assert [m for m in vap.evaluate(no_shm, facts.params.doc, facts.policy.doc) if "/dev/shm" in m]
    no_ifname = copy.deepcopy(good)
    no_ifname["spec"]["containers"][0]["env"] = [
        e for e in no_ifname["spec"]["containers"][0]["env"] if e["name"] != "NCCL_SOCKET_IFNAME"
    ]
    assert [m for m in vap.evaluate(no_ifname, facts.params.doc, facts.policy.doc) if "NCCL_SOCKET_IFNAME" in m]


@pytest.mark.parametrize(
    "networks",
    [
        "training-network",
        "ml-training/training-network",
        "storage, training-network@net2",
        '[{"name": "training-network", "interface": "net1"}]',
    ],
)
def test_both_forms_of_the_networks_annotation(dev, policies, networks):
    facts, pods = dev
    pod = _annotated(_mutated(pods[0], policies), **{"k8s.v1.cni.cncf.io/networks": networks})
    assert vap.evaluate(pod, facts.params.doc, facts.policy.doc) == []


def test_a_similar_network_name_is_not_the_fabric(dev, policies):
    facts, pods = dev
    pod = _annotated(_mutated(pods[0], policies), **{"k8s.v1.cni.cncf.io/networks": "training-network-2, xtraining"})
    assert vap.evaluate(pod, facts.params.doc, facts.policy.doc)


def test_a_fabric_the_cluster_does_not_offer(dev, policies):
    facts, pods = dev
    pod = copy.deepcopy(pods[0])
    pod["metadata"]["labels"]["trainyard.dev/fabric"] = "roce"
    mutated = _mutated(pod, policies)  # the webhook applies roce...
    failures = vap.evaluate(mutated, facts.params.doc, facts.policy.doc)
    assert any("fabric roce is not offered on this cluster" in m for m in failures)  # ...the dev cluster refuses


@pytest.mark.parametrize(("label", "fabric"), [("", "tcp"), ("tcp", "tcp"), ("roce", "roce")])
def test_the_fabric_label_is_read_as_the_engine_reads_it(dev, policies, label, fabric):
    facts, pods = dev
    pod = copy.deepcopy(pods[0])
    pod["metadata"]["labels"]["trainyard.dev/fabric"] = label
    decision = admit(copy.deepcopy(pod), policies, "tcp", "ml-training")
    assert decision.profile.name == fabric
    mutated = jsonpatch.apply_patch(pod, decision.mutation.ops)
    offered = vap.evaluate(mutated, facts.params.doc, facts.policy.doc) == []
    assert offered is (fabric == "tcp")  # dev offers tcp only: an empty label is the default there too


def test_missing_parameters_deny(dev):
    facts, pods = dev
    failures = vap.evaluate(pods[0], None, facts.policy.doc)
    assert failures and "parameterNotFoundAction: Deny" in failures[0]


def test_default_policy_is_the_repository_file(dev):
    facts, pods = dev
    assert vap.load_policy()["spec"] == facts.policy.doc["spec"]
    assert len(vap.evaluate(pods[0], facts.params.doc["data"])) == 3


def test_mirror_pods_are_left_alone(dev):
    facts, pods = dev
    mirror = _annotated(pods[0], **{"kubernetes.io/config.mirror": "x"})
    assert not vap.check(mirror, facts.params.doc, facts.policy.doc).matched


# --- one image identity: the table through the engine's rule, the webhook and the policy -----------


@pytest.mark.parametrize(("image", "trainer"), CASES)
def test_the_image_identity_table_through_the_webhook_and_the_policy(dev, policies, image, trainer):
    facts, pods = dev
    pod = _with_image(pods[0], image)
    assert policies.get("tcp").is_trainer_image(image) is trainer  # the engine's rule
    assert vap.webhook_matches(facts.mutating.doc, pod) is trainer
    assert vap.check(pod, facts.params.doc, facts.policy.doc).matched is trainer


@pytest.mark.parametrize(("image", "trainer"), HUB_CASES)
def test_the_docker_hub_table_through_generated_conditions(dev, image, trainer):
    facts, pods = dev
    mwc = copy.deepcopy(facts.mutating.doc)
    conditions = cel.webhook_conditions([HUB])
    mwc["webhooks"][0]["matchConditions"] = [{"name": n, "expression": e} for (_, n), e in conditions.items()]
    assert vap.webhook_matches(mwc, _with_image(pods[0], image)) is trainer


# --- the opt-out: a privilege, read with one spelling -----------------------------------------------


@pytest.mark.parametrize("value", ["false", "False", "FALSE", "fAlse", " false", "false ", "no", ""])
def test_an_opt_out_without_the_privilege_changes_nothing(dev, policies, value):
    facts, pods = dev
    asked = _annotated(pods[0], **{"trainyard.dev/inject": value})
    for user in (vap.CONTROLLER, DEVELOPER):
        request = Request(user=user)
        assert vap.webhook_matches(facts.mutating.doc, asked, request)  # the webhook mutates it
        verdict = vap.check(asked, facts.params.doc, facts.policy.doc, request)
        assert verdict.matched and verdict.failures  # unmutated, it is refused
        mutated = _mutated(asked, policies)
        assert vap.check(mutated, facts.params.doc, facts.policy.doc, request).failures == []


def test_the_platform_team_may_opt_out_with_the_exact_spelling(dev, rbac):
    facts, pods = dev
    request = Request(user=PLATFORM)
    opted = _annotated(pods[0], **{"trainyard.dev/inject": "false"})
    assert not vap.webhook_matches(facts.mutating.doc, opted, request, rbac)
    assert not vap.check(opted, facts.params.doc, facts.policy.doc, request, rbac).matched
    for other in ("False", " false", "no"):  # only the spelling the engine reads (names.asks_opt_out)
        pod = _annotated(pods[0], **{"trainyard.dev/inject": other})
        assert vap.webhook_matches(facts.mutating.doc, pod, request, rbac)
        assert vap.check(pod, facts.params.doc, facts.policy.doc, request, rbac).failures


def test_the_controller_that_creates_job_pods_is_not_granted_the_opt_out(dev, rbac):
    facts, pods = dev
    opted = _annotated(pods[0], **{"trainyard.dev/inject": "false"})
    for user in (vap.CONTROLLER, User.service_account("jobset-system", "jobset-controller-manager"), DEVELOPER):
        assert vap.webhook_matches(facts.mutating.doc, opted, Request(user=user), rbac)
        assert vap.check(opted, facts.params.doc, facts.policy.doc, Request(user=user), rbac).failures


def test_the_opt_out_rbac_grants_exactly_the_verb_the_check_asks(report):
    docs = [r.doc for r in report.renders["dev"].resources() if r.name == "trainyard:fabric-opt-out"]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["trainyard.dev"], "resources": ["fabrics"], "verbs": ["skip"]}]
    assert "check('skip')" in cel.MAY_OPT_OUT and "resource('fabrics')" in cel.MAY_OPT_OUT


# --- UPDATE ----------------------------------------------------------------------------------------


def _update(old: dict, user: User = DEVELOPER) -> Request:
    return Request(operation="UPDATE", user=user, old=old)


def test_the_webhook_is_called_on_create_only(dev, policies):
    facts, pods = dev
    assert not vap.webhook_matches(facts.mutating.doc, pods[0], Request(operation="UPDATE", old=pods[0]))


def test_an_update_that_changes_nothing_of_the_fabric_is_admitted(dev, policies):
    facts, pods = dev
    old = _mutated(pods[0], policies)
    new = _annotated(old, note="relabelled")
    new["spec"]["containers"][0]["image"] = "registry.example.com/ml/trainer:0.2.0"  # a new trainer version
    assert vap.evaluate(new, facts.params.doc, facts.policy.doc, _update(old)) == []


def test_an_update_that_makes_a_container_run_the_trainer_image_is_refused(dev):
    facts, pods = dev
    old = _with_image(pods[0], "busybox:1.36")
    new = _with_image(pods[0], "REGISTRY.example.com:443/ml/trainer:0.1.0")  # any spelling of it
    failures = vap.evaluate(new, facts.params.doc, facts.policy.doc, _update(old))
    assert failures == [
        f"pod {new['metadata']['name']}: this update makes container pytorch run the trainer image, which it did "
        "not when the pod was created; the fabric is given at creation: create a new pod instead"
    ]


def test_an_update_that_takes_the_fabric_attachment_away_is_refused(dev, policies):
    facts, pods = dev
    old = _mutated(pods[0], policies)
    new = _annotated(old, **{"k8s.v1.cni.cncf.io/networks": "storage"})
    failures = vap.evaluate(new, facts.params.doc, facts.policy.doc, _update(old))
    assert len(failures) == 1 and "takes away its attachment to the fabric network training-network" in failures[0]
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["trainyard.dev/fabric"] = "roce"
    failures = vap.evaluate(relabelled, facts.params.doc, facts.policy.doc, _update(old))
    assert len(failures) == 1 and "takes away its attachment" in failures[0]


def test_an_update_of_a_pod_that_never_had_the_fabric_is_not_refused_for_it(dev, rbac):
    # a pod the platform opted out, later updated by a controller that may not opt out
    facts, pods = dev
    old = _annotated(pods[0], **{"trainyard.dev/inject": "false"})
    new = _annotated(old, touched="by-a-controller")
    assert vap.evaluate(new, facts.params.doc, facts.policy.doc, _update(old, vap.CONTROLLER), rbac) == []


def test_webhook_is_fail_open_and_the_policy_fail_closed(dev):
    facts, _ = dev
    hook = facts.mutating.doc["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None" and hook["timeoutSeconds"] <= 10
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    excluded = next(e for e in hook["namespaceSelector"]["matchExpressions"] if e["operator"] == "NotIn")
    assert {"kube-system", "trainyard-system"} <= set(excluded["values"])
    assert facts.mutating.annotations["cert-manager.io/inject-ca-from"] == "trainyard-system/trainyard-webhook"
    assert facts.policy.doc["spec"]["failurePolicy"] == "Fail"
    assert facts.policy.doc["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert facts.binding.doc["spec"]["validationActions"] == ["Deny"]
    assert facts.binding.doc["spec"]["matchResources"]["namespaceSelector"] == hook["namespaceSelector"]


# --- TrainJob pods: the preflight init container runs the trainer image --------------------------


@pytest.fixture(scope="module")
def trainjob_pod(policies):
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "smoke", "namespace": "ml-training"},
        "spec": {
            "runtimeRef": {"name": "trainyard-tcp"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "memory": "8Gi"}}},
        },
    }
    pod = trainjob.expand(job, runtimes.cluster_training_runtime(policies.get("tcp"))).pods[0]
    return pod


def _init_named(pod: dict, name: str) -> dict:
    return next(c for c in pod["spec"]["initContainers"] if c["name"] == name)


def test_a_trainjob_pod_mutated_is_admitted_and_its_preflight_is_checked_too(dev, policies, trainjob_pod):
    facts, _ = dev
    good = _mutated(trainjob_pod, policies)
    assert vap.evaluate(good, facts.params.doc, facts.policy.doc) == []
    no_shm = copy.deepcopy(good)
    preflight = _init_named(no_shm, "preflight")
    preflight["volumeMounts"] = [m for m in preflight["volumeMounts"] if m["mountPath"] != "/dev/shm"]
    assert [
        m
        for m in vap.evaluate(no_shm, facts.params.doc, facts.policy.doc)
        if "container preflight has no /dev/shm" in m
    ]
    no_ifname = copy.deepcopy(good)
    preflight = _init_named(no_ifname, "preflight")
    preflight["env"] = [e for e in preflight["env"] if e["name"] != "NCCL_SOCKET_IFNAME"]
    failures = vap.evaluate(no_ifname, facts.params.doc, facts.policy.doc)
    assert [m for m in failures if "container preflight has no NCCL_SOCKET_IFNAME" in m]


def test_an_update_that_makes_an_init_container_run_the_trainer_image_is_refused(dev, policies, trainjob_pod):
    # ValidatePodUpdate lets spec.initContainers[*].image change: the preflight of a pending pod,
    # or a sidecar, would then run the trainer without the fabric's env
    facts, _ = dev
    trainer_image = _init_named(trainjob_pod, "preflight")["image"]
    old = _mutated(trainjob_pod, policies)
    _init_named(old, "preflight")["image"] = "busybox:1.36"
    new = copy.deepcopy(old)
    _init_named(new, "preflight")["image"] = trainer_image.replace("registry.example.com", "REGISTRY.example.com:443")
    failures = vap.evaluate(new, facts.params.doc, facts.policy.doc, _update(old))
    assert len(failures) == 1 and "this update makes container preflight run the trainer image" in failures[0]
    same = copy.deepcopy(new)
    assert vap.evaluate(same, facts.params.doc, facts.policy.doc, _update(new)) == []

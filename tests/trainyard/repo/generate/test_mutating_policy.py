"""admission: policy: the fabric profiles as MutatingAdmissionPolicies, proven against the engine.

The policies checked in under base/mutating-policy are evaluated with a compiled CEL runtime
(cel-expr-python) through trainyard/repo/generate/mutating_harness.Harness, applied with jsonpatch and
compared with the engine's pod: the example pods, hand-made edge cases and Hypothesis-generated
pods (tests/webhook/strategies.py). A second pass over the policy's own output changes nothing.
What the policy cannot express is named, and only those rules are left out of the comparison.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import REPO_ROOT, edit, errors_of
from tests.webhook.conftest import example, example_names, pod, trainer
from tests.webhook.strategies import pods
from trainyard.repo import validate
from trainyard.repo.generate import cel_jsonpatch, mutating_harness, mutating_policy
from trainyard.repo.model import rendered_facts, schema
from trainyard.repo.upstream import vap
from webhook.engine import MutationError, admit
from webhook.policy import load_policies

POLICIES = load_policies(REPO_ROOT / "policies")
CHECKED_IN = REPO_ROOT / mutating_policy.FOLDER / mutating_policy.FILE
PARAMS = {"data": {"defaultFabric": "roce", "fabric.roce": "roce-network", "fabric.ib": "ib-sriov-network"}}
ROCE = {"trainyard.dev/fabric": "roce"}  # the networks cases name roce's network
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def harness() -> mutating_harness.Harness:
    """The policies as they are in git (not as generated now: test_generate checks those agree)."""
    return mutating_harness.Harness(list(yaml.safe_load_all(CHECKED_IN.read_text(encoding="utf-8"))))


def _diff(c: mutating_harness.Comparison) -> str:
    return f"engine:\n{mutating_harness.dumps(c.engine)}\npolicy:\n{mutating_harness.dumps(c.policy)}"


def _same_and_idempotent(harness, p: dict, namespace: str | None, default: str) -> mutating_harness.Comparison:
    c = mutating_harness.compare(harness, POLICIES, p, namespace, default)
    assert c.same, _diff(c)
    if not c.excluded and c.profile is not None:
        again = harness.admit(c.policy, namespace=namespace, default=default)
        assert again.profile == c.profile
        assert again.ops == [], f"a second pass changes the pod: {again.ops}"
    return c


def test_the_checked_in_policies_are_what_the_profiles_generate():
    text = CHECKED_IN.read_text(encoding="utf-8")
    assert text == mutating_policy.render(POLICIES, "policies/")
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text)]
    assert kinds == [
        (kind, f"trainyard-fabric-{name}")
        for name in POLICIES.names
        for kind in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    ]


@pytest.mark.parametrize("index", range(6))
def test_the_policies_pass_the_kubernetes_1_36_schema(index):
    doc = list(yaml.safe_load_all(CHECKED_IN.read_text(encoding="utf-8")))[index]
    assert schema.has_schema(doc["kind"], doc["apiVersion"])
    assert schema.validate(doc) == []
    broken = copy.deepcopy(doc)
    broken["spec"]["mutation"] = []  # a misspelt field: strict validation names it
    assert any("mutation" in e for e in schema.validate(broken))


@pytest.mark.parametrize("name", example_names())
@pytest.mark.parametrize("default", ["roce", "ib", "tcp"])
def test_example_pods_get_the_engines_fabric(harness, name, default):
    original = example(name)
    c = _same_and_idempotent(harness, original, "ml", default)
    if c.excluded:
        assert c.excluded == [mutating_policy.NETWORKS_JSON_FORM]
        assert c.profile is None and c.policy == mutating_harness.normalise(original)
    else:
        assert c.profile == default
        assert c.policy != mutating_harness.normalise(original)


CASES = {
    "gpu pod with a memory limit (shm capped, RDMA, toleration)": pod(trainer(gpus=8, memory="32Gi")),
    "two trainers share the GPUs for /dev/shm": pod(trainer("a", gpus=2), trainer("b", gpus=3)),
    "existing memory-backed /dev/shm gives the size": pod(
        trainer(gpus=1, volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm/"}]),
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "3Gi"}}],
    ),
    "volume trainyard-shm taken": pod(trainer(gpus=1), volumes=[{"name": "trainyard-shm", "emptyDir": {}}]),
    "enforced env from valueFrom, '=net1' kept, a wrong value set": pod(
        trainer(
            env=[
                {"name": "NCCL_SOCKET_IFNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "TRAINYARD_FABRIC", "value": "other"},
                {"name": "NCCL_IB_HCA", "value": "mine"},
            ]
        )
    ),
    "interface '=net1' exact-match form": pod(trainer(env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=net1"}])),
    "fabric attachment asks for eth0: renamed": pod(
        trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "roce-network@eth0, storage"}, labels=ROCE
    ),
    "fabric interface taken by another attachment: renamed": pod(
        trainer(), annotations={"k8s.v1.cni.cncf.io/networks": " storage@net2 ,roce-network@net2"}, labels=ROCE
    ),
    "plain form in another namespace is another attachment": pod(
        trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "other/roce-network"}, labels=ROCE
    ),
    "plain form already attached: spacing kept": pod(
        trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "storage,ml/roce-network"}, labels=ROCE
    ),
    "init container running the trainer image": pod(
        trainer(), initContainers=[{"name": "preflight", "image": "registry.example.com/ml/trainer:1"}]
    ),
    "capabilities partly there": pod(trainer(securityContext={"capabilities": {"add": ["SYS_NICE"]}})),
    "job labels, topology already partly there": pod(
        trainer(gpus=1),
        labels={"jobset.sigs.k8s.io/jobset-name": "j", "training.kubeflow.org/job-name": "other"},
        topologySpreadConstraints=[
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
        ],
    ),
    "Kueue places the pod": pod(
        trainer(gpus=1),
        labels={"training.kubeflow.org/job-name": "j"},
        schedulingGates=[{"name": "kueue.x-k8s.io/topology"}],
    ),
    "GPU requested only": pod(trainer(resources={"requests": {"nvidia.com/gpu": "2"}})),
    "a tolerating wildcard": pod(trainer(gpus=1), tolerations=[{"operator": "Exists"}]),
    "labelled for another profile": pod(trainer(gpus=1), labels={"trainyard.dev/fabric": "ib"}),
    "no trainer": pod({"name": "side", "image": "busybox"}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("default", ["roce", "ib"])
def test_edge_cases_get_the_engines_fabric(harness, case, default):
    c = _same_and_idempotent(harness, CASES[case], None, default)
    assert not c.excluded
    if case != "no trainer":
        assert c.profile is not None and c.policy != mutating_harness.normalise(CASES[case])


def test_the_generated_interface_is_the_one_multus_gives(harness):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "storage, mgmt@net1"})
    out = harness.admit(mutating_harness.normalise(p), namespace="ml", default="roce")
    env = {e["name"]: e["value"] for e in out.pod["spec"]["containers"][0]["env"]}
    # storage is net1 by position but mgmt asks for net1: the fabric (third) is net3, clash-free
    annotation = out.pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    assert annotation == "storage, mgmt@net1, roce-network"
    assert env["NCCL_SOCKET_IFNAME"] == "net3"


@SETTINGS
@given(p=pods())
def test_generated_pods_get_the_engines_fabric(harness, p):
    for namespace, default in (("ml", "roce"), (None, "ib"), ("other", "tcp")):
        _same_and_idempotent(harness, p, namespace, default)


def test_a_networks_annotation_in_json_form_is_named_and_refused_in_policy_mode(harness):
    p = pod(trainer(gpus=1), annotations={"k8s.v1.cni.cncf.io/networks": '[{"name": "storage"}]'})
    p["metadata"]["namespace"] = "ml"
    c = mutating_harness.compare(harness, POLICIES, p, "ml", "roce")
    assert c.excluded == [mutating_policy.NETWORKS_JSON_FORM] and c.profile is None
    assert c.engine != c.policy  # the engine can read it; the policy leaves it alone
    assert mutating_harness.limits_hit(p, POLICIES.get("roce")) == [mutating_policy.NETWORKS_JSON_FORM]
    policy = next(
        d
        for d in yaml.safe_load_all((REPO_ROOT / "base/webhook/validating-admission-policy.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy"
    )
    verdict = vap.check(c.policy, PARAMS, policy)
    assert verdict.matched and verdict.failures  # fail closed: no attachment, /dev/shm or ifname


def test_more_trainer_containers_than_the_policy_sums_are_named(harness):
    many = pod(*[trainer(f"t{i}", gpus=1) for i in range(mutating_policy.MAX_SUMMED + 1)])
    c = mutating_harness.compare(harness, POLICIES, many, "ml", "roce")
    assert c.excluded == [mutating_policy.MORE_TRAINERS] and c.profile is None
    just = pod(*[trainer(f"t{i}", gpus=1) for i in range(mutating_policy.MAX_SUMMED)])
    c = _same_and_idempotent(harness, just, "ml", "roce")
    assert not c.excluded and c.profile == "roce"


def test_a_refused_pod_is_named_not_compared(harness):
    p = pod(trainer(gpus="lots"))
    with pytest.raises(MutationError):
        admit(mutating_harness.normalise(p), POLICIES, "roce", "ml")
    c = mutating_harness.compare(harness, POLICIES, p, "ml", "roce")
    assert c.excluded == [mutating_policy.REFUSAL] and c.engine is None
    # the policy's CEL fails on the quantity: failurePolicy Ignore skips it, the pod goes on unmutated
    outcome = harness.admit(mutating_harness.normalise(p), namespace="ml", default="roce")
    assert outcome.profile is None and outcome.pod == mutating_harness.normalise(p)
    assert len(outcome.errors) == 1 and "trainyard-fabric-roce" in outcome.errors[0] and "lots" in outcome.errors[0]


def test_an_authorised_opt_out_is_left_alone_and_an_unauthorised_one_is_not(harness):
    p = mutating_harness.normalise(pod(trainer(), annotations={"trainyard.dev/inject": "false"}))
    assert harness.admit(p, namespace="ml", default="roce", may_opt_out=True).profile is None
    assert harness.admit(p, namespace="ml", default="roce", may_opt_out=False).profile == "roce"


def test_struct_literals_become_maps_outside_strings_only():
    text = "[JSONPatch{op: 'add', path: '/a', value: {'op': 'JSONPatch{x: 1}', 'k': [1, 2]}}]"
    out = mutating_harness.struct_literals_as_maps(text)
    assert out == "[{'op': 'add', 'path': '/a', 'value': {'op': 'JSONPatch{x: 1}', 'k': [1, 2]}}]"
    h = mutating_harness.Harness([])
    assert h.env.compile(out).eval(data={}).plain_value() == [
        {"op": "add", "path": "/a", "value": {"op": "JSONPatch{x: 1}", "k": [1, 2]}}
    ]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[{'key': 'a', 'tolerationSeconds': 300}]", "[{'key': dyn('a'), 'tolerationSeconds': dyn(300)}]"),
        (
            "{'w': 1, 'term': {'k': x ? 'y' : 'z'}, 'l': [1, 2]}",
            "{'w': dyn(1), 'term': dyn({'k': dyn(x ? 'y' : 'z')}), 'l': dyn([1, 2])}",
        ),
        # a message's fields are typed: left alone, a map inside one is not
        ("JSONPatch{op: 'add', path: '/a', value: {'k': 1}}", "JSONPatch{op: 'add', path: '/a', value: {'k': dyn(1)}}"),
        # braces, colons and commas inside strings are text
        ("s.contains('{a: b, c}') || s.contains(\"}\")", "s.contains('{a: b, c}') || s.contains(\"}\")"),
        ("l.map(c, {'name': c.name, 'n': size(c.env)})", "l.map(c, {'name': dyn(c.name), 'n': dyn(size(c.env))})"),
    ],
)
def test_map_literals_are_made_homogeneous_as_kube_apiserver_checks_them(expression, expected):
    assert cel_jsonpatch.homogeneous(expression) == expected


def test_dyn_changes_no_value():
    h = mutating_harness.Harness([])
    text = "[{'key': 'a', 'seconds': 300, 'nested': {'on': true, 'l': [1, 2]}}]"
    value = h.env.compile(text).eval(data={}).plain_value()
    assert h.env.compile(cel_jsonpatch.homogeneous(text)).eval(data={}).plain_value() == value


@pytest.mark.parametrize("expression", ["{'a': 1", "[1, 2", "'open", "f(1))"])
def test_an_unbalanced_expression_is_refused(expression):
    with pytest.raises(ValueError, match="unbalanced CEL expression"):
        cel_jsonpatch.homogeneous(expression)


def test_a_patch_the_jsonpatch_type_would_refuse_is_an_error():
    with pytest.raises(mutating_harness.HarnessError, match="not a JSONPatch"):
        mutating_harness._as_patch({"op": "add", "path": "/a", "valu": 1}, "here")
    with pytest.raises(mutating_harness.HarnessError, match="op must be"):
        mutating_harness._as_patch({"op": "merge", "path": "/a"}, "here")


def test_kubernetes_functions_as_kubernetes_defines_them():
    h = mutating_harness.Harness([])

    def ev(expr: str):
        return h.env.compile(expr).eval(data={}).plain_value()

    assert ev("jsonpatch.escapeKey('k8s.v1.cni.cncf.io/networks~x')") == "k8s.v1.cni.cncf.io~1networks~0x"
    assert ev("lists.range(3)") == [0, 1, 2]
    assert ev("[[1], [2, [3]], []].flatten()") == [1, 2, [3]]
    assert ev("quantity('1Gi').asInteger()") == 2**30
    assert ev("'a, b ,,c'.split(',').map(s, s.trim()).filter(s, s != '').join(', ')") == "a, b, c"
    assert "cannot convert" in str(ev("quantity('1.5').asInteger()"))


def test_a_policy_that_does_not_compile_names_the_expression():
    doc = {
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "trainyard-fabric-x"},
        "spec": {"matchConditions": [{"name": "bad", "expression": "object.("}], "mutations": []},
    }
    with pytest.raises(mutating_harness.HarnessError, match=r"trainyard-fabric-x: matchConditions\[bad\]"):
        mutating_harness.Harness([doc])


# --- the repository: prod-ib in policy mode ----------------------------------------------------


def test_prod_ib_renders_policies_and_no_webhook(report):
    render = report.renders["prod-ib"]
    facts = rendered_facts.collect(render.resources())
    assert facts.mode == "policy" and facts.webhook is None and facts.mutating is None
    assert sorted(facts.mutating_policies) == [f"trainyard-fabric-{n}" for n in POLICIES.names]
    assert facts.policy is not None and facts.default_profile == "ib"
    # the repository's own objects: upstream controllers (Kueue, Trainer, cert-manager) bring webhooks of their own
    kinds = {r.kind for r in render.resources() if not r.extra.get("upstream")}
    assert not kinds & {"Certificate", "Issuer", "MutatingWebhookConfiguration"}
    assert any(r.kind == "MutatingWebhookConfiguration" for r in render.resources() if r.extra.get("upstream"))
    assert not [
        r
        for r in render.resources()
        if r.kind != "Application" and r.name in ("trainyard-webhook", "trainyard-policies")
    ]
    for cluster in ("dev", "prod-roce"):
        assert rendered_facts.collect(report.renders[cluster].resources()).mode == "webhook"
    assert errors_of(report) == []
    previews = report.previews["prod-ib"]
    assert previews and all(p.action == "mutate" and p.profile == "ib" for jp in previews for p in jp.pods)


def test_a_declared_mode_the_render_does_not_follow_is_an_error(repo_copy):
    edit(repo_copy, "clusters/prod-roce/cluster.yaml", 'kubernetesVersion: "1.34"', 'kubernetesVersion: "1.36"')
    edit(repo_copy, "clusters/prod-roce/cluster.yaml", "admission: webhook", "admission: policy")
    errors = errors_of(validate.validate(repo_copy, ["prod-roce"]))
    assert any("declares admission: policy, but the cluster renders webhook admission" in e for e in errors), errors


def test_a_policy_mode_job_whose_pods_the_policy_cannot_handle_gets_a_warning(repo_copy):
    job = repo_copy.root / "overlays/prod-ib/jobs/horovod/job.yaml"
    json_form = json.dumps([{"name": "ib-sriov-network"}])
    op = {
        "op": "add",
        "path": "/spec/mpiReplicaSpecs/Worker/template/metadata",
        "value": {"annotations": {"k8s.v1.cni.cncf.io/networks": json_form}},
    }
    job.write_text(job.read_text() + yaml.safe_dump([op], sort_keys=False))
    report = validate.validate(repo_copy, ["prod-ib"])
    warnings = [str(w) for w in report.warnings()]
    assert any("[networks-json-form]" in w and "admission: policy" in w for w in warnings), warnings
    # and the workers are refused: the policy left them alone, the ValidatingAdmissionPolicy sees no /dev/shm
    assert any("horovod-worker-0" in e and "/dev/shm" in e for e in errors_of(report, "prod-ib")), errors_of(report)


def test_a_patched_policy_in_a_cluster_overlay_is_an_error(repo_copy):
    path = "overlays/prod-ib/platform/webhook/kustomization.yaml"
    edit(
        repo_copy,
        path,
        "patches:\n",
        "patches:\n  - patch: |-\n      apiVersion: admissionregistration.k8s.io/v1\n"
        "      kind: MutatingAdmissionPolicy\n      metadata:\n        name: trainyard-fabric-ib\n"
        "      spec:\n        failurePolicy: Fail\n",
    )
    errors = errors_of(validate.validate(repo_copy, ["prod-ib"]))
    assert any("trainyard-fabric-ib" in e and "differs from what policies/ib.yaml generates" in e for e in errors), (
        errors
    )


def test_no_jsonpatch_expression_holds_an_object_initializer():
    """kube-apiserver v1.36.0-v1.36.4 panics on an Object initializer inside a list or map of a
    JSONPatch value (kubernetes#140419); the clusters declare only their minor version, so the
    compiler writes map literals everywhere (tests/trainyard/cluster: the fixed shape on v1.36.5)."""
    docs = list(yaml.safe_load_all(CHECKED_IN.read_text(encoding="utf-8")))
    expressions = [
        m["jsonPatch"]["expression"]
        for d in docs
        if d["kind"] == "MutatingAdmissionPolicy"
        for m in d["spec"]["mutations"]
    ]
    assert len(expressions) == len(POLICIES.names)
    for e in expressions:
        assert "JSONPatch{" in e and cel_jsonpatch.object_initializers(e) == []


@pytest.mark.parametrize(
    ("expression", "found"),
    [
        ("[Object.spec.hostAliases{ip: '10.0.0.1'}]", ["Object.spec.hostAliases"]),
        ("Object{spec: Object.spec{}}", ["Object", "Object.spec"]),
        ("Object . spec . tolerations {key: 'a'}", ["Object.spec.tolerations"]),
        ("'Object{' + \"Object.spec{\"", []),  # text
        ("'it\\'s Object{' + Object.x{}", ["Object.x"]),  # an escaped quote does not end the string
        ("object.Object.x{}", []),  # a field named Object
        ("JSONPatch{op: 'add', path: '/a', value: {'k': 1}}", []),
        ("ObjectX.y{}", []),
        ("Object", []),
    ],
)
def test_object_initializers_are_found_outside_strings(expression, found):
    assert cel_jsonpatch.object_initializers(expression) == found


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="Object.{}[]'\"\\ ab,:", max_size=200))
def test_object_initializers_read_any_text(text):
    assert all(name.split(".")[0] == "Object" for name in cel_jsonpatch.object_initializers(text))

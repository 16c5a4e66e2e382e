"""Reviews answered from their bodies' keys (webhook/quick.py through Plans.review) get exactly
what the full path gives, whatever the body holds.

- the declared fields are those of the Kubernetes v1.37 schema, so a pod of that API is read;
- the pods of a job share one engine run: alike to the byte (a TrainJob's pods), or differing in
  the values of env no rule reads (a v1 PyTorchJob's RANK); the jobs of one shape too;
- adversarial bodies (bytes mutated anywhere in a review whose answer is kept: broken UTF-8,
  escapes, numbers out of range, duplicate keys, fields no schema knows, the job's name spelled
  with escapes) get the full path's status, response and record, and never change what the
  next well-formed review is answered.
"""

from __future__ import annotations

import base64
import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_validate import utils as kv_utils

from tests.webhook.conftest import example, example_names, pod, trainer
from tests.webhook.test_plans import job_pod, own_term
from trainyard.repo import trainjob
from webhook import quick
from webhook.plans import Plans
from webhook.review import MAX_JSON_VALUES, admission_review, review

DEFAULT = "roce"
SCHEMAS = {
    "io.k8s.api.core.v1.Pod": quick.POD_FIELDS,
    "io.k8s.api.core.v1.PodSpec": quick.POD_SPEC_FIELDS,
    "io.k8s.api.core.v1.Container": quick.CONTAINER_FIELDS,
    "io.k8s.api.core.v1.EnvVar": quick.ENV_VAR_FIELDS,
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": quick.OBJECT_META_FIELDS,
    "io.k8s.api.authentication.v1.UserInfo": quick.USER_INFO_FIELDS,
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_declared_fields_are_the_kubernetes_schemas(name):
    defs = kv_utils.schema_contents("kubernetes-json-schema/v1.37.0-local-strict/_definitions.json", "1.37.0")
    properties = defs["$defs"][name]["properties"]
    assert sorted(properties) == sorted(SCHEMAS[name])


def full(raw: bytes, policies) -> tuple[int, bytes, object]:
    return review(raw, policies, DEFAULT)


def counting(monkeypatch) -> list:
    """Count the engine's runs behind Plans."""
    calls: list = []
    import webhook.plans as plans_module

    real = plans_module.decide

    def decide(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(plans_module, "decide", decide)
    return calls


def v2_pod(job: str, index: int) -> dict:
    """A pod as JobSet makes a TrainJob's: its own name, hostname and index; containers alike."""
    p = copy.deepcopy(example("pytorchjob-worker.yaml"))
    p["metadata"]["name"] = f"{job}-node-0-{index}-x7k2p"
    p["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/jobset-name": job,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    p["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    p["spec"]["hostname"], p["spec"]["subdomain"] = f"{job}-node-0-{index}", job
    env = [e for e in p["spec"]["containers"][0]["env"] if e["name"] not in ("RANK", "MASTER_ADDR")]
    # the torch plugin's env, as trainyard/repo/trainjob.py renders it (kubeflow/trainer v2.3.0): the
    # same for every pod of the job, the job's name in PET_MASTER_ADDR
    env += [
        {"name": "PET_NNODES", "value": "4"},
        {"name": "PET_NPROC_PER_NODE", "value": "1"},
        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": trainjob.NODE_RANK_FIELD}}},
        {"name": "PET_MASTER_ADDR", "value": f"{job}-node-0-0.{job}"},
        {"name": "PET_MASTER_PORT", "value": "29500"},
    ]
    p["spec"]["containers"][0]["env"] = env
    return p


def test_the_pods_of_trainjobs_of_one_shape_share_one_engine_run(policies, monkeypatch):
    """A job's pods by the key as sent; the first pod of each later job by the projected key (its
    PET_MASTER_ADDR, which no rule reads, names its job)."""
    calls, plans = counting(monkeypatch), Plans(policies, DEFAULT)
    for job in ("llama", "bert", "resnet"):
        for index in range(4):
            raw = orjson.dumps(admission_review(v2_pod(job, index), namespace="ml"))
            expected = full(raw, policies)
            assert plans.review(raw) == expected
            assert orjson.dumps(job) in base64.b64decode(orjson.loads(expected[1])["response"]["patch"])
    assert len(calls) == 1 and plans.hits == 11


def test_v1_pods_differing_in_an_unread_env_value_share_one_engine_run(policies, monkeypatch):
    calls, plans = counting(monkeypatch), Plans(policies, DEFAULT)
    base = example("pytorchjob-worker.yaml")
    for rank in range(6):
        p = copy.deepcopy(base)
        p["metadata"]["name"] = f"resnet-worker-{rank}"
        for e in p["spec"]["containers"][0]["env"]:
            if e["name"] == "RANK":
                e["value"] = str(rank)
        raw = orjson.dumps(admission_review(p, namespace="ml"))
        assert plans.review(raw) == full(raw, policies)
    assert len(calls) == 1 and plans.hits == 5


def test_a_read_env_value_that_differs_is_a_shape_of_its_own(policies):
    plans = Plans(policies, DEFAULT)
    answers = set()
    for value in ("eth0", "net1", "eth0", "net1"):
        p = pod(trainer(gpus=1, env=[{"name": "NCCL_SOCKET_IFNAME", "value": value}]))
        raw = orjson.dumps(admission_review(p, namespace="ml"))
        got = plans.review(raw)
        assert got == full(raw, policies)
        answers.add(orjson.loads(got[1])["response"].get("patch"))
    assert len(answers) == 2 and plans.hits == 2


def escaped(raw: bytes, name: str) -> bytes:
    """``raw`` with the first letter of every JSON string ``name`` written as a \\u escape."""
    return raw.replace(orjson.dumps(name), b'"\\u%04x' % ord(name[0]) + name[1:].encode() + b'"')


def own_term_pod(job: str, term_job: str) -> dict:
    p = copy.deepcopy(example("pytorchjob-worker.yaml"))
    p["metadata"]["labels"]["training.kubeflow.org/job-name"] = job
    term = {"labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": term_job}}, "topologyKey": "x"}
    p["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}  # fmt: skip
    return p


def test_a_job_name_spelled_with_escapes_is_not_shared_among_jobs(policies):
    """The job's own name in a term, spelled with an escape the key's bytes do not show as the
    name: the pod gets its own answer, as the engine gives it."""
    plans = Plans(policies, DEFAULT)
    for job in ("alpha", "bravo", "alpha"):
        # a pod of another job naming 'alpha', then pods naming their own job with an escape
        raw = escaped(orjson.dumps(admission_review(own_term_pod(job, "alpha"), namespace="ml")), "alpha")
        assert plans.review(raw) == full(raw, policies)


def test_a_body_the_quick_reader_does_not_take_gets_the_full_paths_answer(policies):
    p = pod(trainer(gpus=1))
    p["spec"]["fieldFromTheFuture"] = {"x": 1}
    raw = orjson.dumps(admission_review(p, namespace="ml"))
    plans = Plans(policies, DEFAULT)
    assert quick.read(raw, plans.values_read) is None
    assert plans.review(raw) == full(raw, policies)
    big = orjson.dumps(admission_review(pod(trainer(gpus=1, args=["x" * MAX_JSON_VALUES])), namespace="ml"))
    assert quick.read(big, plans.values_read) is None
    assert plans.review(big) == full(big, policies)


def kept_body(name: str) -> bytes:
    p = copy.deepcopy(example(name))
    p["metadata"].setdefault("labels", {})["training.kubeflow.org/job-name"] = "kept"
    return orjson.dumps(admission_review(p, namespace="ml"))


@pytest.fixture(scope="module")
def primed(policies) -> tuple[Plans, dict[str, bytes]]:
    """Plans holding the answers of the example pods' reviews: a mutated body whose keys are
    still found is answered from them."""
    plans = Plans(policies, DEFAULT)
    bodies = {name: kept_body(name) for name in example_names()}
    for raw in bodies.values():
        plans.review(raw)
    return plans, bodies


# Bytes a hostile client may put anywhere in a review.
HOSTILE = [
    b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\\ud800", b"\\u0000", b"\\", b'"', b"\\/", b"\\u0061",
    b"1e999", b"-1e309", b"1" + b"0" * 400, b"0" * 5000, b"NaN", b"Infinity", b"-0", b"1.0",
    b"{}", b"[]", b"null", b"true", b",", b":", b"\t", b"\x0c", b"\xc2\xa0", b"\x00",
    b'"spec":{},', b'"spec":null,', b'"env":[],', b'"labels":{},', b'"x":1,', b'"uid":"",', b'"kind":"Pod",',
    b'"operation":"DELETE",', b'"namespace":"kube-system",', b'"trainyard.dev/plans/job-name"',
    b'"training.kubeflow.org/job-name":"other",', b'"name":"RANK","value":"9"', b"[" * 1200,
]  # fmt: skip


@st.composite
def mutated(draw, bodies: dict[str, bytes]) -> bytes:
    raw = bodies[draw(st.sampled_from(sorted(bodies)))]
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        token = draw(st.one_of(st.sampled_from(HOSTILE), st.binary(min_size=1, max_size=4)))
        cut = draw(st.sampled_from([0, 0, 1, len(token)]))  # insert, or replace as many bytes
        raw = raw[:at] + token + raw[at + cut :]
    return raw


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_bodies_get_the_full_paths_answer_and_poison_nothing(policies, primed, data):
    plans, bodies = primed
    raw = data.draw(mutated(bodies))
    assert plans.review(raw) == full(raw, policies)
    name = data.draw(st.sampled_from(sorted(bodies)))
    assert plans.review(bodies[name]) == full(bodies[name], policies)


@pytest.mark.parametrize(
    ("where", "value", "status"),
    [
        (b'"userInfo":{', b'"x":1e999,', 400),  # beyond a double
        (b'"spec":{', b'"priority":-1e400,', 400),
        (b'"userInfo":{', b'"x":"\xff",', 400),  # not UTF-8
        (b'"metadata":{', b'"creationTimestamp":"\xed\xa0\x80",', 400),  # an encoded surrogate
        (b'"metadata":{', b'"uid":"\\ud800",', 400),  # an escaped lone one
        (b'"userInfo":{', b'"extra":{"n":[1' + b"0" * 400 + b"]},", 200),  # JSON: an integer, kept whole
    ],
)
def test_a_value_where_no_rule_reads_gets_the_full_paths_answer(policies, primed, where, value, status):
    """In a review whose answer is kept: the full path's refusal, or its answer."""
    plans, bodies = primed
    raw = bodies["pytorchjob-worker.yaml"]
    assert raw.count(where) == 1
    bad = raw.replace(where, where + value)
    expected = full(bad, policies)
    assert expected[0] == status and plans.review(bad) == expected
    if status == 400:
        assert b"body is not JSON" in expected[1]


def test_duplicate_keys_read_as_the_full_path_reads_them(policies, primed):
    """The last of a key's values counts, in every part of the review."""
    plans, bodies = primed
    raw = bodies["pytorchjob-worker.yaml"]
    p = copy.deepcopy(example("pytorchjob-worker.yaml"))
    p["metadata"]["labels"]["training.kubeflow.org/job-name"] = "kept"
    placeholder = orjson.dumps(admission_review("@OBJECT@", namespace="ml"))
    obj = orjson.dumps(p)
    doubles = [
        raw.replace(b'"spec":{', b'"spec":{"containers":[]},"spec":{', 1),  # a spec, then the pod's
        placeholder.replace(b'"@OBJECT@"', obj[:-1] + b',"spec":{"containers":[]}}'),  # the pod's, then a spec
        raw.replace(b'"value":"eth0"', b'"value":"net1","value":"eth0"'),
        raw.replace(b'"value":"eth0"', b'"value":"eth0","value":"net1"'),
        raw.replace(b'"namespace":"ml"', b'"namespace":"kube-system","namespace":"ml"', 1),
        raw.replace(b'"kind":"AdmissionReview"', b'"kind":"Nope","kind":"AdmissionReview"', 1),
        raw.replace(b'/job-name":"kept"', b'/job-name":"kept","training.kubeflow.org/job-name":"other"', 1),
    ]
    for bad in doubles:
        assert bad != raw
        assert plans.review(bad) == full(bad, policies)


def test_escapes_that_cannot_spell_a_name_keep_the_answer_shared(policies, monkeypatch):
    """A TFJob's TF_CONFIG is JSON in a string (each quote escaped), Go writes '&' as \\u0026:
    neither can spell a job's name, so the jobs of the shape still share one engine run."""
    calls, plans = counting(monkeypatch), Plans(policies, DEFAULT)
    for job in ("tf-a", "tf-b", "tf-c"):
        p = copy.deepcopy(example("tfjob-chief.yaml"))
        p["metadata"]["labels"]["training.kubeflow.org/job-name"] = job
        p["spec"]["containers"][0]["args"] = ["sh", "-c", "train && upload"]
        raw = orjson.dumps(admission_review(p, namespace="ml")).replace(b"&", b"\\u0026")
        assert b'\\"cluster\\"' in raw and b"\\u0026" in raw
        assert plans.review(raw) == full(raw, policies)
    assert len(calls) == 1 and plans.hits == 2


@pytest.mark.parametrize(
    ("key", "hides"),
    [
        (b'["a\\"b"]', False),
        (b'["a\\nb","\\\\"]', False),
        (b'["\\u0026\\u003c\\u003e"]', False),
        (b'["\\u0061"]', True),  # 'a'
        (b'["\\u002D"]', True),  # '-'
        (b'["\\u002f"]', True),  # '/'
        (b'["x\\/y"]', True),
        (b'["\\\\u0061"]', True),  # a backslash, then the text u0061: said yes, never wrongly no
    ],
)
def test_which_escapes_could_spell_a_name(key, hides):
    assert quick._hiding_escape(key) is hides


def test_a_name_of_other_characters_is_shared_only_without_any_escape(policies):
    plans = Plans(policies, DEFAULT)
    for job in ("job one", "job two"):
        p = copy.deepcopy(example("tfjob-chief.yaml"))
        p["metadata"]["labels"]["training.kubeflow.org/job-name"] = job
        raw = orjson.dumps(admission_review(p, namespace="ml"))
        q = quick.read(raw, plans.values_read)
        assert not q.shareable(q.key(False, True))
        assert plans.review(raw) == full(raw, policies)


def test_a_name_of_other_characters_an_escape_in_the_kept_key_spells_gets_its_own_answer(policies):
    """A job named 'alpha' keeps the shared answer of a shape whose term names job 'é' written
    \\u00e9 (no plain name can be spelled so); a later job named 'é' has that term for its own,
    so the rule adds no term of its own for it, and the pod gets the engine's answer, not alpha's."""
    plans = Plans(policies, DEFAULT)
    for job in ("alpha", "é"):
        p = job_pod("pytorchjob-worker.yaml", job)
        p["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own_term("é")]}}
        raw = orjson.dumps(admission_review(p, namespace="ml"))
        term = raw.index(b'"podAffinityTerm"')
        raw = raw[:term] + raw[term:].replace(orjson.dumps("é"), b'"\\u00e9"', 1)
        assert plans.review(raw) == full(raw, policies)
    assert plans.hits == 0

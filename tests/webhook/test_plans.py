"""Answers kept per pod shape (webhook/plans.py) give exactly what the engine gives.

- differential: over the Hypothesis pods, the example pods and hostile shapes, a review through
  one shared :class:`Plans` (so pods of equal shape meet a kept answer) returns the same bytes as
  the path without plans, and the same response the engine's own decision serialises to, the way
  the webhook answered before plans existed;
- coverage: the engine runs on pods whose every key read is recorded; changing any field it read
  must change the pod's shape (else two pods that differ there would share an answer);
- the pods of one job share one answer whatever their names, ranks and unread env values;
- bounds: least recently used out past the size, no shape over the byte limit kept, a reload
  starts afresh.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import weakref

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.conftest import POLICIES, example, example_names, pod, trainer
from tests.webhook.strategies import pods
from webhook import engine
from webhook.engine import MutationError, admit, env_values_read, shape
from webhook.plans import JOB_PLACEHOLDER, MAX_SHAPE_BYTES, Plans, for_policies
from webhook.policy import load_policies
from webhook.review import MAX_PATCH_BYTES, MAX_WARNING, WARNING_PREFIX, admission_review, review

DEFAULT = "roce"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def engine_response(pod: dict, policies, namespace: str, uid: str) -> bytes:
    """The response as the webhook serialised it before plans: engine.admit, then one dump."""

    def warning(text: str) -> str:
        text = WARNING_PREFIX + " ".join(text.split())
        return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."

    def answer(allowed: bool, **extra) -> bytes:
        return orjson.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": allowed, **extra},
            }
        )

    try:
        decision = admit(pod, policies, DEFAULT, namespace)
    except MutationError as exc:
        return answer(False, status={"code": 400, "message": f"trainyard: {exc}"})
    if decision.action == "deny":
        return answer(False, status={"code": 400, "message": f"trainyard: {decision.reason}"})
    if decision.action == "skip":
        return answer(True)
    extra: dict = {}
    warnings = [warning(w) for w in decision.mutation.warnings]
    if warnings:
        extra["warnings"] = warnings
    if decision.mutation.ops:
        extra["patchType"] = "JSONPatch"
        extra["patch"] = base64.b64encode(orjson.dumps(decision.mutation.ops)).decode()
    return answer(True, **extra)


# Each Plans under test has a twin that sees the same reviews through Plans.review (the body read
# for its keys, webhook/quick.py, and fitted to stencils, webhook/stencil.py, one made whenever
# one may be), so that the counts of hits the tests assert stay the shape's own.
TWINS: weakref.WeakKeyDictionary[Plans, Plans] = weakref.WeakKeyDictionary()


def both(body: dict, policies, plans: Plans) -> tuple[bytes, bytes]:
    """The answer without plans and with them: by the pod's shape (``plans``), and by the body's
    keys and stencils (its twin), three times, so that the later meet a kept answer and a stencil,
    and once more with another uid; all must agree."""
    raw = orjson.dumps(body)
    status, direct, record = review(raw, policies, DEFAULT)
    status_kept, kept, record_kept = review(raw, policies, DEFAULT, plans)
    assert status == status_kept == 200
    assert record == record_kept
    twin = TWINS.setdefault(plans, Plans(policies, DEFAULT, stencil_rate=10**9))
    for _ in range(3):  # decided (or from its keys), then from its keys (making a stencil), then from it
        assert twin.review(raw) == (status, kept, record)
    other = orjson.dumps({**body, "request": {**body["request"], "uid": "another-uid"}})
    assert twin.review(other) == review(other, policies, DEFAULT)
    return direct, kept


@pytest.fixture(scope="module")
def shared_plans(policies) -> Plans:
    return Plans(policies, DEFAULT)


@SETTINGS
@given(p=pods(), namespace=st.sampled_from(["ml", "ml-training"]))
def test_generated_pods_get_the_engines_answer_with_and_without_plans(policies, shared_plans, p, namespace):
    body = admission_review(p, namespace=namespace)
    direct, kept = both(body, policies, shared_plans)
    expected = engine_response(copy.deepcopy(p), policies, namespace, body["request"]["uid"])
    assert direct == kept == expected


@pytest.mark.parametrize("name", example_names())
def test_example_pods_get_the_engines_answer_and_their_second_review_is_kept(policies, name):
    plans = Plans(policies, DEFAULT)
    p = example(name)
    for round_ in range(2):
        body = admission_review(p, namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept == engine_response(p, policies, "ml", body["request"]["uid"])
        assert (plans.misses, plans.hits) == (1, round_)


HOSTILE = [
    {"metadata": {}, "spec": "containers"},
    {"metadata": [], "spec": {"containers": {"0": {"image": "x"}}}},
    {"spec": {"containers": [trainer(), "not a container", None]}},
    {"spec": {"containers": [trainer(env="PATH=/bin")]}},
    {"spec": {"containers": [trainer(env=[{"name": 7}, {"value": "x"}, "NCCL_DEBUG=INFO", None])]}},
    {"spec": {"containers": [trainer(env=[{"name": "NCCL_SOCKET_IFNAME", "valueFrom": {}}])]}},
    {"metadata": {"annotations": "k8s.v1.cni.cncf.io/networks"}, "spec": {"containers": [trainer()]}},
    {"metadata": {"labels": {"trainyard.dev/fabric": ["ib"]}}, "spec": {"containers": [trainer()]}},
    {"spec": {"containers": [trainer(gpus=1, memory="1e999999")]}},
    {"spec": {"containers": [trainer(image="registry.example.com/ml/trainer:" + "a" * 200)]}},
    {"spec": {"containers": [trainer(name=f"t{i}") for i in range(engine.MAX_CONTAINERS + 1)]}},
    {"spec": {"containers": [trainer(env=[{"name": f"V{i}", "value": "x" * 100} for i in range(800)])]}},
]


@pytest.mark.parametrize("p", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_pods_get_the_engines_answer_twice(policies, p):
    plans = Plans(policies, DEFAULT)
    for _ in range(2):
        body = admission_review(p, namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept == engine_response(p, policies, "ml", body["request"]["uid"])


def test_the_pods_of_one_job_share_one_answer(policies):
    plans = Plans(policies, DEFAULT)
    base = example("pytorchjob-worker.yaml")
    answers = set()
    for rank in range(8):
        p = copy.deepcopy(base)
        p["metadata"]["name"] = f"{base['metadata']['name']}-{rank}"
        p["metadata"].setdefault("labels", {})["training.kubeflow.org/replica-index"] = str(rank)
        p["metadata"].setdefault("annotations", {})["example.com/trace"] = f"t{rank}"
        p["spec"]["hostname"] = f"worker-{rank}"
        env = p["spec"]["containers"][0].setdefault("env", [])
        env.append({"name": "RANK", "value": str(rank)})
        body = admission_review(p, namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept
        answers.add(orjson.loads(kept)["response"]["patch"])
    assert (plans.misses, plans.hits, len(answers)) == (1, 7, 1)


def job_pod(base: str, job: str, rank: int = 0, label: str = "training.kubeflow.org/job-name") -> dict:
    p = example(base)
    p["metadata"]["name"] = f"pod-{rank}"
    p["metadata"].setdefault("labels", {})[label] = job
    p["metadata"]["labels"]["training.kubeflow.org/replica-index"] = str(rank)
    return p


def test_the_jobs_of_one_shape_share_one_answer_with_their_own_names(policies):
    plans = Plans(policies, DEFAULT)
    patches = set()
    for job in ("resnet", "bert-large", "a" * 63):
        for rank in range(4):
            body = admission_review(job_pod("pytorchjob-worker.yaml", job, rank), namespace="ml")
            direct, kept = both(body, policies, plans)
            assert direct == kept == engine_response(body["request"]["object"], policies, "ml", body["request"]["uid"])
            patch = base64.b64decode(orjson.loads(kept)["response"]["patch"])
            assert orjson.dumps(job) in patch and JOB_PLACEHOLDER.encode() not in patch
            patches.add(patch)
    assert (plans.misses, plans.hits, len(patches)) == (1, 11, 3)


def test_pods_of_jobs_arriving_interleaved_get_their_own_jobs_names(policies):
    """The answer rendered for one job serves the next pod of that job only."""
    plans = Plans(policies, DEFAULT)
    for rank, job in enumerate(["resnet", "resnet", "bert", "resnet", "bert", "bert", "resnet"]):
        body = admission_review(job_pod("pytorchjob-worker.yaml", job, rank), namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept == engine_response(body["request"]["object"], policies, "ml", body["request"]["uid"])
        patch = base64.b64decode(orjson.loads(kept)["response"]["patch"])
        other = "bert" if job == "resnet" else "resnet"
        assert orjson.dumps(job) in patch and orjson.dumps(other) not in patch


# Job names as a hostile client may write them: JSON escapes, other scripts, the placeholder
# itself or inside a longer name, names that also stand elsewhere in the pod.
NAMES = st.one_of(
    st.text(min_size=1, max_size=80),
    st.sampled_from(
        [
            'a"b',
            "a\\b",
            "\u2028",
            "naïve-日本",
            JOB_PLACEHOLDER,
            JOB_PLACEHOLDER + "x",
            "ml",
            "trainer",
            "trainyard.dev/fabric",
            "roce",
            "0",
            "true",
            "null",
        ]
    ),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(NAMES, min_size=1, max_size=4),
    base=st.sampled_from(example_names()),
    label=st.sampled_from(["training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name"]),
    both_labels=st.booleans(),
)
def test_any_job_name_gets_the_engines_answer(policies, shared_plans, names, base, label, both_labels):
    for rank, job in enumerate(names):
        p = job_pod(base, job, rank, label)
        if both_labels:
            p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = job
        body = admission_review(p, namespace="ml")
        direct, kept = both(body, policies, shared_plans)
        assert direct == kept == engine_response(copy.deepcopy(p), policies, "ml", body["request"]["uid"])


def own_term(job: str) -> dict:
    """A co-location term as the roce profile's rule writes it (preferred, by zone)."""
    selector = {"matchLabels": {"training.kubeflow.org/job-name": job}}
    return {"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": "topology.kubernetes.io/zone"}}


@pytest.mark.parametrize("where", ["own term", "placeholder term", "annotation", "env", "placeholder in env"])
def test_a_job_name_standing_elsewhere_in_the_pod_gets_the_engines_answer(policies, where):
    """Where the pod holds its job's name (or the placeholder) the rules may read it there: the
    rule that finds its own term adds none, so jobs do not share that answer."""
    plans = Plans(policies, DEFAULT)
    for job in ("resnet", "bert"):
        p = job_pod("pytorchjob-worker.yaml", job)
        c = p["spec"]["containers"][0]
        if where.endswith("term"):
            named = job if where == "own term" else JOB_PLACEHOLDER
            p["spec"]["affinity"] = {
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own_term(named)]}
            }
        elif where == "annotation":
            p["metadata"].setdefault("annotations", {})["trainyard.dev/inject"] = job
        else:
            c.setdefault("env", []).append({"name": "NCCL_DEBUG", "value": job if where == "env" else JOB_PLACEHOLDER})
        body = admission_review(p, namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept == engine_response(copy.deepcopy(p), policies, "ml", body["request"]["uid"])


def test_a_job_name_too_long_for_the_patch_is_denied_as_the_engine_denies_it(policies):
    plans = Plans(policies, DEFAULT)
    for job in ("short", "n" * (MAX_PATCH_BYTES // 2)):  # the name stands twice in the patch
        body = admission_review(job_pod("pytorchjob-worker.yaml", job), namespace="ml")
        direct, kept = both(body, policies, plans)
        assert direct == kept
    assert "over the 1,048,576 allowed" in orjson.loads(kept)["response"]["status"]["message"]
    assert (plans.misses, plans.hits) == (1, 1)


# --- coverage: every field the engine reads is in the shape ------------------------------------

ALL_KEYS = "*"


class Traced(dict):
    """A pod mapping that records every key the engine reads (or that it reads them all)."""

    def __init__(self, data: dict, path: tuple, reads: set) -> None:
        super().__init__({k: traced(v, (*path, k), reads) for k, v in data.items()})
        self._path, self._reads = path, reads

    def _read(self, key: object) -> None:
        self._reads.add((*self._path, key))

    def get(self, key, default=None):
        self._read(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._read(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self._read(key)
        return super().__contains__(key)

    def __iter__(self):
        self._read(ALL_KEYS)
        return super().__iter__()

    def keys(self):
        self._read(ALL_KEYS)
        return super().keys()

    def items(self):
        self._read(ALL_KEYS)
        return super().items()

    def values(self):
        self._read(ALL_KEYS)
        return super().values()


def traced(value: object, path: tuple, reads: set) -> object:
    if isinstance(value, dict):
        return Traced(value, path, reads)
    if isinstance(value, list):
        return [traced(v, (*path, i), reads) for i, v in enumerate(value)]
    return value


PROBE = "\x00probe"
# what a read field is changed to: a value of each JSON kind the rules tell apart
REPLACEMENTS = (PROBE, {PROBE: PROBE}, [PROBE], 1, None)


def changed_at(p: dict, path: tuple, value: object) -> dict:
    """A copy of ``p`` whose field at ``path`` holds ``value`` (or that gains a key, for a read
    of all keys)."""
    out = copy.deepcopy(p)
    node: object = out
    for key in path[:-1]:
        node = node[key]
    if path[-1] == ALL_KEYS:
        node[PROBE] = value
    else:
        node[path[-1]] = value
    return out


def reads_of(p: dict, policies, namespace: str | None) -> set:
    reads: set = set()
    with contextlib.suppress(MutationError):
        admit(traced(p, (), reads), policies, DEFAULT, namespace)
    return reads


def assert_shape_sees_every_read(p: dict, policies, namespace: str | None) -> None:
    """Changing a field the engine read either leaves its answer alone or changes the shape:
    equal shapes can then never hide different answers."""
    values_read = env_values_read(policies)
    before = orjson.dumps(shape(p, namespace, values_read))
    answer = engine_response(p, policies, namespace, "uid")
    for path in sorted(reads_of(p, policies, namespace), key=repr):
        for value in REPLACEMENTS:
            other = changed_at(p, path, value)
            if engine_response(other, policies, namespace, "uid") == answer:
                continue
            after = orjson.dumps(shape(other, namespace, values_read))
            assert after != before, f"the engine reads {path} but the shape does not change with it ({value!r})"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=pods(), namespace=st.sampled_from(["ml", None]))
def test_every_field_the_engine_reads_of_a_generated_pod_is_in_its_shape(policies, p, namespace):
    assert_shape_sees_every_read(p, policies, namespace)


@pytest.mark.parametrize("name", example_names())
def test_every_field_the_engine_reads_of_an_example_pod_is_in_its_shape(policies, name):
    p = example(name)
    assert reads_of(p, policies, None), "the recorder saw no read"
    assert_shape_sees_every_read(p, policies, None)


def test_the_recorder_catches_a_read_the_shape_leaves_out(policies, monkeypatch):
    """The coverage test can fail: a rule reading a field the shape omits (here the pod's
    hostname) is reported."""
    rules = engine._mutate

    def reads_hostname(pod, *args):
        out = rules(pod, *args)
        out.warnings.append(f"host {pod['spec'].get('hostname')}")
        return out

    monkeypatch.setattr(engine, "_mutate", reads_hostname)
    with pytest.raises(AssertionError, match="'spec', 'hostname'"):
        assert_shape_sees_every_read(example("pytorchjob-worker.yaml"), policies, "ml")


# --- bounds --------------------------------------------------------------------------------------


def test_least_recently_used_answers_leave_first(policies):
    plans = Plans(policies, DEFAULT, size=2)
    pods_ = [pod(trainer(name=f"c{i}")) for i in range(3)]
    for p in (pods_[0], pods_[1], pods_[0], pods_[2], pods_[0], pods_[1]):
        review(orjson.dumps(admission_review(p, namespace="ml")), policies, DEFAULT, plans)
    # c0 miss, c1 miss, c0 hit, c2 miss (c1 out), c0 hit, c1 miss (c2 out)
    assert (plans.misses, plans.hits, len(plans.answers)) == (4, 2, 2)


def test_kept_answers_stay_within_their_byte_budget(policies):
    p = example("pytorchjob-worker.yaml")
    one_ = Plans(policies, DEFAULT)
    review(orjson.dumps(admission_review(p, namespace="ml")), policies, DEFAULT, one_)
    budget = one_.bytes * 2 + one_.bytes // 2  # room for two such answers, not three
    plans = Plans(policies, DEFAULT, max_bytes=budget)
    for i in range(5):  # five shapes (jobs of one shape would share one answer)
        q = copy.deepcopy(p)
        q["spec"]["containers"][0]["name"] = f"trainer-{i}"
        review(orjson.dumps(admission_review(q, namespace="ml")), policies, DEFAULT, plans)
        assert plans.bytes <= budget
    assert len(plans.answers) == 2 and plans.misses == 5


def test_an_answer_over_the_entry_limit_is_not_kept(policies):
    plans = Plans(policies, DEFAULT)
    many = pod(*[trainer(name=f"t{i}", env=[{"name": "NCCL_DEBUG", "value": "INFO"}]) for i in range(250)])
    for _ in range(2):
        direct, kept = both(admission_review(many, namespace="ml"), policies, plans)
        assert direct == kept
    assert (plans.misses, len(plans.answers), plans.bytes) == (2, 0, 0)


def test_a_shape_over_the_limit_is_decided_each_time_and_not_kept(policies):
    plans = Plans(policies, DEFAULT)
    big = pod(trainer(args=["x" * MAX_SHAPE_BYTES]))
    for _ in range(2):
        direct, kept = both(admission_review(big, namespace="ml"), policies, plans)
        assert direct == kept
    assert (plans.misses, plans.hits, len(plans.answers)) == (0, 0, 0)


def test_plans_belong_to_one_policy_set(policies):
    plans = for_policies(None, policies, DEFAULT)
    assert for_policies(plans, policies, DEFAULT) is plans
    reloaded = load_policies(POLICIES)
    assert for_policies(plans, reloaded, DEFAULT) is not plans
    assert for_policies(plans, policies, "ib") is not plans
    body = orjson.dumps(admission_review(pod(trainer()), namespace="ml"))
    _, payload, record = review(body, reloaded, DEFAULT, plans)
    assert record.outcome == "error" and orjson.loads(payload)["response"]["allowed"] is False

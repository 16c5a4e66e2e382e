"""Reviews answered from stencils (webhook/stencil.py through Plans.review) get exactly what the
full path gives, whatever the body holds.

- the pods of a job, and the jobs of a shape, are answered from one stencil, with their own
  uids, names and job names;
- the holes are the strings no rule reads and those read out, nothing else;
- a job's name that the checks of shared answers refuse, a body the stencil does not fit, and
  hostile bytes anywhere (in holes too) get the full path's answer;
- stencils are bounded: in size, in number, and in how often one is made.
"""

from __future__ import annotations

import copy
import re

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.conftest import example, example_names
from tests.webhook.test_plans import job_pod, own_term
from tests.webhook.test_quick import HOSTILE, counting, full, kept_body, mutated, v2_pod
from webhook import quick, stencil
from webhook.plans import Plans
from webhook.review import admission_review

DEFAULT = "roce"
EAGER = 10**9  # stencil_rate: a stencil may be made on any review


def raw_of(p: dict, **request) -> bytes:
    return orjson.dumps(admission_review(p, namespace="ml", **request))


def v1_pod(job: str, rank: int) -> dict:
    """A v1 PyTorchJob's worker as the Training Operator makes it: its own name, index and RANK,
    and the job's name in MASTER_ADDR."""
    p = job_pod("pytorchjob-worker.yaml", job, rank)
    p["spec"]["hostname"] = f"{job}-worker-{rank}"
    for e in p["spec"]["containers"][0]["env"]:
        if e["name"] == "RANK":
            e["value"] = str(rank)
        if e["name"] == "MASTER_ADDR":
            e["value"] = f"{job}-master-0"
    return p


def stenciled(monkeypatch) -> list:
    """Count the reviews that reached the quick reader (those no stencil fitted)."""
    reads: list = []
    real = quick.read

    def read(body, values_read):
        reads.append(body)
        return real(body, values_read)

    monkeypatch.setattr(quick, "read", read)
    return reads


@pytest.mark.parametrize("make", [v1_pod, v2_pod], ids=["v1 PyTorchJob", "TrainJob"])
def test_the_pods_of_the_jobs_of_a_shape_are_answered_from_one_stencil(policies, monkeypatch, make):
    calls, reads = counting(monkeypatch), stenciled(monkeypatch)
    plans = Plans(policies, DEFAULT)
    for job in ("llama", "bert-large", "resnet"):
        for index in range(4):
            raw = raw_of(make(job, index))
            assert plans.review(raw) == full(raw, policies)
    assert len(calls) == 1 and plans.hits == 11 and len(plans.stencils) == 1
    assert len(reads) == 2  # the first pod (decided), the second (from its keys: it made the stencil)


def test_a_pod_of_no_job_is_answered_from_a_stencil_of_its_own(policies, monkeypatch):
    reads = stenciled(monkeypatch)
    plans = Plans(policies, DEFAULT)
    for i in range(4):
        p = copy.deepcopy(example("pytorchjob-worker.yaml"))
        del p["metadata"]["labels"]["training.kubeflow.org/job-name"]
        p["metadata"]["name"] = f"solo-{i}"
        raw = raw_of(p)
        assert plans.review(raw) == full(raw, policies)
    assert len(reads) == 2 and plans.stencils[0].jobs == ()


def strings(raw: bytes) -> list[tuple[int, int]]:
    """The spans of the values of ``raw``'s strings (not its keys)."""
    tokens = list(re.finditer(rb'"(?:[^"\\]|\\.)*"|[^"]', raw))
    return [
        (t.start() + 1, t.end() - 1)
        for t, after in zip(tokens, [*tokens[1:], None], strict=True)
        if t.group()[:1] == b'"' and (after is None or after.group() != b":")
    ]


def test_the_holes_are_the_strings_no_rule_reads_and_those_read_out(policies):
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    bodies = [raw_of(v1_pod("resnet", rank)) for rank in range(2)]
    for raw in bodies:
        plans.review(raw)
    (s,) = plans.stencils
    raw = bodies[1]
    holes, fixed = set(), set()
    for start, end in strings(raw):
        changed = raw[:start] + b"zz" + raw[end:]  # another value, of another length
        (holes if s.read(changed) is not None else fixed).add(raw[start:end].decode())
    assert {
        "system:serviceaccount:kubeflow:training-operator",  # userInfo
        "pod-1",  # request.name, metadata.name
        "resnet",  # the job's name (a shared answer)
        "1",  # replica-index label, RANK
        "resnet-worker-1",  # hostname
        "resnet-master-0",  # MASTER_ADDR
        "23456",  # MASTER_PORT
        "false",  # an annotation no rule reads
        "OnFailure",  # restartPolicy: a field of the spec no rule reads
    } <= holes
    assert {
        "admission.k8s.io/v1",
        "AdmissionReview",
        "Pod",
        "CREATE",
        "ml",  # the namespace
        "pytorch",  # a container's name
        "registry.example.com/ml/trainer:0.1.0",
        "eth0",  # NCCL_SOCKET_IFNAME, read
        "16Gi",
        "imagenet-dataset",
    } <= fixed
    assert s.read(raw.replace(b'"uid":"', b'"uid":"x', 1)) is not None
    assert (
        s.read(raw.replace(orjson.dumps(orjson.loads(raw)["request"]["uid"]), b'""', 1)) is None
    )  # a uid is never empty


@pytest.mark.parametrize(
    "value",
    [b'a\\"b', b"a\\u0062", b"\xc3\xa9", b"\x7f", b"\x1f", b"a\\nb", b'"', b"\\", b"\xff", b" spaced out "],
)
def test_a_hole_holds_printable_ascii_without_escapes_or_the_full_path_answers(policies, value):
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for rank in range(2):
        plans.review(raw_of(v1_pod("resnet", rank)))
    (s,) = plans.stencils
    raw = raw_of(v1_pod("resnet", 5))
    for hole in (b'"pod-5"', b'"resnet-worker-5"', b'"5"'):
        bad = raw.replace(hole, b'"' + value + b'"')
        fits = s.read(bad) is not None
        assert fits == (value == b" spaced out ")
        assert plans.review(bad) == full(bad, policies)


def test_a_job_name_among_the_keys_strings_is_not_shared(policies):
    """Jobs 'resnet' and 'bert' whose pods name 'bert' in a co-location term: bert's own term, so
    the rule adds none for its pods; resnet's answer rendered with bert's name would."""
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for job in ("resnet", "resnet", "bert", "bert"):
        p = job_pod("pytorchjob-worker.yaml", job)
        p["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own_term("bert")]}}
        raw = raw_of(p)
        assert plans.review(raw) == full(raw, policies)
    assert plans.stencils and all(s.read(raw) is None or not s.jobs for s in plans.stencils)


def test_a_name_no_plain_name_spells_is_not_shared_when_the_key_has_an_escape(policies):
    """A term naming job 'a:b' written a\\u003ab: no plain name can be spelled so, so the job
    'alpha' shares its answer; the job 'a:b' may not take it (its own term)."""
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for job in ("alpha", "alpha", "a:b", "a:b"):
        p = job_pod("pytorchjob-worker.yaml", job)
        p["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own_term("a:b")]}}
        raw = raw_of(p)
        term = raw.index(b'"podAffinityTerm"')
        raw = raw[:term] + raw[term:].replace(b'"a:b"', b'"a\\u003ab"', 1)
        assert plans.review(raw) == full(raw, policies)
    assert any(s.jobs and s.escapes for s in plans.stencils)


def test_the_job_labels_of_one_pod_name_one_job(policies):
    """Both job labels hold the job's name: a pod whose two labels differ, or whose job is the
    value another job label holds (a string of the key), gets the full path's answer."""
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)

    def two(job: str, other: str, index: int) -> bytes:
        p = job_pod("pytorchjob-worker.yaml", job, index, label="jobset.sigs.k8s.io/jobset-name")
        p["metadata"]["labels"]["training.kubeflow.org/job-name"] = other
        return raw_of(p)

    for index in range(2):
        plans.review(two("alpha", "alpha", index))
    assert len(plans.stencils[0].jobs) == 2
    for raw in (two("bravo", "bravo", 3), two("bravo", "alpha", 3), two("alpha", "bravo", 3)):
        assert plans.review(raw) == full(raw, policies)
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for index in range(2):
        plans.review(two("alpha", "zulu", index))
    assert len(plans.stencils[0].jobs) == 1
    assert plans.stencils[0].read(two("zulu", "zulu", 3)) is None  # its key has both labels replaced
    for raw in (two("zulu", "zulu", 3), two("bravo", "zulu", 3)):
        assert plans.review(raw) == full(raw, policies)


def test_a_name_read_out_spelled_with_an_escape_makes_no_stencil(policies):
    """The record's pod name is the metadata's name: one written with an escape cannot be read out
    of a hole, and is not left for request.name to stand in for."""
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for i in range(3):
        p = job_pod("pytorchjob-worker.yaml", "resnet", i)
        raw = raw_of(p, name=f"request-{i}").replace(b'"name":"pod-%d"' % i, b'"name":"pod\\u002d0"')
        assert plans.review(raw) == full(raw, policies)
        assert full(raw, policies)[2].pod == "pod-0"
    assert plans.stencils == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"request":{"uid":"a","u\\u0069d":"b"}}',  # a key spelled with an escape
        b'{"request":{"uid":"a","uid":"b"}}',  # twice
    ],
)
def test_a_body_whose_keys_are_not_as_msgspec_reads_them_makes_no_stencil(body):
    walk = stencil._Walk(None, {})
    assert walk.run(body) is False


def test_a_review_with_a_key_twice_makes_no_stencil_and_gets_the_full_paths_answer(policies):
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for rank in range(3):
        raw = raw_of(v1_pod("resnet", rank)).replace(b'"dryRun":false', b'"dryRun":true,"dryRun":false')
        assert plans.review(raw) == full(raw, policies)
    assert plans.stencils == [] and plans.hits == 2


def test_stencils_are_bounded_in_size_number_and_rate(policies):
    big = copy.deepcopy(example("pytorchjob-worker.yaml"))
    big["metadata"]["annotations"]["note"] = "x" * stencil.MAX_BYTES
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for i in range(3):
        big["metadata"]["name"] = f"big-{i}"
        raw = raw_of(big)
        assert plans.review(raw) == full(raw, policies)
    assert plans.stencils == []

    def shape(n: int, i: int) -> bytes:
        p = job_pod("pytorchjob-worker.yaml", "job")
        p["spec"]["containers"][0]["name"] = f"c{n}"
        p["metadata"]["name"] = f"p{i}"
        return raw_of(p)

    plans = Plans(policies, DEFAULT, stencils=3, stencil_rate=EAGER)
    for n in range(5):
        for i in range(2):
            plans.review(shape(n, i))
    assert len(plans.stencils) == 3  # the latest first
    assert all(s.read(shape(n, 9)) for s, n in zip(plans.stencils, (4, 3, 2), strict=True))

    plans = Plans(policies, DEFAULT)  # one a review for every 16 bytes: a shape of its own a review makes few
    reviews = 0
    for n in range(60):
        for i in range(2):
            plans.review(shape(n, i))
            reviews += 1
    size = len(shape(0, 0))
    assert 1 < plans.stencils_made <= 1 + reviews * plans.stencil_rate // size


@pytest.fixture(scope="module")
def primed(policies) -> tuple[Plans, dict[str, bytes]]:
    """Plans holding a stencil of each example pod (as many as there are): a mutated body that
    still fits one is answered from it."""
    names = example_names()
    plans = Plans(policies, DEFAULT, stencils=len(names), stencil_rate=EAGER)
    bodies = {name: kept_body(name) for name in names}
    for raw in bodies.values():
        plans.review(raw)
        plans.review(raw)
    assert len(plans.stencils) == len(names)
    return plans, bodies


# Strings a hostile client may put where a string's value stands (a hole or not)
HOSTILE_IN_HOLES = [*HOSTILE, b"", b"x" * 200, b"trainyard.dev/plans/job-name", b"eth0", b"a\x00b"]
SAFE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'), max_size=12).map(
    str.encode
)  # what a hole holds
TEXT = st.text(max_size=6).map(str.encode)


def holes(plans: Plans, raw: bytes) -> list[tuple[int, int]]:
    """The spans of ``raw``'s strings that are holes of a stencil of ``plans``."""
    return [(a, b) for a, b in strings(raw) if any(s.read(raw[:a] + b"zz" + raw[b:]) for s in plans.stencils)]


@st.composite
def in_strings(draw, bodies: dict[str, bytes], holes: dict[str, list[tuple[int, int]]]) -> bytes:
    """A kept body with values put where its strings' values stand: mostly in its holes."""
    name = draw(st.sampled_from(sorted(bodies)))
    raw, spans = bodies[name], holes[name]
    for _ in range(draw(st.integers(1, 3))):
        start, end = draw(st.sampled_from(spans if draw(st.integers(0, 3)) else strings(raw)))
        value = draw(st.one_of(SAFE, SAFE, st.sampled_from(HOSTILE_IN_HOLES), st.binary(max_size=6), TEXT))
        raw = raw[:start] + value + raw[end:]
        spans = [
            (a + len(value) - (end - start), b + len(value) - (end - start)) if a > start else (a, b)
            for a, b in spans
            if (a, b) != (start, end)
        ]
    return raw


@pytest.fixture(scope="module")
def hole_spans(primed) -> dict[str, list[tuple[int, int]]]:
    plans, bodies = primed
    return {name: holes(plans, raw) for name, raw in bodies.items()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_bodies_get_the_full_paths_answer_and_poison_nothing(policies, primed, hole_spans, data):
    """Bytes mutated anywhere, and values put where strings stand (a fifth of them fit a stencil)."""
    plans, bodies = primed
    raw = data.draw(st.one_of(mutated(bodies), in_strings(bodies, hole_spans)))
    assert plans.review(raw) == full(raw, policies)
    name = data.draw(st.sampled_from(sorted(bodies)))
    assert plans.review(bodies[name]) == full(bodies[name], policies)


def test_a_stencils_pattern_is_held_by_plans_alone(policies):
    """re's own cache of compiled patterns keeps none of the stencils' (each up to a few hundred
    KiB; CPython's re._cache): the stencils Plans keep are all the memory they hold."""
    plans = Plans(policies, DEFAULT, stencil_rate=EAGER)
    for rank in range(2):
        plans.review(raw_of(v1_pod("resnet", rank)))
    (s,) = plans.stencils
    assert not any(cached is s.pattern for cached in re._cache.values())

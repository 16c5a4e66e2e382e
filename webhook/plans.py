"""Answers kept per pod shape: the pods of one job get the engine's work done once.

The pods of a job differ in their names, their ranks and a few env values, none of which the
engine reads; everything it does read (:func:`webhook.engine.shape`) is the same. So the first pod
of a shape is decided by :func:`webhook.review.decide` (the engine, the patch serialised to
base64, the response serialised except for its uid) and every later pod of that shape costs a
dictionary lookup; the review only splices in its uid. :meth:`Plans.review`, the server's entry,
finds the answer by keys read from the review's body (:mod:`webhook.quick`), not parsed into
objects; a review whose keys are not kept yet takes the full path (:func:`webhook.review.review`,
with the shape projected from the parsed pod), and its answer is kept under those keys too.

Jobs of the same shape share their answer too. A job's name reaches the answer only through the
topology rules (:func:`webhook.engine.job_of`: ``engine._topology`` writes ``{label: name}`` into
the pod's affinity and spread constraint, after comparing that term with the pod's own). So a pod
is decided with its job's name replaced by :data:`JOB_PLACEHOLDER`, and the kept answer serves
every job of that shape: its patch gets each job's name spliced in as a JSON string where the
placeholder stands, and is encoded to base64 again (once per job: the answers rendered for the
last :data:`RENDERED` jobs are kept, as their pods arrive together, interleaved at most with
the pods of the jobs created at the same time). That is exact only while nothing else in the
shape holds the name or the placeholder (a term of the pod's own naming its job: the rule's
comparison would tell the two apart) and the answer holds the placeholder only in its patch, as
whole JSON strings; a denial is never shared (the patch size limit depends on the name's length).
Otherwise the pod is kept under its own shape, job name and all.

Bounded: at most :data:`MAX_PLANS` keys (shapes and body keys) holding at most
:data:`MAX_PLAN_BYTES` of keys and responses together (an answer kept under several keys counted
for each), least recently used first out; no key over :data:`MAX_SHAPE_BYTES` and no entry over
:data:`MAX_ENTRY_BYTES` is kept (such a pod is decided each time, as without plans). A hostile
client sending pods of ever new shapes costs each review its keys and one projection more than it
did, and a few MiB of memory at most. Plans belong to one policy set and default profile: a reload starts afresh.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from trainyard.contract.names import JOB_LABELS
from webhook import quick, stencil
from webhook.engine import env_values_read, job_of, shape
from webhook.policy import PolicySet
from webhook.quick import JOB_PLACEHOLDER
from webhook.review import MAX_JSON_VALUES, MAX_PATCH_BYTES, Answer, Record, answered, decide, review

MAX_PLANS = 1024
MAX_PLAN_BYTES = 8 * 1024 * 1024
MAX_SHAPE_BYTES = 64 * 1024
MAX_ENTRY_BYTES = 256 * 1024  # a shape and its response (a 1 MiB patch is 1.4 MiB of base64)
RENDERED = 32  # answers rendered for the latest jobs, each at most RENDERED_BYTES (512 KiB in all)
RENDERED_BYTES = 16 * 1024
STENCILS = 8  # stencils kept (webhook/stencil.py), each of a body of at most stencil.MAX_BYTES
# A stencil is tried at most once every len(body) / STENCIL_BYTES_PER_REVIEW reviews: compiling
# one costs about 0.75 us a byte, so making them costs at most 12 us a review.
STENCIL_BYTES_PER_REVIEW = 16
_PLACEHOLDER = JOB_PLACEHOLDER.encode()
_PLACEHOLDER_JSON = orjson.dumps(JOB_PLACEHOLDER)


@dataclass(frozen=True, slots=True)
class JobAnswer:
    """An answer shared by the jobs of one shape: the placeholder's answer, and the response
    around its patch's base64 (``head``, ``rest``). The patch (JSON, with the placeholder) is kept
    in two: up to a whole number of 3-byte groups before the first placeholder, in base64 already
    (``encoded``; base64 turns each group into 4 characters of its own), and the rest as JSON
    (``tail``), which alone is spliced and encoded per job."""

    answer: Answer
    head: bytes
    encoded: bytes
    tail: bytes
    rest: bytes

    @classmethod
    def split(cls, answer: Answer, head: bytes, patch: bytes, rest: bytes) -> JobAnswer:
        cut = patch.index(_PLACEHOLDER_JSON)
        cut -= cut % 3
        return cls(answer, head, base64.b64encode(patch[:cut]), patch[cut:], rest)

    @property
    def size(self) -> int:
        return len(self.head) + len(self.encoded) + len(self.tail) + len(self.rest)

    def render(self, name_json: bytes) -> Answer | None:
        """The answer for the job whose name serialises to ``name_json``; None when its patch would
        be over the limit (the engine denies that pod: the caller decides it)."""
        tail = self.tail.replace(_PLACEHOLDER_JSON, name_json)
        if len(self.encoded) // 4 * 3 + len(tail) > MAX_PATCH_BYTES:
            return None
        a = self.answer
        response = self.head + self.encoded + base64.b64encode(tail) + self.rest
        return Answer(response, a.outcome, a.reason, a.profile, a.ops, a.warnings)

    @classmethod
    def of(cls, answer: Answer) -> Answer | JobAnswer | None:
        """What to keep for the placeholder's ``answer``: the answer itself when it does not hold
        the placeholder, a JobAnswer when only its patch does, None when it cannot be shared."""
        if answer.outcome == "denied" or _PLACEHOLDER in answer.reason.encode() or _PLACEHOLDER in answer.tail:
            return None
        if answer.outcome != "patched":
            return answer  # no patch: nothing of the name in it
        encoded = orjson.loads(b"{" + answer.tail[1:-1])["patch"].encode()
        head, sep, rest = answer.tail.partition(encoded)
        patch = base64.b64decode(encoded)
        if not sep or patch.count(_PLACEHOLDER) != patch.count(_PLACEHOLDER_JSON):
            return None  # the placeholder inside a longer string
        if _PLACEHOLDER not in patch:
            return answer
        return cls.split(answer, head, patch, rest)


_NOT_SHARED = object()  # kept for a job shape whose answer cannot be shared: key the pod as it is
_RENDER_FAILED = object()  # a shared answer whose patch is over the limit with one job's name


class Plans:
    """A :class:`webhook.review.Decider` that keeps each shape's answer."""

    def __init__(
        self,
        policies: PolicySet,
        default: str,
        size: int = MAX_PLANS,
        max_bytes: int = MAX_PLAN_BYTES,
        stencils: int = STENCILS,
        stencil_rate: int = STENCIL_BYTES_PER_REVIEW,
    ) -> None:
        self.policies, self.default, self.size, self.max_bytes = policies, default, size, max_bytes
        self.max_stencils, self.stencil_rate = stencils, stencil_rate
        self.values_read = env_values_read(policies)
        self.answers: OrderedDict[bytes, object] = OrderedDict()  # Answer, JobAnswer or _NOT_SHARED
        self.bytes = 0  # of the shapes and responses kept
        self.hits = self.misses = self.reviews = 0
        self.stencils: list[stencil.Stencil] = []  # most recently used first, at most max_stencils
        self._stencil_made: int | None = None  # self.reviews when a stencil was last tried
        self.stencils_made = 0
        # the answers rendered from a JobAnswer for the last jobs seen: a job's pods come together
        self._rendered: dict[tuple[int, bytes], tuple[JobAnswer, Answer]] = {}

    def __call__(self, pod: dict, policies: PolicySet, default: str, namespace: str | None) -> Answer:
        if policies is not self.policies or default != self.default:
            raise ValueError("these plans belong to another policy set")  # the caller's bug
        return self._decide(pod, namespace)[0]

    def review(self, body: bytes) -> tuple[int, bytes, Record]:
        """HTTP status, response body and record for one POST /mutate body, as
        :func:`webhook.review.review` with these plans gives them; a pod whose answer is kept is
        answered from a stencil its body fits (:mod:`webhook.stencil`), else from the body read
        for its keys (:mod:`webhook.quick`), not parsed into objects."""
        self.reviews += 1
        if len(body) <= MAX_JSON_VALUES:
            for i, s in enumerate(self.stencils):
                found = self._stenciled(s, body)
                if found is not None:
                    if i:
                        self.stencils.insert(0, self.stencils.pop(i))  # most recently used first
                    return found
        q = quick.read(body, self.values_read)
        if q is None:
            return review(body, self.policies, self.default, self)
        missed: list[tuple[bytes, bool]] = []  # the keys to keep the answer under, and if shared
        for projected in (False, True):
            answer = self._quick(q, projected, missed)
            if answer is not None:
                self.hits += 1
                self._make_stencil(body, q)
                return 200, *q.answer(answer)
        return self._review_keeping(body, q, missed)

    def _stenciled(self, s: stencil.Stencil, body: bytes) -> tuple[int, bytes, Record] | None:
        """The review of ``body`` answered from stencil ``s``; None when it does not fit."""
        read = s.read(body)
        if read is None:
            return None
        uid, pod, name_json = read
        answer = self._job_answer(s.entry, name_json)
        if answer is None:
            return None  # over the patch limit with this job's name: the engine denies it
        self.hits += 1
        return 200, *answered(answer, uid, s.namespace, pod)

    def _make_stencil(self, body: bytes, q: quick.Quick) -> None:
        """A stencil of ``body``, whose answer was found from its keys: for the answer its job
        shares, else for its own. None is made when one is kept for that answer's key already, or
        when fewer than one review for every ``stencil_rate`` bytes of the body have passed since
        the last try (a client sending ever new shapes does not make one a review, and a pod
        that fits no stencil does not read its keys again each review)."""
        made = self._stencil_made
        if not self.max_stencils or (made is not None and (self.reviews - made) * self.stencil_rate < len(body)):
            return
        self._stencil_made = self.reviews  # tried: a pod that fits no stencil tries again only so often
        entry, key, shared = None, q.key(True, shared=True), True
        if key is not None:
            entry = self.answers.get(key)
            if entry is _NOT_SHARED or not q.shareable(key):
                entry = None
        if entry is None:
            key, shared = q.key(True, shared=False), False
            entry = self.answers.get(key) if key is not None else None
        if entry is None or any(s.key == key for s in self.stencils):
            return
        new = stencil.make(body, q, entry, key, shared)
        if new is not None:
            self.stencils_made += 1
            self.stencils.insert(0, new)
            del self.stencils[self.max_stencils :]

    def _quick(self, q: quick.Quick, projected: bool, missed: list[tuple[bytes, bool]]) -> Answer | None:
        """The answer kept under ``q``'s keys, as sent or ``projected``; None, with the keys it
        missed added to ``missed``."""
        key = q.key(projected, shared=True)
        if key is not None:
            entry = self._find(key)
            if entry is None:
                missed.append((key, True))
                return None
            if entry is not _NOT_SHARED and q.may_share(key):
                return self._job_answer(entry, q.name_json)  # None: over the patch limit, the full path decides
        key = q.key(projected, shared=False)
        if key is None:
            return None
        entry = self._find(key)
        if entry is None:
            missed.append((key, False))
            return None
        return entry

    def _review_keeping(
        self, body: bytes, q: quick.Quick, missed: list[tuple[bytes, bool]]
    ) -> tuple[int, bytes, Record]:
        """The full path's review of ``body``; its answer kept under the keys ``missed``: the entry
        its job shares (a shared key) or the pod's own answer."""
        decided: list[tuple[Answer, object]] = []

        def decider(pod: dict, policies: PolicySet, default: str, namespace: str | None) -> Answer:
            decided.append(self._decide(pod, namespace))
            return decided[-1][0]

        status, payload, record = review(body, self.policies, self.default, decider)
        if decided and record.outcome == decided[0][0].outcome:
            answer, entry = decided[0]
            for key, shared in missed:
                if len(key) > MAX_SHAPE_BYTES:
                    continue
                if not shared:
                    self._keep(key, answer)
                elif entry is not _RENDER_FAILED:
                    self._keep(key, entry if entry is not None and q.shareable(key) else _NOT_SHARED)
        return status, payload, record

    def _decide(self, pod: dict, namespace: str | None) -> tuple[Answer, object]:
        """The pod's answer, and the entry its job shares it through (None: not shared;
        _RENDER_FAILED: shared, but over the patch limit with this job's name)."""
        meta = pod.get("metadata")
        job = job_of(meta.get("labels")) if isinstance(meta, dict) else None
        if job is not None:
            found = self._for_job(pod, namespace, job[1])
            if found is not None:
                return found
        key = self._key(pod, namespace)
        if key is None:
            return decide(pod, self.policies, self.default, namespace), None
        answer = self._find(key)
        if answer is not None:
            self.hits += 1
            return answer, None
        self.misses += 1
        answer = decide(pod, self.policies, self.default, namespace)
        self._keep(key, answer)
        return answer, None

    def _for_job(self, pod: dict, namespace: str | None, name: str) -> tuple[Answer, object] | None:
        """The pod's answer through the answer its job shape shares, and that entry; None: key the
        pod as it is (which counts its hit or miss)."""
        try:
            name_json = orjson.dumps(name)
        except orjson.JSONEncodeError:
            return None
        meta = pod["metadata"]
        labels = dict(meta["labels"])
        replaced = 0
        for label in JOB_LABELS:
            if labels.get(label) == name:
                labels[label] = JOB_PLACEHOLDER
                replaced += 1
        placeholder_pod = {**pod, "metadata": {**meta, "labels": labels}}
        key = self._key(placeholder_pod, namespace)
        if key is None or name_json in key or key.count(_PLACEHOLDER) != replaced:
            return None
        key = b"J" + key  # never a pod's own shape (those start with '[')
        entry = self._find(key)
        if entry is None:
            entry = JobAnswer.of(decide(placeholder_pod, self.policies, self.default, namespace)) or _NOT_SHARED
            self._keep(key, entry)
            if entry is not _NOT_SHARED:
                self.misses += 1
        elif entry is not _NOT_SHARED:
            self.hits += 1
        if entry is _NOT_SHARED:
            return None
        answer = self._job_answer(entry, name_json)
        if answer is None:
            return decide(pod, self.policies, self.default, namespace), _RENDER_FAILED
        return answer, entry

    def _job_answer(self, entry: Answer | JobAnswer, name_json: bytes) -> Answer | None:
        """The answer a job shape shares, for the job whose name serialises to ``name_json``; None
        when its patch would be over the limit (the engine denies that pod)."""
        if isinstance(entry, Answer):
            return entry
        rendered = self._rendered.get((id(entry), name_json))
        if rendered is not None and rendered[0] is entry:  # held, so its id is not another's
            return rendered[1]  # another pod of a job seen just before
        answer = entry.render(name_json)
        if answer is not None and len(answer.tail) <= RENDERED_BYTES:
            if len(self._rendered) >= RENDERED:
                del self._rendered[next(iter(self._rendered))]  # the oldest
            self._rendered[id(entry), name_json] = (entry, answer)
        return answer

    def _key(self, pod: dict, namespace: str | None) -> bytes | None:
        projected = shape(pod, namespace, self.values_read)
        if projected is None:
            return None
        try:
            key = orjson.dumps(projected)
        except orjson.JSONEncodeError:  # not JSON as parsed (only a caller's dict can be)
            return None
        return key if len(key) <= MAX_SHAPE_BYTES else None

    def _find(self, key: bytes) -> object:
        """The entry kept under ``key`` (now the most recently used), or None."""
        entry = self.answers.get(key)
        if entry is not None:
            self.answers.move_to_end(key)
        return entry

    def _keep(self, key: bytes, entry: object) -> None:
        cost = len(key) + _size(entry)
        if cost > MAX_ENTRY_BYTES:
            return
        self.answers[key] = entry
        self.bytes += cost
        while len(self.answers) > self.size or self.bytes > self.max_bytes:
            old_key, old = self.answers.popitem(last=False)
            self.bytes -= len(old_key) + _size(old)


def _size(entry: object) -> int:
    if isinstance(entry, Answer):
        return len(entry.tail)
    return entry.size if isinstance(entry, JobAnswer) else 0


def for_policies(plans: Plans | None, policies: PolicySet, default: str) -> Plans:
    """``plans`` if they belong to ``policies`` and ``default``, else new ones (after a reload)."""
    if plans is not None and plans.policies is policies and plans.default == default:
        return plans
    return Plans(policies, default)

"""Answers kept per pod shape: the pods of one job get the engine's work done once.

The pods of a job differ in their names, their ranks and a few env values, none of which the
engine reads; everything it does read (:func:`webhook.engine.shape`) is the same. So the first pod
of a shape is decided by :func:`webhook.review.decide` (the engine, the patch serialised to
base64, the response serialised except for its uid) and every later pod of that shape costs a
projection, one orjson dump and a dictionary lookup; the review only splices in its uid.

Bounded: at most :data:`MAX_PLANS` answers holding at most :data:`MAX_PLAN_BYTES` of shapes and
responses together, least recently used first out; no shape over :data:`MAX_SHAPE_BYTES` and no
entry over :data:`MAX_ENTRY_BYTES` is kept (such a pod is decided each time, as without plans). A
hostile client sending pods of ever new shapes costs each review one projection more than it
did, and a few MiB of memory at most. Plans belong to one policy set and default profile: a reload starts afresh.
"""

from __future__ import annotations

from collections import OrderedDict

import orjson

from webhook.engine import env_values_read, shape
from webhook.policy import PolicySet
from webhook.review import Answer, decide

MAX_PLANS = 1024
MAX_PLAN_BYTES = 8 * 1024 * 1024
MAX_SHAPE_BYTES = 64 * 1024
MAX_ENTRY_BYTES = 256 * 1024  # a shape and its response (a 1 MiB patch is 1.4 MiB of base64)


class Plans:
    """A :class:`webhook.review.Decider` that keeps each shape's answer."""

    def __init__(
        self, policies: PolicySet, default: str, size: int = MAX_PLANS, max_bytes: int = MAX_PLAN_BYTES
    ) -> None:
        self.policies, self.default, self.size, self.max_bytes = policies, default, size, max_bytes
        self.values_read = env_values_read(policies)
        self.answers: OrderedDict[bytes, Answer] = OrderedDict()
        self.bytes = 0  # of the shapes and responses kept
        self.hits = self.misses = 0

    def __call__(self, pod: dict, policies: PolicySet, default: str, namespace: str | None) -> Answer:
        if policies is not self.policies or default != self.default:
            raise ValueError("these plans belong to another policy set")  # the caller's bug
        projected = shape(pod, namespace, self.values_read)
        key = None
        if projected is not None:
            try:
                key = orjson.dumps(projected)
            except orjson.JSONEncodeError:  # not JSON as parsed (only a caller's dict can be)
                key = None
        if key is None or len(key) > MAX_SHAPE_BYTES:
            return decide(pod, policies, default, namespace)
        answer = self.answers.get(key)
        if answer is not None:
            self.hits += 1
            self.answers.move_to_end(key)
            return answer
        self.misses += 1
        answer = decide(pod, policies, default, namespace)
        cost = len(key) + len(answer.tail)
        if cost > MAX_ENTRY_BYTES:
            return answer
        self.answers[key] = answer
        self.bytes += cost
        while len(self.answers) > self.size or self.bytes > self.max_bytes:
            old_key, old = self.answers.popitem(last=False)
            self.bytes -= len(old_key) + len(old.tail)
        return answer


def for_policies(plans: Plans | None, policies: PolicySet, default: str) -> Plans:
    """``plans`` if they belong to ``policies`` and ``default``, else new ones (after a reload)."""
    if plans is not None and plans.policies is policies and plans.default == default:
        return plans
    return Plans(policies, default)

"""Stencils: the body of a kept review, with holes where the pods of its answer differ.

The pods of one job reach the webhook as bodies alike but for a few strings: the request's uid,
the pod's name and hostname, its index labels, the values of env no rule reads (a v1 pod's RANK)
and, among the jobs of one shape, the job's name. Once a review has been answered from its keys
(:mod:`webhook.quick`), its body becomes a regular expression: every byte as sent, but each of
those strings a hole. A later body that the expression matches whole is the same review with
other values in those strings: the same JSON, the same fields, so the same keys and the same
answer. Its uid, pod name and job name are read out of the holes; nothing is decoded.

Exact, as the keys are:

- A hole matches printable ASCII but '"' and '\\': the string stays a string, holds no escape,
  and is UTF-8. Everything else is the body's own bytes, whitespace included, so a matched body
  has the fields, the types, the numbers and the duplicate-free keys of the one the stencil was
  made from (a body with a key written with an escape, or one key twice in an object, makes no
  stencil).
- Holes are the strings no rule reads (:data:`webhook.engine.SPEC_READ`, ``LABELS_READ``,
  ``ANNOTATIONS_READ``, and the env values the projected key leaves out), read out for the record (the
  uid, the pod's names), or the job's name of an answer the jobs of a shape share: there the
  checks of :meth:`webhook.quick.Quick.may_share` are made on the name read out.
- Matching is one pass of :mod:`re` over literal bytes and possessive classes, with nothing to
  backtrack: linear in the body.

Bounded: a stencil is made from a body of at most :data:`MAX_BYTES` (compiling the expression
costs about 0.75 us a byte), and :class:`webhook.plans.Plans` keeps a few, making one at most
every so many reviews.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainyard.contract.names import JOB_LABELS
from webhook import quick
from webhook.engine import ANNOTATIONS_READ, LABELS_READ, SPEC_READ
from webhook.review import NOT_JSON

MAX_BYTES = 16 * 1024
_HOLE = rb"[\x20\x21\x23-\x5b\x5d-\x7e]"  # printable ASCII but '"' and '\': a string's bytes as they are
_IN_HOLE = re.compile(_HOLE + rb"*+")
# JSON's tokens in a body already decoded: a string, a bracket or separator, a number or literal
# (whitespace between them is skipped).
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[{}\[\]:,]|[^\s"{}\[\]:,]++', re.S)
_ANNOTATIONS_READ, _LABELS_READ, _SPEC_READ = frozenset(ANNOTATIONS_READ), frozenset(LABELS_READ), frozenset(SPEC_READ)

# What a hole holds: a string read by no rule, or one read out.
FREE, UID, NAME, GENERATE_NAME, REQUEST_NAME, JOB = range(6)
_NAMES = (NAME, GENERATE_NAME, REQUEST_NAME)  # the record's pod name: the first of these not empty


@dataclass(frozen=True, slots=True)
class Stencil:
    """A kept review's body with holes; ``entry`` answers every body it matches (an Answer, or
    the JobAnswer the jobs of a shape share, for the job read out of the holes ``jobs``)."""

    pattern: re.Pattern[bytes]
    # where in the match's groups (0 first) the uid is, the holes of the pod's names (metadata.name,
    # generateName, request.name: those sent), and the job labels holding the job's name (shared
    # answers only)
    uid: int
    names: tuple[int, ...]
    jobs: tuple[int, ...]
    key: bytes  # the key ``entry`` is kept under (projected; shared when ``jobs``)
    strings: frozenset[bytes]  # the key's strings as JSON: the job's name may be none of them
    escapes: bool  # the key holds a backslash
    namespace: str
    entry: object

    def read(self, body: bytes) -> tuple[str, str, bytes] | None:
        """The uid, the pod name and the job's name as JSON (``b""`` when the answer is the pod's
        own) of ``body``; None when the stencil does not fit it."""
        m = self.pattern.fullmatch(body)
        if m is None:
            return None
        held = m.groups()
        name_json = b""
        if self.jobs:
            job = held[self.jobs[0]]
            for other in self.jobs[1:]:
                if held[other] != job:
                    return None
            name_json = b'"' + job + b'"'  # orjson.dumps of the name: a hole needs no escape
            if name_json in self.strings or (self.escapes and not quick.plain(name_json)):
                return None  # as Quick.may_share
        pod = b""
        for name in self.names:
            pod = held[name]
            if pod:
                break
        return held[self.uid].decode(), pod.decode(), name_json


def make(body: bytes, q: quick.Quick, entry: object, key: bytes, shared: bool) -> Stencil | None:
    """The stencil of ``body`` (read as ``q``), answered with ``entry`` (kept under ``key``);
    ``shared``: the job's name is a hole. None when the body cannot make one."""
    if len(body) > MAX_BYTES:
        return None
    walk = _Walk(q.job if shared else None, q.values_left_out())
    try:
        if not walk.run(body):
            return None
    except (IndexError, KeyError, TypeError, ValueError, *NOT_JSON):  # not JSON as msgspec read it: no stencil
        return None
    groups: dict[int, list[int]] = {}  # kind -> its groups' numbers
    parts, last, group = [], 0, 0
    for start, end, kind in walk.holes:
        parts.append(re.escape(body[last:start]))
        if kind == FREE:
            parts.append(_HOLE + b"*+")
        else:  # read out: a group (the uid and the job's name are never empty)
            groups.setdefault(kind, []).append(group)
            group += 1
            parts.append(b"(" + _HOLE + (b"++" if kind in (UID, JOB) else b"*+") + b")")
        last = end
    parts.append(re.escape(body[last:]))
    if len(groups.get(UID, ())) != 1 or (shared and JOB not in groups):
        return None
    pattern = re.compile(b"".join(parts))
    # re keeps the last 512 patterns it compiled, stencils' too (about 280 KiB each of a 16 KiB
    # body): a client sending ever new shapes would hold 140 MiB there. Plans hold the few kept.
    re.purge()
    return Stencil(
        pattern=pattern,
        uid=groups[UID][0],
        names=tuple(groups[kind][0] for kind in _NAMES if kind in groups),
        jobs=tuple(groups.get(JOB, ())),
        key=key,
        strings=frozenset(t for t in _TOKEN.findall(key) if t[:1] == b'"'),
        escapes=b"\\" in key,
        namespace=q.namespace,
        entry=entry,
    )


class _Walk:
    """The holes of a body, found walking its JSON tokens with the path of each value."""

    def __init__(self, job: str | None, left_out: dict[str, list[list[bool]]]) -> None:
        self.job, self.left_out = job, left_out  # the env values the projected key leaves out
        self.holes: list[tuple[int, int, int]] = []  # start, end (a string's bytes), kind

    def run(self, body: bytes) -> bool:
        """Find the holes; False when the body can make no stencil."""
        frames: list[list] = []  # per open object or array: [keys seen (None: an array), key or index]
        expect_key = False
        for token in _TOKEN.finditer(body):
            t = token.group()
            c = t[0]
            if c == 0x7B:  # {
                frames.append([set(), None])
                expect_key = True
            elif c == 0x5B:  # [
                frames.append([None, 0])
                expect_key = False
            elif c in (0x7D, 0x5D):  # } ]
                frames.pop()
                expect_key = False
            elif c == 0x2C:  # ,
                frame = frames[-1]
                if frame[0] is None:
                    frame[1] += 1
                else:
                    expect_key = True
            elif c == 0x3A:  # :
                expect_key = False
            elif c == 0x22 and expect_key:
                key, seen = t[1:-1], frames[-1][0]
                if b"\\" in key or key in seen:
                    return False  # spelled otherwise, or twice: which value counts is msgspec's to say
                seen.add(key)
                frames[-1][1] = key
            elif c == 0x22:
                kind = self._kind(tuple(frame[1] for frame in frames), t)
                if kind is None:
                    continue
                start, end = token.start() + 1, token.end() - 1
                if _IN_HOLE.fullmatch(body, start, end) is not None:
                    self.holes.append((start, end, kind))
                elif kind != FREE:
                    return False  # a value read out, spelled with an escape: no stencil
        return not frames

    def _kind(self, path: tuple, token: bytes) -> int | None:
        """What the string ``token`` at ``path`` is, as a hole; None: no hole, its bytes stay."""
        if len(path) < 2 or path[0] != b"request":
            return None
        if len(path) == 2:
            return {b"uid": UID, b"name": REQUEST_NAME}.get(path[1])
        if path[1] == b"userInfo":
            return FREE
        if path[1] != b"object" or len(path) < 4:
            return None
        part, field = path[2], path[3]
        if part == b"metadata":
            if len(path) == 4 and field in (b"name", b"generateName"):
                return NAME if field == b"name" else GENERATE_NAME
            if field in (b"labels", b"annotations"):
                name = path[4].decode()
                if field == b"annotations":
                    return None if name in _ANNOTATIONS_READ else FREE
                if name not in _LABELS_READ:
                    return FREE
                if name in JOB_LABELS and self.job is not None and quick.decode_string(token) == self.job:
                    return JOB
                return None  # another job label's value is in the key: the job's name may not be it
            return None if field == b"namespace" else FREE  # the other fields of ObjectMeta: read by no rule
        if part == b"spec":
            name = field.decode()
            if name not in _SPEC_READ:
                return FREE
            if len(path) == 8 and path[5] == b"env" and path[7] == b"value" and name in self.left_out:
                return FREE if self.left_out[name][path[4]][path[6]] else None
            return None
        return FREE if part == b"status" else None

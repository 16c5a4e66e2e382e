"""``trainyard mutate``: the server's answer, without a server.

An AdmissionReview in gives exactly the response ``POST /mutate`` would give; a bare Pod (YAML
or JSON) in gives the Pod as it would come out of admission, with the patch applied.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import jsonpatch
import orjson
import yaml

from trainyard.contract.errors import UserError
from trainyard.contract.files import read_bounded
from webhook.engine import MutationError, admit
from webhook.policy import PolicySet
from webhook.review import KIND, review


class Denied(UserError):
    exit_code = 1


@dataclass
class Result:
    text: str
    warnings: list[str] = field(default_factory=list)
    note: str = ""


def read_document(path: str) -> tuple[object, bool]:
    """The parsed document and whether it was JSON (so the output keeps its format); bounded as
    ``POST /mutate`` bounds a body (a larger file is refused before it is read)."""
    from webhook.app import MAX_BODY

    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_BODY + 1)
            if len(data) > MAX_BODY:
                raise UserError(f"-: standard input holds more than {MAX_BODY} bytes, over what POST /mutate accepts")
        else:
            data = read_bounded(path, MAX_BODY, what="the document")
        raw = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    stripped = raw.lstrip()
    if stripped.startswith("{"):
        try:
            return orjson.loads(raw), True
        except orjson.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON: {exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(raw) if d is not None]
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {exc}") from None
    if len(docs) != 1:
        raise UserError(f"{path}: expected one document (a Pod or an AdmissionReview), found {len(docs)}")
    return docs[0], False


def mutate_document(doc: object, is_json: bool, policies: PolicySet, default: str, namespace: str) -> Result:
    if not isinstance(doc, dict):
        raise UserError("expected a Pod or an AdmissionReview mapping")
    if doc.get("kind") == KIND:
        status, body, record = review(orjson.dumps(doc), policies, default)
        if status != 200:
            raise UserError(f"not a valid AdmissionReview: {record.reason}")
        return Result(orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode(), record.warnings)
    if doc.get("kind") != "Pod":
        raise UserError(f"expected kind Pod or AdmissionReview, got {doc.get('kind')!r}")
    ns = (doc.get("metadata") or {}).get("namespace") or namespace
    try:
        decision = admit(doc, policies, default, ns)
    except MutationError as exc:
        raise Denied(f"denied: {exc}") from None
    if decision.action == "deny":
        raise Denied(f"denied: {decision.reason}")
    if decision.action == "skip":
        mutated, warnings, note = doc, [], f"unchanged: {decision.reason}"
    else:
        assert decision.mutation is not None
        mutated = jsonpatch.apply_patch(doc, decision.mutation.ops)
        warnings = decision.mutation.warnings
        note = f"profile {decision.profile.name}: {len(decision.mutation.ops)} patch operations"
    if is_json:
        text = orjson.dumps(mutated, option=orjson.OPT_INDENT_2).decode()
    else:
        text = yaml.safe_dump(mutated, sort_keys=False, width=120)
    return Result(text, warnings, note)

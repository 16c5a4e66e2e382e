"""Kubernetes rules trainyard applies in more than one place: name patterns, label and annotation
limits, and ``$(VAR)`` expansion.

Patterns follow k8s.io/apimachinery/pkg/util/validation/validation.go (IsDNS1123Label,
IsDNS1123Subdomain, IsDNS1035Label, IsCIdentifier-like env names); labels and annotations follow
kubernetes/apimachinery@v0.36.5 pkg/api/validate/content/kube.go (IsLabelKey, label values) and
pkg/api/validation/objectmeta.go (ValidateAnnotations, TotalAnnotationSizeLimitB); expansion follows
kubernetes/kubernetes third_party/forked/golang/expansion/expand.go (Expand, tryReadVariableName).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# validation.go IsEnvVarName: "[-._a-zA-Z][-._a-zA-Z0-9]*"
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
# validation.go IsQualifiedName: [prefix/]name, prefix a DNS-1123 subdomain, name at most 63
# characters of "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]" (label keys, toleration keys, resource
# names, topology keys); label values are empty or that format, LabelValueMaxLength 63.
QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# objectmeta.go: TotalAnnotationSizeLimitB = 256 * (1 << 10), the sum of len(key) + len(value) in bytes
ANNOTATIONS_MAX_BYTES = 256 * 1024
# Well-known keys: k8s.io/api@v0.36.5 core/v1/well_known_labels.go (LabelHostname, LabelMetadataName)
# and core/v1/annotation_key_constants.go (LastAppliedConfigAnnotation)
HOSTNAME_LABEL = "kubernetes.io/hostname"  # the node's name, on every node
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # the namespace's name, set by kube-apiserver
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"  # what kubectl apply wrote


def is_dns1123_label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX and DNS1123_LABEL.fullmatch(value) is not None


def is_dns1123_subdomain(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= DNS1123_SUBDOMAIN_MAX
        and DNS1123_SUBDOMAIN.fullmatch(value) is not None
    )


def subdomain_problem(value: str) -> str | None:
    """Why ``value`` cannot name an object whose name must be a DNS-1123 subdomain (validation.go
    IsDNS1123Subdomain, which NameIsDNSSubdomain applies: every custom resource's name, an Argo CD
    Application's among them), None if it can."""
    if is_dns1123_subdomain(value):
        return None
    return (
        f"{value[:80]!r}{'...' if len(value) > 80 else ''} ({len(value)} characters) is not a DNS-1123 subdomain: "
        f"at most {DNS1123_SUBDOMAIN_MAX} characters, lower case letters, digits, '-' and '.', every '.'-separated "
        "part starting and ending with a letter or digit"
    )


def is_dns1035_label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX and DNS1035_LABEL.fullmatch(value) is not None


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (a qualified name: ``[prefix/]name``), None if it is. Annotation
    keys follow the same rule, lower-cased first (ValidateAnnotations)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or "/" in prefix):
        return f"{key[:80]!r} is not a qualified name: at most one '/', with a prefix before it"
    if not name or len(name) > QUALIFIED_NAME_MAX or QUALIFIED_NAME_PART.fullmatch(name) is None:
        return (
            f"{key[:80]!r}: the name part must be 1 to {QUALIFIED_NAME_MAX} characters, alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )
    if slash and not is_dns1123_subdomain(prefix):
        return f"{key[:80]!r}: the prefix must be a DNS-1123 subdomain of at most {DNS1123_SUBDOMAIN_MAX} characters"
    return None


def is_qualified_name(value: object) -> bool:
    return isinstance(value, str) and qualified_name_problem(value) is None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a label value, None if it can."""
    if value == "" or (len(value) <= LABEL_VALUE_MAX and QUALIFIED_NAME_PART.fullmatch(value) is not None):
        return None
    return (
        f"label value {value[:80]!r}{'...' if len(value) > 80 else ''} ({len(value)} characters): at most "
        f"{LABEL_VALUE_MAX}, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    )


def annotations_size(annotations: Mapping[Any, object]) -> int:
    """What counts against the 256 KiB annotation limit: the bytes of every key and value."""
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an object whose name must be a DNS-1035 label (None if it can)."""
    if is_dns1035_label(name):
        return None
    return (
        f"metadata.name: {name!r} must be a DNS-1035 label: at most 63 characters, lower case letters, "
        "digits and '-', starting with a letter and ending with a letter or digit"
    )


def unknown_fields(mapping: Mapping[Any, object], known: frozenset[str], path: str, kind: str) -> list[str]:
    """One problem per key of ``mapping`` that ``kind``'s schema does not have (a structural schema
    drops them: the object would not say what its author meant)."""
    listed = ", ".join(sorted(known))
    return [
        f"{path}.{key}: not a field of {kind} (known: {listed}); the API server would drop it"
        for key in mapping
        if key not in known
    ]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of command, args and env values, in one left-to-right pass.

    As expansion.go does: ``$(NAME)`` becomes NAME's value when NAME is defined, and stays as
    written otherwise; ``$$`` is an escaped ``$`` (so ``$$(VAR)`` yields the literal ``$(VAR)``);
    a ``$`` before anything else, or last, is kept; an unclosed ``$(`` is kept and scanning goes on
    after it (so a later ``$$`` is still an escape).
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        start = text.find("$", i)
        if start < 0 or start == n - 1:
            out.append(text[i:])
            break
        out.append(text[i:start])
        nxt = text[start + 1]
        if nxt == "$":
            out.append("$")
            i = start + 2
        elif nxt == "(":
            end = text.find(")", start + 2)
            if end < 0:  # an unclosed reference: "$(" is kept and the scan goes on after it
                out.append("$(")
                i = start + 2
                continue
            name = text[start + 2 : end]
            out.append(env[name] if name in env else text[start : end + 1])
            i = end + 1
        else:
            out.append("$")
            i = start + 1
    return "".join(out)

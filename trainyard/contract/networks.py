"""The Multus ``k8s.v1.cni.cncf.io/networks`` annotation.

Two forms, as Multus accepts them (pkg/k8sclient.parsePodNetworkAnnotation):

- plain: ``"roce-network, ml/other@net5"``: comma-separated ``[namespace/]name[@interface]``;
- JSON: ``'[{"name": "roce-network", "namespace": "ml", "interface": "net5"}]'``.

Multus names the interface of the k-th attachment (1-based) ``net<k>`` unless the attachment
requests one (``@ifname``, or ``interface`` in the JSON form, or the older ``interfaceRequest``
when ``interface`` is empty), so an attachment's interface depends on its position and on every
explicit name (multus-cni@v4.3.0 pkg/multus/multus.go getIfname, pkg/k8sclient/k8sclient.go).

Multus checks none of that at admission: an interface that already exists in the pod (``eth0``,
the cluster network's, or ``lo``) or that two attachments ask for fails the pod's network setup
at run time ("validateIfName: interface name ... already exists"). :meth:`Networks.clashes` says
which attachments would, so the webhook can rename or deny before the pod is created.

The value is bounded before it is parsed: at most 256 KiB (the most all of a pod's annotations
may hold, apimachinery pkg/api/validation/objectmeta.go TotalAnnotationSizeLimitB) and at most
:data:`MAX_ATTACHMENTS` attachments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from trainyard.contract.k8s import is_dns1123_label
from trainyard.contract.names import NETWORKS_ANNOTATION

ANNOTATION = NETWORKS_ANNOTATION
MAX_BYTES = 256 * 1024
MAX_ATTACHMENTS = 256
# interfaces every pod already has: the loopback and the cluster network's (the kubelet's CNI
# ifname argument, eth0)
RESERVED_INTERFACES = ("eth0", "lo")
IFNAME_MAX = 15  # IFNAMSIZ - 1: Multus refuses longer names (k8sclient.go parsePodNetworkObjectName)
_BAD_IFNAME = re.compile(r"[\s/]")


class NetworksError(ValueError):
    pass


@dataclass(slots=True)
class Attachment:
    name: str
    namespace: str | None = None
    interface: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other JSON keys (ips, mac, ...), kept as they are

    def plain(self) -> str:
        text = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{text}@{self.interface}" if self.interface else text

    def as_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out["name"] = self.name
        if self.namespace:
            out["namespace"] = self.namespace
        if self.interface:
            out["interface"] = self.interface
        return out


@dataclass(slots=True)
class Networks:
    attachments: list[Attachment]
    json_form: bool = False

    def interfaces(self) -> list[str]:
        """The interface each attachment gets, by position."""
        return [a.interface or f"net{i + 1}" for i, a in enumerate(self.attachments)]

    def clashes(self) -> dict[int, str]:
        """Attachments whose interface cannot be created, by position: why (an interface every pod
        already has, or one an earlier attachment gets)."""
        out: dict[int, str] = {}
        first: dict[str, int] = {}
        for i, name in enumerate(self.interfaces()):
            if name in RESERVED_INTERFACES:
                out[i] = f"interface {name} already exists in every pod"
            elif name in first:
                j = first[name]
                out[i] = f"interface {name} is also the interface of {self.attachments[j].plain()}"
                out.setdefault(j, f"interface {name} is also the interface of {self.attachments[i].plain()}")
            else:
                first[name] = i
        return out

    def render(self) -> str:
        if self.json_form:
            return json.dumps([a.as_json() for a in self.attachments], separators=(",", ":"), ensure_ascii=False)
        return ", ".join(a.plain() for a in self.attachments)


def _names(what: str, name: object, namespace: object) -> None:
    if not is_dns1123_label(name):
        raise NetworksError(f"{what}: name {_show(name)} is not a DNS-1123 label (a NetworkAttachmentDefinition name)")
    if namespace is not None and not is_dns1123_label(namespace):
        raise NetworksError(f"{what}: namespace {_show(namespace)} is not a DNS-1123 label")


def _interface(what: str, iface: object) -> None:
    if not isinstance(iface, str) or len(iface.encode()) > IFNAME_MAX or _BAD_IFNAME.search(iface):
        raise NetworksError(
            f"{what}: interface {_show(iface)} must be at most {IFNAME_MAX} bytes, without '/' or spaces"
        )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


def _plain_item(item: str) -> Attachment:
    text, _, iface = item.partition("@")
    ns, slash, name = text.rpartition("/")
    if slash and "/" in ns:
        raise NetworksError(f"{_show(item)} has more than one '/'; expected [namespace/]name[@interface]")
    name, ns, iface = name.strip(), ns.strip(), iface.strip()
    if "@" in iface:
        raise NetworksError(f"{_show(item)} has more than one '@'; expected [namespace/]name[@interface]")
    _names(_show(item), name, ns or None)
    if iface:
        _interface(_show(item), iface)
    return Attachment(name=name, namespace=ns or None, interface=iface or None)


def _json_item(i: int, item: object) -> Attachment:
    if not isinstance(item, dict):
        raise NetworksError(f"item {i} must be an object with a string 'name'")
    for key in ("namespace", "interface", "interfaceRequest"):
        if item.get(key) is not None and not isinstance(item[key], str):
            raise NetworksError(f"item {i}: {key!r} must be a string")
    name, ns = item.get("name"), item.get("namespace") or None
    _names(f"item {i}", name, ns)
    # multus: "interfaceRequest" (before v3.2) counts when "interface" is empty
    iface = item.get("interface") or item.get("interfaceRequest") or None
    if iface is not None:
        _interface(f"item {i}", iface)
    extra = {k: v for k, v in item.items() if k not in ("name", "namespace", "interface")}
    return Attachment(name, ns, iface, extra)  # type: ignore[arg-type]


def parse(value: object) -> Networks:
    """Parse the annotation value; raise NetworksError saying what is wrong."""
    if value is None:
        return Networks([])
    if not isinstance(value, str):
        raise NetworksError(f"the value must be a string, not {type(value).__name__}")
    if len(value) > MAX_BYTES:
        raise NetworksError(f"the value is {len(value):,} characters, more than all of a pod's annotations may hold")
    text = value.strip()
    if not text:
        return Networks([])
    if any(c in text for c in '[{"'):  # the test Multus itself uses to pick the JSON form
        try:
            items = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise NetworksError(f"not valid JSON: {str(exc)[:80]}") from None
        if not isinstance(items, list):
            raise NetworksError("the JSON form must be a list of objects")
        _count(len(items))
        return Networks([_json_item(i, item) for i, item in enumerate(items)], json_form=True)
    parts = [part.strip() for part in text.split(",")]
    _count(len(parts))
    return Networks([_plain_item(part) for part in parts if part])


def _count(n: int) -> None:
    if n > MAX_ATTACHMENTS:
        raise NetworksError(f"{n:,} attachments; a pod may ask for at most {MAX_ATTACHMENTS}")

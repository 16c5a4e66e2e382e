"""The Multus ``k8s.v1.cni.cncf.io/networks`` annotation.

Two forms, as Multus accepts them (pkg/k8sclient.parsePodNetworkAnnotation):

- plain: ``"roce-network, ml/other@net5"``: comma-separated ``[namespace/]name[@interface]``;
- JSON: ``'[{"name": "roce-network", "namespace": "ml", "interface": "net5"}]'``.

Multus names the interface of the k-th attachment (1-based) ``net<k>`` unless the attachment
requests one, so an attachment's interface depends on its position and on every explicit name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from trainyard.contract.names import NETWORKS_ANNOTATION

ANNOTATION = NETWORKS_ANNOTATION
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # Multus requires DNS-1123 labels
_BAD_IFNAME = re.compile(r"[\s/]")


class NetworksError(ValueError):
    pass


@dataclass(slots=True)
class Attachment:
    name: str
    namespace: str | None = None
    interface: str | None = None
    extra: dict = field(default_factory=dict)  # other JSON keys (ips, mac, ...), kept as they are

    def plain(self) -> str:
        text = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{text}@{self.interface}" if self.interface else text

    def as_json(self) -> dict:
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

    def render(self) -> str:
        if self.json_form:
            return json.dumps([a.as_json() for a in self.attachments], separators=(",", ":"), ensure_ascii=False)
        return ", ".join(a.plain() for a in self.attachments)


def _plain_item(item: str) -> Attachment:
    text, _, iface = item.partition("@")
    ns, slash, name = text.rpartition("/")
    if slash and "/" in ns:
        raise NetworksError(f"{item!r} has more than one '/'; expected [namespace/]name[@interface]")
    name, ns, iface = name.strip(), ns.strip(), iface.strip()
    if "@" in iface or not _NAME.match(name) or (ns and not _NAME.match(ns)):
        raise NetworksError(f"{item!r} is not [namespace/]name[@interface] with DNS-1123 label names")
    if iface and (len(iface) > 15 or _BAD_IFNAME.search(iface)):
        raise NetworksError(f"{item!r}: interface {iface!r} must be at most 15 characters, no '/' or spaces")
    return Attachment(name=name, namespace=ns or None, interface=iface or None)


def parse(value: object) -> Networks:
    """Parse the annotation value; raise NetworksError saying what is wrong."""
    if value is None:
        return Networks([])
    if not isinstance(value, str):
        raise NetworksError(f"the value must be a string, not {type(value).__name__}")
    text = value.strip()
    if not text:
        return Networks([])
    if any(c in text for c in '[{"'):  # the test Multus itself uses to pick the JSON form
        try:
            items = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            raise NetworksError(f"not valid JSON: {exc}") from None
        if not isinstance(items, list):
            raise NetworksError("the JSON form must be a list of objects")
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise NetworksError(f"item {i} must be an object with a string 'name'")
            extra = {k: v for k, v in item.items() if k not in ("name", "namespace", "interface")}
            ns, iface = item.get("namespace"), item.get("interface")
            if (ns is not None and not isinstance(ns, str)) or (iface is not None and not isinstance(iface, str)):
                raise NetworksError(f"item {i}: 'namespace' and 'interface' must be strings")
            out.append(Attachment(item["name"], ns or None, iface or None, extra))
        return Networks(out, json_form=True)
    return Networks([_plain_item(part.strip()) for part in text.split(",") if part.strip()])

"""NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1): their CNI config, checked offline.

``spec.config`` is a JSON string Multus hands to the CNI plugin; a typo in it only shows when a
pod fails to start. :func:`config_problems` checks what can be checked without a node: valid
JSON, ``cniVersion`` and ``type``, what the plugins used here need (macvlan ``master``,
host-device ``device``/``pciBusID``, ib-sriov and host-device IPAM), and IPAM ranges that lie
in their subnet. :func:`address_range` gives the addresses a NAD hands out (the local demo
uses it to address its "pods").
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from trainyard.contract.names import NAD_RESOURCE_ANNOTATION

GROUP = "k8s.cni.cncf.io"
KIND = "NetworkAttachmentDefinition"
RESOURCE_NAME_ANNOTATION = NAD_RESOURCE_ANNOTATION
KNOWN_TYPES = ("macvlan", "ipvlan", "ib-sriov", "sriov", "host-device", "bridge")
MACVLAN_MODES = ("bridge", "private", "vepa", "passthru")


def is_nad(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND and str(doc.get("apiVersion", "")).startswith(GROUP + "/")


def config(doc: dict) -> dict[str, Any]:
    """The parsed CNI config of a NAD (ValueError when it is not a JSON object)."""
    raw = (doc.get("spec") or {}).get("config")
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("spec.config is empty: Multus would look for a config file on the node instead")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"spec.config is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("spec.config must be a JSON object")
    return value


def address_range(cfg: dict[str, Any]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str | None, str | None]:
    """(network, first, last) handed out by the IPAM section (host-local or whereabouts)."""
    ipam = cfg.get("ipam") or {}
    if ipam.get("type") == "whereabouts":
        net = ipaddress.ip_network(str(ipam["range"]), strict=False)
        return net, ipam.get("range_start"), ipam.get("range_end")
    if ipam.get("type") == "host-local":
        if "subnet" in ipam:
            return ipaddress.ip_network(str(ipam["subnet"]), strict=False), ipam.get("rangeStart"), ipam.get("rangeEnd")
        ranges = ipam.get("ranges") or [[{}]]
        first = ranges[0][0]
        return ipaddress.ip_network(str(first["subnet"]), strict=False), first.get("rangeStart"), first.get("rangeEnd")
    raise ValueError(f"no address range in ipam type {ipam.get('type')!r}")


def config_problems(doc: dict) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a NAD's CNI config, each 'spec.config: ...'."""
    errors: list[str] = []
    warnings: list[str] = []
    try:
        cfg = config(doc)
    except ValueError as exc:
        return [str(exc)], []
    if "plugins" in cfg:  # a conflist: check each plugin
        plugins = cfg.get("plugins") if isinstance(cfg.get("plugins"), list) else []
        for p in plugins:
            if isinstance(p, dict):
                e, w = _plugin(p)
                errors += e
                warnings += w
    else:
        e, w = _plugin(cfg)
        errors += e
        warnings += w
    if not cfg.get("cniVersion"):
        errors.append("spec.config: cniVersion is missing")
    return errors, warnings


def _plugin(cfg: dict[str, Any]) -> tuple[list[str], list[str]]:
    errors: list[str] = []
    warnings: list[str] = []
    ptype = cfg.get("type")
    if not ptype:
        return ["spec.config: type (the CNI plugin) is missing"], []
    if ptype not in KNOWN_TYPES:
        warnings.append(
            f"spec.config: CNI plugin type {ptype!r} is not one trainyard knows; its fields are not checked"
        )
    if ptype == "macvlan":
        if not cfg.get("master"):
            errors.append("spec.config: macvlan needs master (the node NIC the attachment sits on)")
        if cfg.get("mode", "bridge") not in MACVLAN_MODES:
            errors.append(f"spec.config: macvlan mode {cfg.get('mode')!r} must be one of {', '.join(MACVLAN_MODES)}")
    if ptype == "host-device" and not any(cfg.get(k) for k in ("device", "hwaddr", "kernelpath", "pciBusID")):
        errors.append("spec.config: host-device needs one of device, hwaddr, kernelpath, pciBusID")
    ipam = cfg.get("ipam")
    if ptype in ("macvlan", "ipvlan", "ib-sriov", "host-device", "sriov") and not isinstance(ipam, dict):
        errors.append(f"spec.config: {ptype} without ipam: the interface gets no address and NCCL cannot use it")
        return errors, warnings
    if isinstance(ipam, dict):
        errors += _ipam(ipam, warnings)
    return errors, warnings


def _ipam(ipam: dict[str, Any], warnings: list[str]) -> list[str]:
    itype = ipam.get("type")
    if itype not in ("host-local", "whereabouts", "static", "dhcp"):
        return [f"spec.config: ipam.type {itype!r} must be host-local, whereabouts, static or dhcp"]
    if itype in ("static", "dhcp"):
        return []
    if itype == "host-local":
        warnings.append(
            "spec.config: host-local IPAM allocates per node: two nodes hand out the same addresses unless each "
            "node gets its own range; prefer whereabouts for a multi-node fabric"
        )
    try:
        net, first, last = address_range({"ipam": ipam})
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        key = "range" if itype == "whereabouts" else "subnet"
        return [f"spec.config: ipam.{key} is missing or not a network ({exc})"]
    out = []
    bounds = []
    for name, value in (("start", first), ("end", last)):
        if value is None:
            continue
        try:
            addr = ipaddress.ip_address(str(value))
        except ValueError:
            out.append(f"spec.config: ipam range {name} {value!r} is not an IP address")
            continue
        if addr not in net:
            out.append(f"spec.config: ipam range {name} {addr} is outside {net}")
        bounds.append(addr)
    if len(bounds) == 2 and bounds[0] > bounds[1]:
        out.append(f"spec.config: ipam range start {bounds[0]} is after its end {bounds[1]}")
    return out

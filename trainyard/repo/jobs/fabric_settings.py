"""A job's own fabric settings against the fabric admission gives it: kept where compatible,
refused where they conflict, never rewritten without a word.

Admission (the webhook's engine, or the MutatingAdmissionPolicies compiled from the same profile)
keeps every network attachment a pod names and adds the fabric's after them; it writes the
profile's enforced variables (``NCCL_SOCKET_IFNAME`` = the fabric interface, ``TRAINYARD_*``) over
whatever the pod says, and adds the others only where the pod sets none. So a job that brings its
own settings from a vendor guide or an upstream example would run on something else than it says:
``NCCL_SOCKET_IFNAME=net1`` rewritten to ``net2`` because its own attachment took ``net1``, an
``NCCL_IB_HCA`` naming a NIC the fabric does not offer, an attachment asking for ``eth0``.

:func:`check` compares the pod as the job creates it with the pod as admission leaves it and
returns what ``validate`` refuses (errors) and what it says (warnings). The NCCL list rules are
NCCL's own (trainyard/contract/nccl.py ``NameList``), on the interfaces the admitted pod has:
``lo``, ``eth0`` and one per attachment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.contract import networks as netann
from trainyard.contract.names import ENV_EXPECT_TRANSPORT, ENV_FABRIC, ENV_SHM_BYTES
from trainyard.contract.nccl import NAME_LISTS, NameList
from webhook.policy import CompiledProfile

_SHOWN = 60  # a value longer than this is cut in messages
_FABRIC_OWNED = (ENV_FABRIC, ENV_EXPECT_TRANSPORT, ENV_SHM_BYTES)


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _show(value: str) -> str:
    return value if len(value) <= _SHOWN else f"{value[:_SHOWN]}... ({len(value):,} characters)"


def _some(names: list[str], most: int = 4) -> str:
    shown = ", ".join(_show(n) for n in names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most:,} more"


def _annotation(pod: dict) -> netann.Networks | None:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    try:
        return netann.parse(annotations.get(netann.ANNOTATION))
    except netann.NetworksError:
        return None  # admission denies such a pod itself, naming the annotation


def _interfaces(after: dict, profile: CompiledProfile, namespace: str) -> tuple[dict[str, str], str | None]:
    """Every interface of the admitted pod with what it is, and the fabric's."""
    what = {"lo": "the loopback", "eth0": "the pod network"}
    nets = _annotation(after)
    if nets is None:
        return what, None
    fabric = profile.spec.networks[0] if profile.spec.networks else None
    mine = None
    for attachment, iface in zip(nets.attachments, nets.interfaces(), strict=True):
        what.setdefault(iface, f"attachment {attachment.plain()}")
        if (
            fabric
            and attachment.name == fabric.name
            and (attachment.namespace or namespace) == (fabric.namespace or namespace)
        ):
            mine = mine or iface
    return what, mine


def _containers(pod: dict) -> list[tuple[str, dict]]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    out = []
    for group in ("initContainers", "containers"):
        items = spec.get(group)
        for c in items if isinstance(items, list) else []:
            if isinstance(c, dict):
                kind = "init container" if group == "initContainers" else "container"
                out.append((f"{kind} {c.get('name') if isinstance(c.get('name'), str) else '?'}", c))
    return out


def check(before: dict, after: dict, profile: CompiledProfile, namespace: str, field_hint: str = "") -> Findings:
    """What admission with ``profile`` does to the settings the pod brought (``before`` as the job
    creates it, ``after`` as admitted). ``field_hint``: where the job sets a container's env, for
    the message (``spec.trainer.env`` for a TrainJob)."""
    out = Findings()
    ifaces, fabric = _interfaces(after, profile, namespace)
    _networks(out, before, after, profile, namespace, fabric)
    if fabric is None:
        return out
    where = f" ({field_hint})" if field_hint else ""
    admitted = dict(_containers(after))
    for what, c in _containers(before):
        if not profile.is_trainer_image(c.get("image")):
            continue
        given = {e.get("name"): e.get("value") for e in admitted.get(what, {}).get("env") or [] if isinstance(e, dict)}
        env = [e for e in c.get("env") or [] if isinstance(e, dict) and isinstance(e.get("name"), str)]
        for e in env:
            name = e["name"]
            value = e.get("value") if isinstance(e.get("value"), str) else None
            plan = next((p for p in profile.env_plan if p[0] == name), None)
            prefix = f"{what}: env {name}{where}"
            if name in _FABRIC_OWNED:
                if value is not None and value == given.get(name):
                    continue
                out.errors.append(
                    f"{prefix}: set by fabric {profile.name} for the trainer's start-up checks; remove it"
                )
            elif plan is not None and plan[2]:  # enforced: admission writes the fabric's value over it
                wanted = fabric if plan[1] is None else plan[1]
                _enforced(out, prefix, name, value, e.get("valueFrom") is not None, wanted, ifaces, profile.name)
            elif plan is not None and plan[1] is not None and name in NAME_LISTS and value is not None:
                _hca(out, prefix, name, value, plan[1], profile.name)
    return out


def _networks(
    out: Findings, before: dict, after: dict, profile: CompiledProfile, namespace: str, fabric: str | None
) -> None:
    asked = _annotation(before)
    if asked is None or not asked.attachments or not profile.spec.networks:
        return
    net = profile.spec.networks[0]
    wanted_ns = net.namespace or namespace
    for i, a in enumerate(asked.attachments):
        if a.name == net.name and (a.namespace or namespace) == wanted_ns and a.interface is not None:
            clash = asked.clashes().get(i)
            if clash is not None:
                out.errors.append(
                    f"annotation {netann.ANNOTATION}: attachment {a.plain()} (the fabric network): {clash}, so Multus "
                    f"would fail the pod's network setup; leave the interface out (fabric {profile.name} names it)"
                )
            elif fabric is not None and fabric != a.interface:
                out.warnings.append(
                    f"annotation {netann.ANNOTATION}: the fabric attachment {a.plain()} gets interface {fabric} at "
                    "admission, not the one it asks for"
                )
            return
    if fabric is not None and fabric != "net1":
        own = ", ".join(a.plain() for a in asked.attachments)
        out.warnings.append(
            f"annotation {netann.ANNOTATION}: the pod's own attachments ({_show(own)}) come first, so the fabric "
            f"attachment {net.name} gets interface {fabric}, and the fabric's NCCL_SOCKET_IFNAME says {fabric}"
        )


def _selected(value: str, ifaces: dict[str, str]) -> list[str]:
    names = NameList.parse(value)
    return [iface for iface in ifaces if names.selects(iface)]


def _enforced(
    out: Findings,
    prefix: str,
    name: str,
    value: str | None,
    from_elsewhere: bool,
    wanted: str,
    ifaces: dict[str, str],
    fabric: str,
) -> None:
    if from_elsewhere:
        out.errors.append(
            f"{prefix}: set with valueFrom, which fabric {fabric} replaces with {name}={wanted}; remove it "
            "(the fabric sets it)"
        )
        return
    if value is None or value == wanted or (name in NAME_LISTS and value == f"={wanted}"):
        return  # what admission keeps as it is
    if name in NAME_LISTS:
        chosen = _selected(value, ifaces)
        if chosen == [wanted]:
            out.warnings.append(
                f"{prefix}={_show(value)} selects only the fabric interface {wanted}, and fabric {fabric} writes it "
                f"as {name}={wanted}; write that, or leave it out"
            )
            return
        said = _some([f"{i} ({ifaces[i]})" for i in chosen]) if chosen else "no interface of the pod"
        out.errors.append(
            f"{prefix}={_show(value)} selects {said}, not the fabric interface {wanted} ({ifaces.get(wanted, '')}): "
            f"admission would rewrite it to {wanted}; remove it (fabric {fabric} sets {name}={wanted})"
        )
        return
    out.errors.append(
        f"{prefix}={_show(value)}: fabric {fabric} enforces {name}={wanted} and admission would rewrite it; remove it"
    )


def _hca(out: Findings, prefix: str, name: str, value: str, offered: str, fabric: str) -> None:
    """A user's device list kept by admission: it must select only devices the fabric's list offers
    (an include list), or leave some of them (an exclude list)."""
    mine, theirs = NameList.parse(value), NameList.parse(offered)
    if theirs.exclude or not theirs.entries or not mine.entries:
        return  # the lint says what is wrong with an empty list; an excluding profile offers no names
    if mine.exclude:
        left = [ref for ref, _ in theirs.entries if mine.selects(ref)]  # what the exclusion leaves
        if not left:
            out.errors.append(
                f"{prefix}={_show(value)} excludes every device fabric {fabric} offers ({offered}), so NCCL finds no "
                f"RDMA device and falls back to TCP sockets; name the devices to use among {offered}, or remove it"
            )
        return
    outside = [
        ref
        for ref, port in mine.entries
        if not (theirs.selects(ref, port) if mine.exact else any(ref.startswith(t) for t, _ in theirs.entries))
    ]
    if outside:
        out.errors.append(
            f"{prefix}={_show(value)} selects {_some(outside)}, which fabric {fabric} does not offer ({name}="
            f"{offered}): NCCL would use another NIC than the fabric's, or none; name devices among {offered}, or "
            "remove it"
        )

"""Lint of NCCL environment variables.

One function, :func:`lint_env`, shared by the policy loader (webhook), ``trainyard validate``
(manifests) and ``trainyard preflight`` (the running pod). It knows the variables that are
folklore: copied from blog posts, yet ignored by NCCL, so they give a false sense of having
configured something. Pure standard library: both images import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from trainyard.contract.names import TRANSPORTS

Severity = Literal["error", "warning"]

# Variables NCCL ignores, with why and what to use instead.
FOLKLORE: dict[str, str] = {
    "NCCL_SOCKET_TIMEOUT": (
        "does not exist in NCCL; the collective timeout is the 'timeout' argument of "
        "torch.distributed.init_process_group (or TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC for the watchdog)"
    ),
    "NCCL_TIMEOUT": (
        "does not exist in NCCL; the collective timeout is the 'timeout' argument of "
        "torch.distributed.init_process_group"
    ),
    "NCCL_TREE_THRESHOLD": "was removed in NCCL 2.5; choose algorithms with NCCL_ALGO if you must",
    "NCCL_LL_THRESHOLD": "was removed in NCCL 2.5; choose protocols with NCCL_PROTO if you must",
    "NCCL_IB_GDR_LEVEL": "was renamed; use NCCL_NET_GDR_LEVEL",
    "NCCL_MIN_NRINGS": "is a legacy alias; use NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NRINGS": "is a legacy alias; use NCCL_MAX_NCHANNELS",
    "NCCL_ASYNC_ERROR_HANDLING": (
        "is read by PyTorch, not NCCL, and current PyTorch only reads TORCH_NCCL_ASYNC_ERROR_HANDLING"
    ),
    "NCCL_BLOCKING_WAIT": ("is read by PyTorch, not NCCL, and current PyTorch only reads TORCH_NCCL_BLOCKING_WAIT"),
}

# Path levels as NCCL names them; integer values are legacy, and anything above 4 means SYS.
PATH_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
LEVEL_VARIABLES = ("NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL")

# The interface NCCL's socket transport (and bootstrap) uses; the webhook enforces it to the fabric
# attachment's interface. gloo has its own variable, which trainyard points at the same interface.
SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.name}: {self.message}"


def level_name(value: str) -> str | None:
    """The named path level for a legacy integer level, or None if ``value`` is not an integer."""
    try:
        level = int(value.strip())
    except ValueError:
        return None
    if level < 0:
        return None
    return PATH_LEVELS[min(level, len(PATH_LEVELS) - 1)]


def lint_env(
    env: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
    expect_transport: str | None = None,
) -> list[Finding]:
    """Lint NCCL-related environment variables.

    ``env`` maps names to values; a value of None means "set from elsewhere" (valueFrom) and
    is only checked by name. ``expect_transport`` ("IB" or "Socket") adds the checks that the
    env does not switch off the transport the fabric promises.
    """
    items = env.items() if isinstance(env, Mapping) else env
    findings: list[Finding] = []
    values: dict[str, str | None] = {}
    for name, value in items:
        values[name] = value
        if name in FOLKLORE:
            findings.append(Finding("error", name, f"{name} {FOLKLORE[name]}; remove it"))
        elif name in LEVEL_VARIABLES and value is not None:
            named = level_name(value)
            if named is not None:
                findings.append(
                    Finding(
                        "warning",
                        name,
                        f"{name}={value} is a legacy integer level; write {name}={named} "
                        f"(0..4 = {'/'.join(PATH_LEVELS)}, above 4 means SYS)",
                    )
                )
    if expect_transport == "IB":
        if (values.get("NCCL_IB_DISABLE") or "").strip() == "1":
            findings.append(
                Finding(
                    "error",
                    "NCCL_IB_DISABLE",
                    "NCCL_IB_DISABLE=1 turns RDMA off on a fabric that promises IB; remove it",
                )
            )
        net = (values.get("NCCL_NET") or "").strip()
        if net and net.lower() == "socket":
            findings.append(Finding("error", "NCCL_NET", "NCCL_NET=Socket forces TCP on a fabric that promises IB"))
    elif expect_transport is not None and expect_transport not in TRANSPORTS:
        raise ValueError(f"expect_transport must be one of {TRANSPORTS}, not {expect_transport!r}")
    return findings


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]

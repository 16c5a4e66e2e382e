"""Lint of NCCL environment variables, judged for the NCCL release the trainer image ships.

One function, :func:`lint_env`, shared by the policy loader (webhook), ``trainyard validate``
(manifests) and ``trainyard preflight`` (the running pod). It knows the variables that are
folklore (copied from blog posts, yet ignored by NCCL), the ones whose meaning changed with the
release (a pinned GID index, plugin lists), the list syntax of interface and HCA variables, and
the settings that quietly take RDMA away on a fabric that promises it. Pure standard library:
both images import it.

The NCCL release is a fact of the trainer image, declared once here (:data:`TRAINER_NCCL`) and
checked against ``trainer/Dockerfile``, which pins it and verifies it at build time.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from trainyard.contract.names import TRANSPORTS
from trainyard.contract.nccl_variables import KNOWN_VARIABLES

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True, slots=True)
class NcclVersion:
    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> NcclVersion:
        """``2.30.7``, ``2.30.7-1`` (a tag) or ``2.30.7+cuda13.0`` (NCCL's version line)."""
        m = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:[-+].{0,40})?", text.strip())
        if not m:
            raise ValueError(f"{text[:40]!r} is not an NCCL version (like 2.30.7)")
        return cls(int(m[1]), int(m[2]), int(m[3] or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


# The NCCL of the trainer image: trainer/Dockerfile installs torch 2.15.0 from PyPI, whose wheel
# requires nvidia-nccl-cu13==2.30.7 (its Requires-Dist), pins that package and checks it at build
# time; tests/contract/test_nccl_lint.py checks that the Dockerfile says the same as this line.
TRAINER_NCCL = NcclVersion(2, 30, 7)

# Releases where a variable's meaning changed (NVIDIA/nccl release commits and env.rst at v2.30.7-1).
DYNAMIC_GID = NcclVersion(2, 21, 5)  # v2.21.5-1: "Net/IB: add support for dynamic GID detection"
NET_PLUGIN_LIST = NcclVersion(2, 27, 3)  # v2.27.3-1: NCCL_NET_PLUGIN "accept a comma-separated list"
NET_PLUGIN_NONE = NcclVersion(2, 28, 3)  # v2.28.3-1 src/plugin/net.cc: strcasecmp(envNetPlugin, "none")
GID_SELECTORS = ("NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM")  # since 2.21
# Lists of interface or HCA names: "^" (exclude) first, then "=" (exact names), else prefixes
# (env.rst; src/misc/socket.cc findInterfaces and net_ib's parse read "^" before "=").
NAME_LISTS = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")

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
    # NVIDIA/nccl 1fae0736 "Remove SHM CE proxy code and thread context", in v2.30.7-1
    "NCCL_SHM_USE_CUDA_MEMCPY": "is no longer read from NCCL 2.30 (its CUDA-memcpy SHM path was removed)",
    "NCCL_SHM_MEMCPY_MODE": "is no longer read from NCCL 2.30 (its CUDA-memcpy SHM path was removed)",
    "NCCL_CREATE_THREAD_CONTEXT": "is no longer read from NCCL 2.30 (proxy threads always use cudaSetDevice)",
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
    nccl_version: NcclVersion | None = TRAINER_NCCL,
) -> list[Finding]:
    """Lint NCCL-related environment variables.

    ``env`` maps names to values; a value of None means "set from elsewhere" (valueFrom) and
    is only checked by name. ``expect_transport`` ("IB" or "Socket") adds the checks that the
    env does not switch off the transport the fabric promises. ``nccl_version``: the NCCL that
    will read the env (default: the trainer image's); None skips the checks that depend on it.
    """
    if expect_transport is not None and expect_transport not in TRANSPORTS:
        raise ValueError(f"expect_transport must be one of {TRANSPORTS}, not {expect_transport!r}")
    items = env.items() if isinstance(env, Mapping) else env
    findings: list[Finding] = []
    values: dict[str, str | None] = {}
    for name, value in items:
        values[name] = value
        if name in FOLKLORE:
            findings.append(Finding("error", name, f"{name} {FOLKLORE[name]}; remove it"))
        elif (meant := likely_variable(name)) is not None:
            # the list is NCCL TRAINER_NCCL's: another release may read a name it lacks
            certain = nccl_version == TRAINER_NCCL
            release = f"NCCL {nccl_version}" if nccl_version is not None else "NCCL"
            findings.append(
                Finding(
                    "error" if certain else "warning",
                    name,
                    f"{release} reads no variable {name}, so this setting does nothing; did you mean {meant}?",
                )
            )
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
        elif name in NAME_LISTS and value is not None:
            findings += _name_list(name, value, expect_transport)
    findings += _gid(values, nccl_version)
    findings += _net_plugin(values.get("NCCL_NET_PLUGIN"), nccl_version)
    if expect_transport == "IB":
        findings += _rdma_off(values)
    return findings


# Variables read by NCCL plugins that the lint itself knows (the HPC-X NCCL-RDMA-SHARP plugin, below)
PLUGIN_VARIABLES = frozenset({"NCCL_PLUGIN_P2P"})
_NAME_MAX = 64  # no NCCL variable is longer; a longer name is compared with nothing


def likely_variable(name: str) -> str | None:
    """The NCCL variable that ``name`` (an ``NCCL_...`` name NCCL does not read) was probably
    meant to be: the same name in upper case, or one at most one edit away (two for names of ten
    characters or more; a swap of two neighbours is one edit). None for a name NCCL reads, a name
    outside ``NCCL_``, or one close to nothing."""
    if not isinstance(name, str) or name[:5].upper() != "NCCL_" or len(name) > _NAME_MAX:
        return None
    if name in KNOWN_VARIABLES or name in PLUGIN_VARIABLES or name in FOLKLORE:
        return None
    return _closest(name)


@functools.lru_cache(maxsize=1024)
def _closest(name: str) -> str | None:
    upper = name.upper()
    if upper in KNOWN_VARIABLES or upper in FOLKLORE:
        return upper
    budget = 2 if len(upper) >= 10 else 1
    best: tuple[int, str] | None = None
    for known in KNOWN_VARIABLES:
        if abs(len(known) - len(upper)) > budget:
            continue
        d = _edits(upper, known, budget)
        if d <= budget and (best is None or (d, known) < best):
            best = (d, known)
    return best[1] if best is not None else None


def _edits(a: str, b: str, budget: int) -> int:
    """Optimal string alignment distance between ``a`` and ``b`` (insert, delete, substitute, swap
    neighbours), or ``budget + 1`` as soon as it must exceed ``budget``."""
    before: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
        if min(current) > budget:
            return budget + 1
        before, row = row, current
    return row[-1]


_ATOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


@dataclass(frozen=True, slots=True)
class NameList:
    """An ``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` value as NCCL v2.30.7 reads it: ``^`` (exclude)
    first, then ``=`` (exact names), else prefixes (src/bootstrap.cc, src/os/linux.cc,
    src/transport/net_ib/init.cc); entries split at ``,``, empty entries skipped, nothing
    stripped; an entry is ``name[:port[:rail[:plane]]]``, the name cut to 63 bytes, an empty or
    absent port any port (src/misc/utils.cc parseStringList, matchIf, matchPort; up to 2.29 an
    empty port after ``:`` read as port 0)."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int], ...]  # (name or prefix, port; -1 for any)

    @classmethod
    def parse(cls, value: str) -> NameList:
        exclude = value.startswith("^")
        body = value[1:] if exclude else value
        exact = body.startswith("=")
        body = body[1:] if exact else body
        entries = []
        for item in body.split(","):
            name, _, rest = item.partition(":")
            port = rest.partition(":")[0]
            if name:  # parseStringList drops an empty name; atoi reads a port's leading number, else 0
                number = _ATOI.match(port)
                entries.append(
                    (name.encode()[:63].decode(errors="ignore"), (int(number[1][:10]) if number else 0) if port else -1)
                )
        return cls(exclude, exact, tuple(entries))

    def selects(self, name: str, port: int = -1) -> bool:
        """Whether NCCL uses the interface or HCA ``name`` (``port`` -1: any) under this list."""
        if not self.entries:
            return not self.exclude  # matchIfList: an empty list matches everything, XOR searchNot
        hit = any(
            (name == ref if self.exact else name.startswith(ref)) and (port == -1 or p == -1 or p == port)
            for ref, p in self.entries
        )
        return hit != self.exclude


def _name_list(name: str, value: str, expect: str | None) -> list[Finding]:
    """NCCL_SOCKET_IFNAME / NCCL_IB_HCA: ``[^][=]name[:port],...``."""
    text = value.strip()
    exclude = text.startswith("^")
    body = text[1:] if exclude else text
    exact = body.startswith("=")
    body = body[1:] if exact else body
    if text.startswith("=^"):
        return [
            Finding(
                "error",
                name,
                f"{name}={value}: NCCL reads '^' (exclude) before '=' (exact), so this names an interface called "
                f"'^...' that does not exist; write {name}=^={text[2:]}",
            )
        ]
    entries = body.split(",")
    if not body or any(not e.strip() for e in entries):
        return [Finding("error", name, f"{name}={value!r} has an empty entry; list names separated by commas")]
    out = []
    if name == "NCCL_IB_HCA" and not exact:
        devices = [e.split(":")[0] for e in entries if re.search(r"_\d+$", e.split(":")[0])]  # mlx5_1, not mlx5
        if devices and not exclude:
            first = devices[0]
            out.append(
                Finding(
                    "warning",
                    name,
                    f"{name}={value}: without '=' each entry is a prefix, so {first} also selects {first}0 to "
                    f"{first}9 where they exist; write {name}={'^' if exclude else ''}={body} for exactly these HCAs",
                )
            )
        families = [e.split(":")[0] for e in entries if not re.search(r"_\d+$", e.split(":")[0])]
        if exclude and expect == "IB" and families:
            out.append(
                Finding(
                    "warning",
                    name,
                    f"{name}={value} excludes every HCA whose name starts with {', '.join(families)}: if that is "
                    "every RDMA device of the node, NCCL finds none and silently uses TCP sockets; name the HCAs to "
                    "use instead",
                )
            )
    return out


def _gid(values: Mapping[str, str | None], version: NcclVersion | None) -> list[Finding]:
    out = []
    pinned = values.get("NCCL_IB_GID_INDEX")
    if pinned is not None and pinned.strip() != "-1":
        try:
            int(pinned.strip())
        except ValueError:
            return [Finding("error", "NCCL_IB_GID_INDEX", f"NCCL_IB_GID_INDEX={pinned!r} is not an integer")]
        if version is not None and version >= DYNAMIC_GID:
            out.append(
                Finding(
                    "warning",
                    "NCCL_IB_GID_INDEX",
                    f"NCCL_IB_GID_INDEX={pinned} pins a GID table index, but NCCL {version} (2.21+) picks the "
                    "RoCE v2 GID of the interface's IPv4 address itself when it is unset, and an index is not "
                    "portable: it shifts when a node's NIC gets another address or VLAN. Remove it; steer the "
                    "choice with NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE or NCCL_IB_ROCE_VERSION_NUM if needed",
                )
            )
    for name in GID_SELECTORS:
        if name not in values:
            continue
        if version is not None and version < DYNAMIC_GID:
            out.append(Finding("warning", name, f"{name} is read from NCCL 2.21 on; NCCL {version} ignores it"))
        elif pinned is not None and pinned.strip() != "-1":
            out.append(Finding("warning", name, f"{name} only steers the dynamic choice: NCCL_IB_GID_INDEX wins"))
        value = values[name]
        if value is not None:
            out += _gid_value(name, value.strip())
    family, cidr = values.get("NCCL_IB_ADDR_FAMILY"), values.get("NCCL_IB_ADDR_RANGE")
    if family and cidr and _network(cidr) is not None:
        wanted = "AF_INET6" if _network(cidr).version == 6 else "AF_INET"  # type: ignore[union-attr]
        if family.strip() != wanted:
            out.append(
                Finding("error", "NCCL_IB_ADDR_RANGE", f"NCCL_IB_ADDR_RANGE={cidr} is not in {family}: use {wanted}")
            )
    return out


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip()[:64], strict=False)
    except ValueError:
        return None


def _gid_value(name: str, value: str) -> list[Finding]:
    if name == "NCCL_IB_ADDR_FAMILY" and value not in ("AF_INET", "AF_INET6"):
        return [Finding("error", name, f"{name}={value!r}: NCCL takes AF_INET (the default) or AF_INET6")]
    if name == "NCCL_IB_ADDR_RANGE" and _network(value) is None:
        return [Finding("error", name, f"{name}={value!r} is not a network in CIDR form (like 10.0.0.0/8)")]
    if name == "NCCL_IB_ROCE_VERSION_NUM" and value not in ("1", "2"):
        return [Finding("error", name, f"{name}={value!r}: RoCE versions are 1 and 2 (the default)")]
    return []


def _net_plugin(value: str | None, version: NcclVersion | None) -> list[Finding]:
    if value is None or version is None:
        return []
    name = "NCCL_NET_PLUGIN"
    entries = [e.strip() for e in value.split(",")]
    if len(entries) > 1 and version < NET_PLUGIN_LIST:
        return [
            Finding(
                "error",
                name,
                f"{name}={value}: NCCL {version} takes one plugin (lists came in 2.27.3) and would look for a "
                f"library named after the whole value; name one plugin",
            )
        ]
    if not all(entries):
        return [Finding("error", name, f"{name}={value!r} has an empty entry")]
    lowered = [e.lower() for e in entries]
    if "none" in lowered and len(entries) > 1:
        return [Finding("error", name, f"{name}={value}: 'none' means no plugin at all and must stand alone")]
    if lowered == ["none"] and version < NET_PLUGIN_NONE:
        return [
            Finding(
                "warning",
                name,
                f"{name}=none is understood from NCCL 2.28.3; NCCL {version} looks for a plugin library named "
                "'none', finds none and goes on with its internal IB and socket transports (the same result)",
            )
        ]
    if len(set(lowered)) < len(lowered):
        return [Finding("warning", name, f"{name}={value} names a plugin twice")]
    return []


# UCX's transports that run over RDMA: rc/dc/ud and their variants (ucx-py's README pairs
# UCX_TLS=rc,... with InfiniBand and tcp with TCP); the HPC-X NCCL plugin routes NCCL through UCX
# when NCCL_PLUGIN_P2P=ucx|ucx_uct|ucx_uct_read (docs.nvidia.com/networking/display/hpcxv2211/NCCL-RDMA-SHARP+Plugins).
_UCX_RDMA = re.compile(r"^(?:rc|dc|ud|ib|all)")


def _rdma_off(values: Mapping[str, str | None]) -> list[Finding]:
    out = []
    if (values.get("NCCL_IB_DISABLE") or "").strip() == "1":
        out.append(
            Finding(
                "error", "NCCL_IB_DISABLE", "NCCL_IB_DISABLE=1 turns RDMA off on a fabric that promises IB; remove it"
            )
        )
    net = (values.get("NCCL_NET") or "").strip()
    if net and net.lower() == "socket":
        out.append(Finding("error", "NCCL_NET", "NCCL_NET=Socket forces TCP on a fabric that promises IB"))
    gdr = (values.get("NCCL_NET_GDR_LEVEL") or "").strip()
    if gdr.upper() == "LOC" or level_name(gdr) == "LOC":
        out.append(
            Finding(
                "warning",
                "NCCL_NET_GDR_LEVEL",
                f"NCCL_NET_GDR_LEVEL={gdr} never uses GPUDirect RDMA: every transfer is staged through host memory",
            )
        )
    tls = values.get("UCX_TLS")
    if tls is not None and not tls.strip().startswith("^"):
        transports = [t.strip().lower() for t in tls.split(",") if t.strip()]
        if transports and not any(_UCX_RDMA.match(t) for t in transports):
            p2p = (values.get("NCCL_PLUGIN_P2P") or "").strip().lower()
            through_ucx = p2p.startswith("ucx") or net.lower().startswith("ucx")
            out.append(
                Finding(
                    "error" if through_ucx else "warning",
                    "UCX_TLS",
                    f"UCX_TLS={tls} leaves UCX no RDMA transport (rc, dc, ud): "
                    + (
                        f"NCCL goes through UCX here (NCCL_PLUGIN_P2P/NCCL_NET={p2p or net}), so it runs over TCP"
                        if through_ucx
                        else "anything using UCX (NCCL's UCX plugin, UCC) runs over TCP"
                    ),
                )
            )
    return out


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]

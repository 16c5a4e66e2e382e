"""Start-up checks: is what the webhook injected really live in this container?

Each check reads the pod's env (the TRAINYARD_* and NCCL_* variables the webhook injects) and
the container's real state (mounts, interfaces, capabilities, limits, devices). Standard library
only, so it runs before torch is imported (``trainyard launch`` runs it first).

Statuses: pass, warn (works, but worth knowing), skip (nothing to check), fail (a check failed:
exit 1), error (the configuration itself is unusable: exit 2).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import resource
from collections.abc import Mapping
from pathlib import Path

from trainer.interfaces import IfnameSpecError, list_interfaces, matching, parse_ifname
from trainyard.contract.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from trainyard.contract.names import (
    ENV_EXPECT_TRANSPORT,
    ENV_FABRIC,
    ENV_SHM_BYTES,
    ENV_SHM_PATH,
    NETWORKS_ANNOTATION,
    OPT_OUT_ANNOTATION,
    SHM_PATH,
    TRANSPORTS,
)
from trainyard.contract.nccl import SOCKET_IFNAME, TRAINER_NCCL, NcclVersion, lint_env
from trainyard.contract.reports import CheckResult as Check
from trainyard.contract.reports import preflight_json

CAP_IPC_LOCK = 14
GPU_DEVICE = re.compile(r"^nvidia(\d+)$")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------------------------


def check_webhook(env: Mapping[str, str]) -> Check:
    fabric = env.get(ENV_FABRIC)
    if not fabric:
        return Check(
            "webhook",
            "warn",
            f"{ENV_FABRIC} is not set: the pod was not mutated by the trainyard webhook, so the checks "
            "that need its settings are skipped",
            f'run the job in a namespace the webhook serves, without the {OPT_OUT_ANNOTATION}: "false" annotation',
        )
    transport = env.get(ENV_EXPECT_TRANSPORT) or "?"
    return Check("webhook", "pass", f"fabric profile {fabric!r}, expected NCCL transport {transport}")


def expected_transport(env: Mapping[str, str]) -> str | None:
    value = (env.get(ENV_EXPECT_TRANSPORT) or "").strip()
    return value or None


def installed_nccl() -> NcclVersion | None:
    """The NCCL of torch's nvidia-nccl wheel, from its metadata (torch is not imported)."""
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            return NcclVersion.parse(importlib.metadata.version(dist))
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
    return None


def check_nccl_env(env: Mapping[str, str]) -> Check:
    expect = expected_transport(env)
    if expect is not None and expect not in TRANSPORTS:
        return Check(
            "nccl-env",
            "error",
            f"{ENV_EXPECT_TRANSPORT}={expect!r} is not a transport trainyard knows",
            f"set {ENV_EXPECT_TRANSPORT} to one of {', '.join(TRANSPORTS)} (the fabric profile's spec.transport)",
        )
    nccl = {k: v for k, v in env.items() if k.startswith(("NCCL_", "TORCH_NCCL_")) or k == "UCX_TLS"}
    version = installed_nccl() or TRAINER_NCCL
    findings = lint_env(nccl, expect_transport=expect, nccl_version=version)
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity == "warning"]
    if errors:
        return Check(
            "nccl-env",
            "fail",
            "; ".join(f.message for f in errors + warnings),
            "change the container's env (or the job manifest) as each message says",
        )
    if warnings:
        return Check("nccl-env", "warn", "; ".join(f.message for f in warnings))
    return Check("nccl-env", "pass", f"{len(nccl)} NCCL variable(s), none known to be wrong for NCCL {version}")


def _mount_of(path: Path) -> tuple[str, str] | None:
    """(mount point, filesystem type) of the mount that holds ``path``, from /proc/self/mountinfo."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    target = str(path.resolve())
    best: tuple[str, str] | None = None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount_point = fields[4].replace("\\040", " ")
        fstype = right.split()[0]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= len(best[0])):
            best = (mount_point, fstype)
    return best


def check_shm(env: Mapping[str, str], shm_path: str) -> Check:
    raw = (env.get(ENV_SHM_BYTES) or "").strip()
    required: int | None = None
    if raw:
        try:
            required = int(raw)
            if required < 0:
                raise ValueError
        except ValueError:
            return Check(
                "shm",
                "error",
                f"{ENV_SHM_BYTES}={raw!r} is not a whole number of bytes",
                f"{ENV_SHM_BYTES} is set by the webhook from the /dev/shm emptyDir size; remove the hand-written value",
            )
    path = Path(shm_path)
    if not path.is_dir():
        return Check(
            "shm",
            "fail",
            f"{shm_path} does not exist",
            "mount a memory-backed emptyDir at /dev/shm (emptyDir.medium: Memory)",
        )
    st = os.statvfs(path)
    size = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    mount = _mount_of(path)
    where = (
        f"{shm_path} ({mount[1]}" + (f" at {mount[0]})" if mount and mount[0] != shm_path else ")")
        if mount
        else shm_path
    )
    if required is None:
        return Check("shm", "skip", f"{where}: {_bytes(size)}; {ENV_SHM_BYTES} is not set, so no size is required")
    detail = f"{where}: {_bytes(size)} ({_bytes(free)} free), required {_bytes(required)}"
    if size < required:
        return Check(
            "shm",
            "fail",
            detail,
            f"mount a memory-backed emptyDir of at least {_bytes(required)} at /dev/shm "
            "(the webhook adds one unless the pod already mounts something there: remove the pod's own /dev/shm "
            "volume or make it larger); NCCL's shared-memory transport fails with 'failed to extend /dev/shm'",
        )
    if mount and mount[1] != "tmpfs":
        return Check(
            "shm",
            "warn",
            detail + f"; it is {mount[1]}, not memory-backed",
            "use emptyDir.medium: Memory for /dev/shm so shared-memory segments live in RAM",
        )
    return Check("shm", "pass", detail)


def check_interface(env: Mapping[str, str]) -> Check:
    value = env.get(SOCKET_IFNAME)
    if value is None:
        if env.get(ENV_FABRIC):
            return Check(
                "interface",
                "fail",
                "NCCL_SOCKET_IFNAME is not set although the webhook mutated this pod",
                "the webhook always injects NCCL_SOCKET_IFNAME; check that the container runs the trainer image "
                "listed in the fabric profile's trainerImages",
            )
        return Check("interface", "skip", "NCCL_SOCKET_IFNAME is not set; NCCL and gloo choose an interface themselves")
    try:
        spec = parse_ifname(value)
    except IfnameSpecError as exc:
        return Check("interface", "error", str(exc), "set NCCL_SOCKET_IFNAME to the fabric interface, e.g. net1")
    interfaces = list_interfaces()
    found = matching(spec, interfaces)
    present = ", ".join(sorted(interfaces)) or "none"
    if not found:
        return Check(
            "interface",
            "fail",
            f"NCCL_SOCKET_IFNAME={value}: no interface matches ({spec.describe()}); present: {present}",
            f"the pod has no fabric interface: check its {NETWORKS_ANNOTATION} annotation, that the "
            "NetworkAttachmentDefinition exists in the pod's namespace, and the network-status annotation "
            "Multus wrote (kubectl describe pod)",
        )
    usable = [i for i in found if i.up and i.running and i.addresses]
    if usable:
        desc = "; ".join(f"{i.name} up, {', '.join(i.addresses)}" for i in usable)
        return Check("interface", "pass", f"NCCL_SOCKET_IFNAME={value}: {desc}")
    problems = []
    for i in found:
        if not i.up:
            problems.append(f"{i.name} is down")
        elif not i.running:
            problems.append(f"{i.name} is up but has no carrier")
        elif not i.addresses:
            local = " (only a link-local IPv6 address)" if i.ipv6 else ""
            problems.append(f"{i.name} has no IP address{local}")
    return Check(
        "interface",
        "fail",
        f"NCCL_SOCKET_IFNAME={value}: " + "; ".join(problems),
        "the CNI plugin of the fabric network did not finish configuring the interface: check the "
        "NetworkAttachmentDefinition's IPAM (whereabouts range, free addresses) and the node's CNI logs",
    )


def _caps(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        return None
    return None


def _memlock() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return soft


def check_ipc_lock(env: Mapping[str, str]) -> list[Check]:
    if expected_transport(env) != "IB":
        why = "the fabric does not use RDMA" if expected_transport(env) else f"{ENV_EXPECT_TRANSPORT} is not set"
        return [Check("ipc-lock", "skip", why), Check("memlock", "skip", why)]
    eff = _caps("CapEff")
    bnd = _caps("CapBnd")
    has = eff is not None and bool(eff >> CAP_IPC_LOCK & 1)
    in_bounding = bnd is not None and bool(bnd >> CAP_IPC_LOCK & 1)
    memlock = _memlock()
    unlimited = memlock == resource.RLIM_INFINITY
    limit = "unlimited" if unlimited else _bytes(memlock)
    checks = []
    if has:
        checks.append(Check("ipc-lock", "pass", "CAP_IPC_LOCK is in the effective capability set"))
    else:
        uid = os.getuid()
        why = (
            f"it is in the bounding set, but the process runs as uid {uid} and Kubernetes grants added "
            "capabilities to non-root users only in the bounding set"
            if in_bounding and uid != 0
            else "the container does not add it"
        )
        checks.append(
            Check(
                "ipc-lock",
                "warn" if unlimited else "fail",
                f"CAP_IPC_LOCK is not effective: {why}"
                + ("; memlock is unlimited, which is enough" if unlimited else ""),
                None
                if unlimited
                else "add IPC_LOCK to securityContext.capabilities.add (the webhook does) and run as root, "
                "or give the container an unlimited memlock limit",
            )
        )
    if unlimited or has:
        note = "" if unlimited else " (CAP_IPC_LOCK lifts the limit)"
        checks.append(Check("memlock", "pass", f"memlock limit {limit}{note}"))
    else:
        checks.append(
            Check(
                "memlock",
                "fail",
                f"memlock limit is {limit}: RDMA memory registration (ibv_reg_mr) will fail",
                "make CAP_IPC_LOCK effective or set the memlock limit to unlimited for the container runtime "
                "(LimitMEMLOCK=infinity for containerd, or a default ulimit)",
            )
        )
    return checks


def visible_gpus(env: Mapping[str, str], dev: Path = Path("/dev")) -> int:
    try:
        nodes = [p.name for p in dev.iterdir() if GPU_DEVICE.match(p.name)]
    except OSError:
        nodes = []
    count = len(nodes)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        listed = [d for d in cvd.split(",") if d.strip() and d.strip() != "-1"]
        count = min(count, len(listed))
    return count


def requested_gpus(env: Mapping[str, str]) -> int | None:
    """GPUs allocated to the container: the device plugin lists them in NVIDIA_VISIBLE_DEVICES."""
    value = (env.get("NVIDIA_VISIBLE_DEVICES") or "").strip()
    if not value or value in ("void", "none", "all"):
        return None
    return len([d for d in value.split(",") if d.strip()])


def check_gpus(env: Mapping[str, str], expect: int | None) -> Check:
    if expect is not None and expect < 0:
        return Check("gpus", "error", f"{expect} GPU(s) requested", "request 0 or more GPUs (--gpus N)")
    visible = visible_gpus(env)
    requested = expect if expect is not None else requested_gpus(env)
    nproc = (env.get("PET_NPROC_PER_NODE") or "").strip()
    if requested is None:
        if (env.get("NVIDIA_VISIBLE_DEVICES") or "").strip() == "all" and visible == 0:
            return Check(
                "gpus",
                "fail",
                "NVIDIA_VISIBLE_DEVICES=all but no /dev/nvidiaN device is present",
                "run on a GPU node with the NVIDIA container toolkit",
            )
        if requested is None and not visible:
            return Check("gpus", "skip", "no GPU requested (NVIDIA_VISIBLE_DEVICES unset) and none visible")
        requested = visible
    if visible < requested:
        return Check(
            "gpus",
            "fail",
            f"{requested} GPU(s) requested, {visible} visible (/dev/nvidiaN)",
            "the NVIDIA device plugin allocated GPUs the container cannot see: check the NVIDIA container "
            "runtime on the node (runtimeClassName) and CUDA_VISIBLE_DEVICES",
        )
    if nproc.isdigit() and int(nproc) > visible:
        return Check(
            "gpus",
            "fail",
            f"PET_NPROC_PER_NODE={nproc} processes but {visible} GPU(s) visible",
            "set the job's nprocPerNode to the GPUs per pod (the nvidia.com/gpu limit)",
        )
    return Check("gpus", "pass", f"{visible} GPU(s) visible, {requested} requested")


def run_checks(
    env: Mapping[str, str] | None = None, shm_path: str | None = None, gpus: int | None = None
) -> list[Check]:
    env = os.environ if env is None else env
    shm = shm_path or env.get(ENV_SHM_PATH) or SHM_PATH
    return [
        check_webhook(env),
        check_nccl_env(env),
        check_shm(env, shm),
        check_interface(env),
        *check_ipc_lock(env),
        check_gpus(env, gpus),
    ]


def exit_code(checks: list[Check]) -> int:
    if any(c.status == "error" for c in checks):
        return EXIT_USAGE
    if any(c.status == "fail" for c in checks):
        return EXIT_CHECK_FAILED
    return EXIT_OK


def render(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{'CHECK':<{width}}  STATUS  DETAIL"]
    for c in checks:
        lines.append(f"{c.name:<{width}}  {c.status.upper():<6}  {c.detail}")
        if c.fix and c.status in ("fail", "error", "warn"):
            lines.append(f"{'':<{width}}  {'':<6}  fix: {c.fix}")
    code = exit_code(checks)
    failed = [c.name for c in checks if c.status in ("fail", "error")]
    lines.append("")
    lines.append("preflight passed" if code == 0 else f"preflight FAILED: {', '.join(failed)}")
    return "\n".join(lines)


def to_json(checks: list[Check]) -> dict:
    """The ``--json`` document (trainyard.contract.reports: the demo and other tools read it back)."""
    return preflight_json(checks, exit_code(checks))

"""Parse NCCL_DEBUG=INFO logs: which transport NCCL really chose, and why.

NCCL prefixes its lines with ``host:pid:tid [cudaDev]``; a pod's log interleaves the lines of
every local rank, and an operator may collect several pods into one file, so everything is kept
per process (host, pid). ``trainyard nccl-report`` prints the result; the train loop calls
:func:`verify_own_log` on its own NCCL_DEBUG_FILE after the first collective.

Standard library only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

PREFIX = re.compile(
    r"(?P<host>[A-Za-z0-9][\w.\-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]]*)\] "
    r"(?:(?P<src>[\w./\-]+\.(?:cc|c|h|cu):\d+) )?NCCL (?P<level>INFO|WARN|ABORT|TRACE) ?(?P<msg>.*)$"
)
VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
BARE_VERSION = re.compile(r"^\s*NCCL version (?P<version>\d+\.\d+\.\d+\S*)\s*$")
NET_IB_USING = re.compile(r"NET/(?P<plugin>IB\w*) ?: ?Using (?P<devs>.*?)\s*;\s*OOB (?P<oob>\S+?)(?:<\d+>)?\s*$")
IB_DEVICE = re.compile(r"\[(?P<idx>\d+)\](?P<name>[\w.\-]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
NET_IB_NONE = re.compile(r"NET/IB\w* ?: ?No device found")
NET_SOCKET_USING = re.compile(r"NET/Socket ?: ?Using (?P<devs>.*)$")
SOCKET_DEVICE = re.compile(r"\[(?P<idx>\d+)\](?P<name>[\w.\-@]+?):(?P<addr>\S+?)<\d+>")
BOOTSTRAP = re.compile(r"Bootstrap ?: ?Using (?P<name>[\w.\-@]+?):(?P<addr>\S+?)<\d+>")
USING_NETWORK = re.compile(r"Using network (?P<net>[\w ]+?)\s*$")
COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?P<rest>.*?) - Init (?P<phase>START|COMPLETE)"
)
BUSID = re.compile(r"busId (?P<busid>[0-9a-fA-F]+)")
NNODES = re.compile(r"nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+)")
CHANNEL = re.compile(r"Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\](?: \[(?:send|receive)\])? via (?P<path>.+?)\s*$")
GDR_HCA = re.compile(
    r"GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<idx>\d+) '(?P<name>[^']+)'(?: \((?P<why>[^)]*)\))?"
)

Transport = str  # "IB", "Socket", or the name of a network plugin

# Known warnings: (pattern, what it means and what to do).
EXPLANATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"failed to extend (?P<path>/dev/shm/\S+) to (?P<size>\d+) bytes"),
        "/dev/shm is too small: NCCL's shared-memory transport (and its proxy) could not grow a segment. "
        "A container gets 64 MiB of /dev/shm by default; mount a memory-backed emptyDir at /dev/shm "
        "(the trainyard webhook does, sized by the fabric profile) and check it with `trainyard preflight`; "
        "NCCL_SHM_DISABLE=1 only hides the problem at a cost in speed.",
    ),
    (
        re.compile(r"Error while creating shared memory segment"),
        "a shared-memory segment under /dev/shm could not be created: /dev/shm is full or too small "
        "(see 'failed to extend'); give the pod a memory-backed /dev/shm of the profile's size.",
    ),
    (
        re.compile(r"ibv_reg_mr"),
        "RDMA memory registration failed: the process may not pin (lock) enough memory. The container needs "
        "the IPC_LOCK capability in effect or an unlimited memlock limit (ulimit -l); run `trainyard preflight` "
        "in the pod, and check that rdma/... resources were granted.",
    ),
    (
        re.compile(r"ibv_(?:create_qp|modify_qp|open_device|alloc_pd|create_cq)"),
        "an RDMA verbs call failed: the RDMA device is not usable from this container (missing rdma/... resource, "
        "wrong NCCL_IB_HCA, or for RoCE a wrong NCCL_IB_GID_INDEX).",
    ),
    (
        re.compile(r"Got async event"),
        "the RDMA device reported an asynchronous event (port error, link down, GID change): a fabric link "
        "flapped or a cable/switch port is faulty; check the node's HCA ports (ibstat) and the switch.",
    ),
    (
        re.compile(r"no socket interface found|No usable listening interface|Bootstrap : no socket interface", re.I),
        "no network interface matches NCCL_SOCKET_IFNAME: the fabric interface (net1) is missing or down; "
        "check the pod's Multus network attachment and run `trainyard preflight`.",
    ),
    (
        re.compile(r"Connect to \S+ failed|Connection refused|Connection closed by remote peer|Connection reset", re.I),
        "a TCP connection between ranks failed: another rank died (see its log) or the interface NCCL uses "
        "cannot reach the peer (NCCL_SOCKET_IFNAME must name an interface routed between the pods).",
    ),
    (
        re.compile(r"Cuda failure|CUDA error", re.I),
        "a CUDA call failed inside NCCL; the message names the error (often out of memory or a lost GPU).",
    ),
)
NO_IB_DEVICE = (
    "NCCL found no RDMA device: the container sees no /dev/infiniband device or no HCA matches NCCL_IB_HCA, "
    "so NCCL used TCP sockets. Check that the pod requests the fabric's rdma/... resource (the webhook adds it "
    "for GPU containers), that the RDMA device plugin runs on the node, and the NCCL_IB_HCA value."
)


@dataclass(slots=True)
class Comm:
    comm: str
    rank: int
    nranks: int
    cuda_dev: int
    bus_id: str | None
    complete: bool = False


@dataclass(slots=True)
class NcclWarning:
    message: str
    source: str | None
    explanation: str | None


@dataclass(slots=True)
class ProcessLog:
    """What the log says about one process (one host:pid)."""

    host: str
    pid: int
    files: list[str] = field(default_factory=list)
    version: str | None = None
    network: str | None = None  # from "Using network X"
    ib_plugin: str | None = None
    ib_devices: list[dict[str, str]] = field(default_factory=list)
    ib_no_device: bool = False
    oob: str | None = None
    socket_devices: list[dict[str, str]] = field(default_factory=list)
    bootstrap: str | None = None
    comms: list[Comm] = field(default_factory=list)
    nnodes: int | None = None
    paths: Counter[str] = field(default_factory=Counter)
    gdr_hcas: dict[str, str] = field(default_factory=dict)  # HCA -> "enabled" or "disabled (reason)"
    warnings: list[NcclWarning] = field(default_factory=list)

    @property
    def transport(self) -> Transport | None:
        """The network NCCL chose for this process, or None if the log does not say."""
        if self.network:
            return "IB" if self.network.startswith("IB") else self.network
        nets = {p.split("/")[1] for p in self.paths if p.startswith("NET/")}
        if any(n.startswith("IB") for n in nets):
            return "IB"
        if "Socket" in nets:
            return "Socket"
        if self.ib_no_device and self.socket_devices:
            return "Socket"
        return None

    @property
    def link_layer(self) -> str | None:
        """'RoCE' or 'IB' when NCCL uses its IB transport, from the device list."""
        links = {d["link"] for d in self.ib_devices}
        if self.transport != "IB" or not links:
            return None
        return "RoCE" if links == {"RoCE"} else "IB" if links == {"IB"} else "IB+RoCE"

    @property
    def gdr(self) -> bool | None:
        """True when some channel runs GPUDirect RDMA, False when NET/IB channels exist without it."""
        ib_paths = [p for p in self.paths if p.startswith("NET/IB")]
        if not ib_paths:
            return None
        return any(p.endswith("/GDRDMA") for p in ib_paths)

    @property
    def intra_node(self) -> list[str]:
        return sorted({"/".join(p.split("/")[:2]) for p in self.paths if not p.startswith("NET/")})

    @property
    def ranks(self) -> list[int]:
        return sorted({c.rank for c in self.comms})

    @property
    def nranks(self) -> int | None:
        return max((c.nranks for c in self.comms), default=None)

    @property
    def init_complete(self) -> bool:
        return bool(self.comms) and all(c.complete for c in self.comms)

    @property
    def label(self) -> str:
        ranks = self.ranks
        who = f"rank {','.join(map(str, ranks))}" if ranks else "rank ?"
        return f"{self.host}:{self.pid} ({who})"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["paths"] = dict(self.paths)
        data.update(
            transport=self.transport,
            link_layer=self.link_layer,
            gdr=self.gdr,
            intra_node=self.intra_node,
            ranks=self.ranks,
            nranks=self.nranks,
            init_complete=self.init_complete,
        )
        return data


@dataclass(slots=True)
class Report:
    processes: list[ProcessLog]
    files: list[str]

    def transports(self) -> Counter[str]:
        return Counter(p.transport or "unknown" for p in self.processes)


def _path_key(path: str) -> str:
    """Normalise a channel path: NET/IB/0/GDRDMA -> NET/IB/GDRDMA, P2P/IPC/read -> P2P/IPC/read."""
    parts = path.split("/")
    if parts[0] == "NET" and len(parts) >= 3:
        net = parts[1]
        return f"NET/{net}/GDRDMA" if "GDRDMA" in parts[3:] else f"NET/{net}"
    return path


def explain(message: str) -> str | None:
    for pattern, text in EXPLANATIONS:
        if pattern.search(message):
            return text
    return None


def parse_lines(
    lines: Iterable[str], source: str = "<log>", into: dict | None = None
) -> dict[tuple[str, int], ProcessLog]:
    procs: dict[tuple[str, int], ProcessLog] = {} if into is None else into
    bare_versions: list[str] = []
    seen: list[ProcessLog] = []
    for raw in lines:
        line = raw.rstrip("\n")
        m = PREFIX.search(line)
        if not m:
            v = BARE_VERSION.search(line)
            if v:
                bare_versions.append(v.group("version"))
            continue
        key = (m.group("host"), int(m.group("pid")))
        proc = procs.get(key)
        if proc is None:
            proc = procs[key] = ProcessLog(host=key[0], pid=key[1])
        if source not in proc.files:
            proc.files.append(source)
            seen.append(proc)
        msg = m.group("msg")
        if m.group("level") in ("WARN", "ABORT"):
            proc.warnings.append(NcclWarning(message=msg.strip(), source=m.group("src"), explanation=explain(msg)))
            continue
        if (v := VERSION.search(msg)) is not None:
            proc.version = v.group("version")
        elif (u := NET_IB_USING.search(msg)) is not None:
            proc.ib_plugin = u.group("plugin")
            proc.ib_devices = [
                {"name": d.group("name"), "port": d.group("port"), "link": d.group("link")}
                for d in IB_DEVICE.finditer(u.group("devs"))
            ]
            proc.oob = u.group("oob")
        elif NET_IB_NONE.search(msg):
            proc.ib_no_device = True
        elif (s := NET_SOCKET_USING.search(msg)) is not None:
            proc.socket_devices = [
                {"name": d.group("name"), "address": d.group("addr")} for d in SOCKET_DEVICE.finditer(s.group("devs"))
            ]
        elif (b := BOOTSTRAP.search(msg)) is not None:
            proc.bootstrap = f"{b.group('name')}:{b.group('addr')}"
        elif (n := USING_NETWORK.search(msg)) is not None:
            proc.network = n.group("net").strip()
        elif (c := COMM.search(msg)) is not None:
            _comm(proc, c)
        elif (ch := CHANNEL.search(msg)) is not None:
            proc.paths[_path_key(ch.group("path"))] += 1
        elif (g := GDR_HCA.search(msg)) is not None:
            state = g.group("state").lower()
            proc.gdr_hcas[g.group("name")] = f"{state} ({g.group('why')})" if g.group("why") else state
        elif (nn := NNODES.search(msg)) is not None:
            proc.nnodes = int(nn.group("nnodes"))
    # NCCL prints the version bare on stdout ("NCCL version 2.21.5+cuda12.4") when it logs there.
    if bare_versions:
        for proc in seen:
            proc.version = proc.version or bare_versions[0]
    return procs


def _comm(proc: ProcessLog, c: re.Match[str]) -> None:
    busid = BUSID.search(c.group("rest"))
    for existing in proc.comms:
        if existing.comm == c.group("comm") and existing.rank == int(c.group("rank")):
            existing.complete = existing.complete or c.group("phase") == "COMPLETE"
            return
    proc.comms.append(
        Comm(
            comm=c.group("comm"),
            rank=int(c.group("rank")),
            nranks=int(c.group("nranks")),
            cuda_dev=int(c.group("dev")),
            bus_id=busid.group("busid") if busid else None,
            complete=c.group("phase") == "COMPLETE",
        )
    )


def parse_files(paths: Iterable[str | Path]) -> Report:
    procs: dict[tuple[str, int], ProcessLog] = {}
    files = []
    for path in paths:
        p = Path(path)
        files.append(str(p))
        with p.open(encoding="utf-8", errors="replace") as fh:
            parse_lines(fh, source=str(p), into=procs)
    ordered = sorted(procs.values(), key=lambda pr: (min(pr.ranks) if pr.ranks else 1 << 30, pr.host, pr.pid))
    return Report(processes=ordered, files=files)


# ---------------------------------------------------------------------------------------------
# Expectations


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Literal["ok", "warning", "error"]
    message: str


def _why_not_ib(proc: ProcessLog) -> str:
    reasons = []
    if proc.ib_no_device:
        reasons.append("'NET/IB : No device found.': " + NO_IB_DEVICE)
    for w in proc.warnings:
        if w.explanation and ("ibv_" in w.message or "IB" in w.message):
            reasons.append(f"'{w.message}': {w.explanation}")
    if not reasons:
        reasons.append(
            "the log gives no reason; check NCCL_IB_DISABLE and NCCL_NET in the pod's env and that the pod "
            "requests the fabric's rdma/... resource"
        )
    return " ".join(reasons)


def transport_verdict(proc: ProcessLog | None, expect: str | None, allow_fallback: bool = False) -> Verdict:
    """Decide whether one process's NCCL transport meets the fabric's promise.

    IB promised but sockets chosen is the costly silent fallback: an error, or a warning with
    ``allow_fallback``. Other mismatches are warnings; an unreadable log is a warning too.
    """
    if expect is None:
        return Verdict("ok", "no transport expectation (TRAINYARD_EXPECT_TRANSPORT is unset)")
    if proc is None:
        return Verdict(
            "warning",
            "could not verify the NCCL transport: the NCCL log has no lines from this process; "
            "NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS including INIT,NET are needed",
        )
    actual = proc.transport
    if actual is None:
        return Verdict(
            "warning",
            f"could not tell which transport NCCL chose for {proc.label}: no 'Using network' or channel line; "
            "set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET",
        )
    if actual == expect:
        extra = f" ({proc.link_layer})" if proc.link_layer else ""
        return Verdict("ok", f"NCCL uses {actual}{extra} as expected for {proc.label}")
    if expect == "IB" and actual == "Socket":
        devices = ", ".join(f"{d['name']}:{d['address']}" for d in proc.socket_devices) or "?"
        message = (
            f"NCCL fell back to TCP sockets (NET/Socket on {devices}) for {proc.label} although the fabric "
            f"promises IB: collectives will be several times slower. {_why_not_ib(proc)}"
        )
        if allow_fallback:
            return Verdict("warning", message + " (continuing: --allow-transport-fallback)")
        return Verdict("error", message + " Pass --allow-transport-fallback to train over sockets anyway.")
    return Verdict("warning", f"NCCL uses {actual} for {proc.label}, but the fabric promises {expect}")


def expectation_failures(report: Report, expect: str) -> list[str]:
    """What keeps ``report`` from meeting ``expect`` (empty when every process meets it)."""
    if not report.processes:
        return ["no NCCL INFO lines found; the logs must come from a run with NCCL_DEBUG=INFO"]
    failures = []
    for proc in report.processes:
        verdict = transport_verdict(proc, expect)
        if verdict.level != "ok":
            failures.append(verdict.message)
    return failures


def verify_own_log(log_path: str | Path, pid: int, expect: str | None, allow_fallback: bool) -> Verdict:
    """What the train loop calls after its first collective: this process's lines of its NCCL log."""
    path = Path(log_path)
    if not path.is_file():
        return Verdict("warning", f"could not verify the NCCL transport: {path} does not exist")
    with path.open(encoding="utf-8", errors="replace") as fh:
        procs = parse_lines(fh, source=str(path))
    mine = [p for (host, p_pid), p in procs.items() if p_pid == pid]
    return transport_verdict(mine[0] if mine else None, expect, allow_fallback)


def debug_file_for(pattern: str, hostname: str, pid: int) -> str:
    """NCCL_DEBUG_FILE with NCCL's %h (hostname) and %p (pid) expanded."""
    return pattern.replace("%h", hostname).replace("%p", str(pid))


# ---------------------------------------------------------------------------------------------
# Rendering


def render(report: Report, expect: str | None = None) -> str:
    lines: list[str] = []
    versions = sorted({p.version for p in report.processes if p.version})
    lines.append(f"NCCL log report: {len(report.processes)} process(es) in {len(report.files)} file(s)")
    if versions:
        lines.append(
            f"NCCL version: {', '.join(versions)}"
            + ("  (MIXED: every rank should run one version)" if len(versions) > 1 else "")
        )
    counts = report.transports()
    lines.append("transport: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    with_comms = [p for p in report.processes if p.comms]
    incomplete = [p.label for p in with_comms if not p.init_complete]
    lines.append(
        f"init: {len(with_comms) - len(incomplete)} of {len(with_comms)} process(es) reached Init COMPLETE"
        + (f"; not: {', '.join(incomplete)}" if incomplete else "")
    )
    warned = sum(len(p.warnings) for p in report.processes)
    if warned:
        lines.append(f"warnings: {warned} NCCL WARN line(s), explained below")
    for proc in report.processes:
        lines.append("")
        lines.append(proc.label)
        t = proc.transport or "unknown (no 'Using network' or channel line in the log)"
        if proc.link_layer:
            t += f" over {'InfiniBand' if proc.link_layer == 'IB' else proc.link_layer}"
        lines.append(
            f"  transport    {t}"
            + (f"  [network plugin {proc.network}]" if proc.network and proc.network not in ("IB", "Socket") else "")
        )
        if proc.ib_devices:
            devs = " ".join(f"{d['name']}:{d['port']}/{d['link']}" for d in proc.ib_devices)
            lines.append(f"  rdma devices {devs}; out-of-band {proc.oob}")
        if proc.ib_no_device:
            lines.append("  rdma devices none found (NET/IB : No device found.)")
        if proc.socket_devices:
            lines.append("  sockets      " + " ".join(f"{d['name']}:{d['address']}" for d in proc.socket_devices))
        if proc.bootstrap:
            lines.append(f"  bootstrap    {proc.bootstrap}")
        if proc.gdr is not None:
            if proc.gdr:
                lines.append("  GPUDirect    yes (channels via NET/IB/.../GDRDMA)")
            else:
                off = ", ".join(f"{h} {s}" for h, s in proc.gdr_hcas.items() if not s.startswith("enabled"))
                lines.append(
                    "  GPUDirect    no: RDMA goes through host memory"
                    + (f" ({off}; load nvidia-peermem or use dma-buf on the node)" if off else "")
                )
        if proc.intra_node:
            lines.append(f"  intra-node   {', '.join(proc.intra_node)}")
        if proc.comms:
            state = "Init COMPLETE" if proc.init_complete else "Init NOT complete"
            nodes = f", {proc.nnodes} node(s)" if proc.nnodes else ""
            lines.append(f"  comms        {len(proc.comms)}, nranks {proc.nranks}{nodes}, {state}")
        explained: set[str] = set()
        for w in proc.warnings:
            lines.append(f"  WARN         {w.message}" + (f"  [{w.source}]" if w.source else ""))
            if w.explanation and w.explanation not in explained:
                explained.add(w.explanation)
                lines.append(f"               -> {w.explanation}")
    if expect:
        lines.append("")
        failures = expectation_failures(report, expect)
        if failures:
            lines.append(f"expectation {expect}: NOT MET")
            lines.extend(f"  - {f}" for f in failures)
        else:
            lines.append(f"expectation {expect}: met by every process")
    return "\n".join(lines)


def to_json(report: Report, expect: str | None = None) -> dict:
    data: dict = {
        "files": report.files,
        "processes": [p.to_dict() for p in report.processes],
        "transports": dict(report.transports()),
    }
    if expect:
        failures = expectation_failures(report, expect)
        data["expect"] = {"transport": expect, "met": not failures, "failures": failures}
    return data

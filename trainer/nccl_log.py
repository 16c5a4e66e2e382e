"""Parse NCCL_DEBUG=INFO logs of every NCCL release from 2.4 to 2.30: which transport NCCL chose, and why.

NCCL writes ``host:pid:tid [cudaDev] NCCL INFO message`` (NVIDIA/nccl ``src/debug.cc``, every
tag v2.4.2-1 .. v2.30.7-1; from 2.26 WARN lines may start with a ``[%F %T] `` time stamp, and
2.30 adds ``(function)`` after a WARN's ``file:line``). The line is found by its ``NCCL INFO`` /
``NCCL WARN`` marker wherever it stands, so what launchers and people add around it does not
matter: ``kubectl logs --prefix --timestamps`` (``[pod/p/c] 2026-...Z ``), mpirun's
``[1,0]<stdout>:``, a redacted host name, a stripped ``host:pid:tid`` (then the process is known
by its GPU), or the lines of several ranks glued together. A pod's log interleaves the lines of
every local rank, and several pods may be pasted into one file, so everything is kept per process.

What changed over the releases (each format quoted from NVIDIA/nccl at the tag named):

- version: a bare ``NCCL version 2.x.y+cudaA.B`` on stdout up to 2.21, an INFO line from 2.22
  (``src/init.cc:showVersion``);
- network: ``Using internal Network IB`` (2.3), ``Using network IB|Socket|<plugin>`` (2.6+);
- ``NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:addr<0>`` (2.4-2.11), ``... /RoCE [RO]; OOB`` (2.12+),
  merged NICs ``[0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE}`` (2.20-2.23), link ``UNSPECIFIED``
  (2.24+), ``[0]mlx5_0:1:0:1/RoCE`` with rail and plane (2.30); 2.24+ prints ``No device found.``
  and then an empty ``Using ; OOB``; 2.3 listed ``NET/IB: [0] mlx5_1:1/IB`` one per line;
- connections (``src/transport/net.cc``): ``Ring 00 : 3 -> 0 [send] via NET/IB/0/GDRDMA`` (2.4),
  ``Ring 00 : 1[3d000] -> 0[1a000] ...`` (2.5-2.6), ``Channel 00 : ...`` (2.7-2.11),
  ``Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0(1)/GDRDMA(PCI)/Shared`` (2.12+); intra-node
  ``via P2P/IPC``, ``via direct shared memory`` (up to 2.12), ``via SHM/direct/direct`` (2.13+);
- ``comm 0x.. rank r nranks n cudaDev d ... - Init COMPLETE`` with a function name before it from
  2.21 and ``[Rank r]`` before ``Init START`` in 2.30; ``Bootstrap : Using`` became
  ``Bootstrap: Using`` in 2.24.

``trainyard nccl-report`` prints the result; the train loop calls :func:`verify_own_log` on its
own NCCL_DEBUG_FILE after the first collective. Standard library only; the parse is linear in the
input and a line is cut at 64 KiB.
"""

from __future__ import annotations

import io
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TextIO

MAX_LINE = 64 * 1024  # NCCL's own lines are far shorter (its buffer is a few KiB)
MAX_MESSAGE = 4096
HEAD_WINDOW = 320  # how far before a marker the host:pid:tid [dev] file:line head may start

MARKER = re.compile(r"NCCL (?P<level>INFO|WARN|ABORT|TRACE)\b ?")
# The head before a marker, matched at the end of a bounded window.
HEAD = re.compile(
    r"(?:(?P<host>[^\s:]{1,128}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) )?"
    r"\[(?P<dev>\d{1,5})\] "
    r"(?:\d+\.\d+ )?"  # TRACE lines carry a time
    r"(?:(?P<src>[\w./\-]{1,200}\.(?:cc|cpp|cu|c|h):\d{1,7})(?: \([^()]{0,200}\))? )?$"
)
VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+[^\s,;]*)")
NET_IB_USING = re.compile(r"^NET/(?P<plugin>IB\w*) ?: ?Using(?P<devs>.*?)\s*;\s*OOB (?P<oob>\S+?)(?:<\d+>)?\s*$")
NET_IB_OLD_DEVICE = re.compile(r"^NET/(?P<plugin>IB\w*) ?: ?(?P<devs>\[\d+\] ?\S+:\d+/\w+)\s*$")  # 2.3
NET_IB_SIDEBAND = re.compile(r"^NET/IB\w* ?: ?Using interface (?P<oob>\S+) for sideband")  # 2.3
IB_DEVICE = re.compile(r"\[(?P<idx>\d+)\] ?(?P<name>[\w.\-]+):(?P<port>\d+)(?::\d+)*/(?P<link>IB|RoCE|UNSPECIFIED)")
NET_IB_NONE = re.compile(r"^NET/IB\w* ?: ?No device found|^Failed to open libibverbs")
NET_SOCKET_USING = re.compile(r"^NET/Socket ?: ?Using(?P<devs>.*)$")
SOCKET_DEVICE = re.compile(r"\[(?P<idx>\d+)\](?P<name>[\w.\-@]+?):(?P<addr>\S+?)<\d+>")
BOOTSTRAP = re.compile(
    r"^(?:Bootstrap|NET) ?: ?Using (?:interface )?(?:\[\d+\])?(?P<name>[\w.\-@]+?):(?P<addr>[^\s<]+)"
)
USING_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (?P<net>[\w .\-]+?)\s*$")
COMM = re.compile(
    r"comm (?P<comm>\S+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: cudaDev (?P<dev>\d+))?(?P<rest>.*?) - Init (?P<phase>START|COMPLETE)"
)
BUSID = re.compile(r"busId (?P<busid>[0-9a-fA-F]+)")
NNODES = re.compile(r"nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) localRanks (?P<local>\d+)")
PEER = r"\d+(?:\[[0-9a-fA-F]+\])?"
CHANNEL = re.compile(
    rf"^(?:Ring|Channel) \d+(?:/\d+)? : {PEER} -> {PEER}(?: \[(?:send|receive)\])? via (?P<path>\S.*?)\s*$"
)
ENV_SET = re.compile(r"^(?P<name>NCCL_\w+) set by environment to (?P<value>.*?)\.?\s*$")
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
    pid: int | None  # None: the log lost its host:pid:tid (then ``device`` tells processes apart)
    device: int | None = None
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
    env: dict[str, str] = field(default_factory=dict)  # "NCCL_X set by environment to V"
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
        # Before 2.6 no line names the network: NCCL takes the first that finds a device, IB before
        # sockets, unless NCCL_NET (2.10+) or NCCL_IB_DISABLE says otherwise.
        if self.ib_devices and not self.ib_no_device:
            if self.env.get("NCCL_NET", "").lower() == "socket" or self.env.get("NCCL_IB_DISABLE") == "1":
                return "Socket" if self.socket_devices else None
            return "IB"
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
        where = f"{self.host}:{self.pid}" if self.pid is not None else f"(no host:pid) GPU {self.device}"
        return f"{where} ({who})"

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
    bare_versions: list[str] = field(default_factory=list)  # NCCL version lines outside INFO lines

    def transports(self) -> Counter[str]:
        return Counter(p.transport or "unknown" for p in self.processes)


def _path_key(path: str) -> str:
    """Normalise a channel path: NET/IB/0(1)/GDRDMA(PCI) -> NET/IB/GDRDMA, direct shared memory -> SHM/direct."""
    parts = path.split("/")
    if parts[0] == "NET" and len(parts) >= 3:
        net = parts[1]
        return f"NET/{net}/GDRDMA" if any(p.startswith("GDRDMA") for p in parts[3:]) else f"NET/{net}"
    if path.startswith("direct shared memory"):
        return "SHM/direct"
    return path


def explain(message: str) -> str | None:
    for pattern, text in EXPLANATIONS:
        if pattern.search(message):
            return text
    return None


def bounded_lines(fh: TextIO) -> Iterator[str]:
    """The lines of ``fh``, each cut at MAX_LINE characters (the rest of an overlong line is skipped
    without being held in memory)."""
    while line := fh.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith("\n"):
            while (rest := fh.readline(MAX_LINE)) and not rest.endswith("\n"):
                pass
        yield line


def records(line: str) -> Iterator[tuple[re.Match[str], str, str]]:
    """(head, level, message) of every NCCL line in ``line`` (several when output was glued)."""
    found = []
    for marker in MARKER.finditer(line):
        lo = max(0, marker.start() - HEAD_WINDOW)
        head = HEAD.search(line, lo, marker.start())
        if head is not None:
            found.append((head, marker))
    for i, (head, marker) in enumerate(found):
        end = found[i + 1][0].start() if i + 1 < len(found) else len(line)
        yield head, marker.group("level"), line[marker.end() : min(end, marker.end() + MAX_MESSAGE)].strip()


def parse_lines(lines: Iterable[str], source: str = "<log>", into: dict | None = None) -> dict[tuple, ProcessLog]:
    return _parse(lines, source, {} if into is None else into, [])


def _parse(lines: Iterable[str], source: str, procs: dict[tuple, ProcessLog], bare: list[str]) -> dict:
    seen: list[ProcessLog] = []
    file_versions: list[str] = []
    for raw in lines:
        line = raw[:MAX_LINE].rstrip("\r\n")
        if "NCCL" not in line:
            continue
        got = False
        for head, level, msg in records(line):
            got = True
            host, pid, dev = head.group("host") or "", head.group("pid"), int(head.group("dev"))
            key = (host, int(pid)) if pid is not None else (host, None, dev)
            proc = procs.get(key)
            if proc is None:
                proc = procs[key] = ProcessLog(host=host, pid=int(pid) if pid else None, device=None if pid else dev)
            if source not in proc.files:
                proc.files.append(source)
                seen.append(proc)
            if level in ("WARN", "ABORT"):
                proc.warnings.append(NcclWarning(message=msg, source=head.group("src"), explanation=explain(msg)))
            elif level == "INFO":
                _info(proc, msg)
        if not got and (v := VERSION.search(line)) is not None:
            file_versions.append(v.group("version"))  # bare on stdout (up to 2.21, or NCCL_DEBUG=VERSION)
    if file_versions:
        bare.extend(file_versions)
        for proc in seen:
            proc.version = proc.version or file_versions[0]
    return procs


def _info(proc: ProcessLog, msg: str) -> None:
    if (v := VERSION.match(msg)) is not None:
        proc.version = v.group("version")
    elif (u := NET_IB_USING.search(msg)) is not None:
        proc.ib_plugin = u.group("plugin")
        proc.ib_devices = [
            {"name": d.group("name"), "port": d.group("port"), "link": d.group("link")}
            for d in IB_DEVICE.finditer(u.group("devs"))
        ]
        proc.oob = u.group("oob")
    elif (o := NET_IB_OLD_DEVICE.search(msg)) is not None:
        proc.ib_plugin = o.group("plugin")
        proc.ib_devices += [
            {"name": d.group("name"), "port": d.group("port"), "link": d.group("link")}
            for d in IB_DEVICE.finditer(o.group("devs"))
        ]
    elif (sb := NET_IB_SIDEBAND.search(msg)) is not None:
        proc.oob = sb.group("oob")
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
    elif (e := ENV_SET.search(msg)) is not None:
        proc.env[e.group("name")] = e.group("value")
    elif (g := GDR_HCA.search(msg)) is not None:
        state = g.group("state").lower()
        proc.gdr_hcas[g.group("name")] = f"{state} ({g.group('why')})" if g.group("why") else state
    elif (nn := NNODES.search(msg)) is not None:
        proc.nnodes = int(nn.group("nnodes"))


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
            cuda_dev=int(c.group("dev")) if c.group("dev") else proc.device if proc.device is not None else -1,
            bus_id=busid.group("busid") if busid else None,
            complete=c.group("phase") == "COMPLETE",
        )
    )


STDIN = "-"


def _open(path: str | Path) -> TextIO:
    if str(path) == STDIN:
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    return Path(path).open(encoding="utf-8", errors="replace")


def parse_files(paths: Iterable[str | Path]) -> Report:
    """Parse log files (``-``: standard input) into one report, processes ordered by rank."""
    procs: dict[tuple, ProcessLog] = {}
    files: list[str] = []
    bare: list[str] = []
    for path in paths:
        name = "<stdin>" if str(path) == STDIN else str(path)
        files.append(name)
        with _open(path) as fh:
            _parse(bounded_lines(fh), name, procs, bare)
    ordered = sorted(
        procs.values(), key=lambda pr: (min(pr.ranks) if pr.ranks else 1 << 30, pr.host, pr.pid or -1, pr.device or -1)
    )
    return Report(processes=ordered, files=files, bare_versions=bare)


def no_lines_message(report: Report) -> str | None:
    """Why ``report`` says nothing (its input holds no NCCL line), or None when it has processes."""
    if report.processes:
        return None
    where = ", ".join(report.files)
    if report.bare_versions:
        return (
            f"{where}: only the line 'NCCL version {report.bare_versions[0]}': NCCL logged at NCCL_DEBUG=VERSION "
            "(or WARN, without warnings); run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET to see the transport"
        )
    return (
        f"{where}: no NCCL lines (lines like 'host:pid:tid [0] NCCL INFO ...'); pass the log of a run with "
        "NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET (the pod's log, or the NCCL_DEBUG_FILE files)"
    )


# ---------------------------------------------------------------------------------------------
# Expectations


@dataclass(frozen=True, slots=True)
class Verdict:
    level: Literal["ok", "warning", "error"]
    message: str


def _why_not_ib(proc: ProcessLog) -> str:
    reasons = []
    if proc.env.get("NCCL_IB_DISABLE", "").strip() == "1":
        reasons.append("NCCL_IB_DISABLE=1 is set in the process's environment: it turns the IB transport off.")
    if proc.env.get("NCCL_NET", "").strip().lower() == "socket":
        reasons.append("NCCL_NET=Socket is set in the process's environment: it forces TCP sockets.")
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


def check_own_log(
    log_path: str | Path, pid: int, expect: str | None, allow_fallback: bool
) -> tuple[Verdict, str | None]:
    """What the train loop calls after its first collective: the verdict on this process's lines of
    its NCCL log, and the transport they show (None when the log is missing or does not say)."""
    path = Path(log_path)
    if not path.is_file():
        return Verdict("warning", f"could not verify the NCCL transport: {path} does not exist"), None
    with path.open(encoding="utf-8", errors="replace") as fh:
        procs = parse_lines(fh, source=str(path))
    mine = next((p for p in procs.values() if p.pid == pid), None)
    return transport_verdict(mine, expect, allow_fallback), mine.transport if mine is not None else None


def verify_own_log(log_path: str | Path, pid: int, expect: str | None, allow_fallback: bool) -> Verdict:
    return check_own_log(log_path, pid, expect, allow_fallback)[0]


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

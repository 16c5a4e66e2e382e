"""NCCL RAS: ask a running job's NCCL which ranks are alive and how far each got, and say what it means.

RAS is on by default from NCCL 2.24 (``NCCL_RAS_ENABLE``): a thread in every NCCL process keeps
track of all communicators and answers on ``localhost:28028`` (``NCCL_RAS_ADDR``). From 2.28.7 it
answers in JSON (``ncclras -f json``; NVIDIA/nccl v2.28.7-1 ``src/ras/client_support.cc``), from
2.29 it also streams events (``ncclras -m -f json``). The user guide's troubleshooting/ras.rst
(v2.30.7-1) explains the statuses: a hung job shows up as ranks that stop answering (missing
ranks, ``unresponsive``, ``considered_dead`` after 60 s) or as collective operation counts that
differ between the ranks of a communicator and stop changing.

:func:`query` speaks the RAS client protocol as ``ncclras`` does (v2.30.7-1 ``src/ras/client.cc``:
``CLIENT PROTOCOL 2`` / ``SERVER PROTOCOL n``, ``TIMEOUT t`` / ``OK``, ``SET FORMAT json`` / ``OK``,
then ``[VERBOSE ]STATUS`` and the report until the server closes), so no ``ncclras`` binary is
needed in the image. :func:`parse` reads the JSON (a status document, or monitor events) and
:func:`diagnose` turns it into findings. Standard library only.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any

from trainyard.contract.errors import UserError

DEFAULT_ADDR = "localhost:28028"  # NCCL_RAS_ADDR's default (env.rst, since 2.24)
CLIENT_PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL in src/ras/ras_internal.h (v2.28.7-1 .. v2.30.7-1)
MAX_REPLY = 64 * 1024 * 1024


@dataclass(slots=True)
class RasReport:
    statuses: list[dict[str, Any]] = field(default_factory=list)  # ``STATUS`` documents
    events: list[dict[str, Any]] = field(default_factory=list)  # monitor-mode events


def looks_like_ras(text: str) -> bool:
    return text.lstrip().startswith("{")


def parse(text: str, where: str = "RAS output") -> RasReport:
    """The JSON objects of ``ncclras -f json`` (one status document) or ``-m -f json`` (events)."""
    decoder = json.JSONDecoder()
    report = RasReport()
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos == end:
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            raise UserError(
                f"{where}: not the JSON of `ncclras -f json` at character {pos}: {str(exc)[:120]}"
            ) from None
        if isinstance(obj, dict) and isinstance(obj.get("communicators"), list):
            report.statuses.append(obj)
        elif isinstance(obj, dict) and isinstance(obj.get("event"), str):
            report.events.append(obj)
        else:
            raise UserError(f"{where}: a JSON object that is neither a RAS status nor a RAS event")
    if not report.statuses and not report.events:
        raise UserError(f"{where}: no RAS status or event in it")
    return report


def _who(entry: dict[str, Any]) -> str:
    dev = entry.get("cuda_dev", entry.get("cuda_devs"))
    return f"process {entry.get('pid', '?')} on {entry.get('host', '?')}" + (f", GPU {dev}" if dev is not None else "")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, sorted(ranks)[:16])) + (f" (+{len(ranks) - 16} more)" if len(ranks) > 16 else "")


def diagnose_status(status: dict[str, Any]) -> list[str]:
    """Findings for one status document; empty when every communicator looks healthy."""
    findings: list[str] = []
    for comm in status.get("communicators") or []:
        if not isinstance(comm, dict):
            continue
        name = f"communicator {comm.get('hash', '?')} (size {comm.get('size', '?')})"
        for missing in comm.get("missing_ranks") or []:
            st = missing.get("status") or {}
            state = (
                "considered dead"
                if st.get("considered_dead")
                else "not answering"
                if st.get("unresponsive")
                else "missing"
            )
            findings.append(
                f"{name}: rank {missing.get('rank', '?')} ({_who(missing)}) is {state}: the process died or is stuck "
                "outside NCCL; its peers wait for it in their next collective. Look at that pod (exit status, OOM "
                "kill, node) and its last log lines"
            )
        ranks = [r for r in comm.get("ranks") or [] if isinstance(r, dict)]
        for r in ranks:
            st = r.get("status") or {}
            if st.get("async_error"):
                findings.append(
                    f"{name}: rank {r.get('rank')} ({_who(r)}) has NCCL error {st['async_error']} "
                    "(an asynchronous error: a network or peer failure); its NCCL WARN lines say which"
                )
            if st.get("abort_flag"):
                findings.append(f"{name}: rank {r.get('rank')} ({_who(r)}) aborted its communicator")
            if st.get("init_state"):
                findings.append(
                    f"{name}: rank {r.get('rank')} ({_who(r)}) failed to initialise the communicator "
                    f"(error {st['init_state']})"
                )
        ops: set[str] = set()
        for r in ranks:
            ops.update((r.get("collective_counts") or {}).keys())
        for op in sorted(ops):
            counts = {r.get("rank"): (r.get("collective_counts") or {}).get(op, 0) for r in ranks}
            top = max(counts.values())
            behind = [rank for rank, n in counts.items() if n < top]
            if behind:
                low = min(counts.values())
                findings.append(
                    f"{name}: {op}: rank(s) {_ranks(behind)} launched {low if low == top - 1 else f'{low}..{top - 1}'} "
                    f"operations, the others {top}: the others wait in {op} #{top} for ranks that never called it. "
                    "Those ranks are stuck before it (data loading, a Python exception on one rank, different "
                    "control flow per rank): dump their stacks (py-spy dump --pid) and read their logs"
                )
    return findings


def diagnose(report: RasReport) -> list[str]:
    findings = [f for status in report.statuses for f in diagnose_status(status)]
    for event in report.events:
        peer = event.get("peer") or {}
        findings.append(
            f"{event.get('timestamp', '?')} {event.get('group', '?')} {event['event']}: {_who(peer)}"
            + (f" ({event['details']})" if event.get("details") else "")
        )
    return findings


def render(report: RasReport) -> str:
    lines = []
    for status in report.statuses:
        comms = [c for c in status.get("communicators") or [] if isinstance(c, dict)]
        lines.append(
            f"NCCL RAS status at {status.get('timestamp', '?')} (NCCL {status.get('nccl_version', '?')}): "
            f"{len(comms)} communicator(s)"
        )
        for c in comms:
            lines.append(
                f"  {c.get('hash', '?')}: size {c.get('size', '?')}, {c.get('ranks_count', '?')} rank(s) answered, "
                f"{c.get('missing_ranks_count', 0)} missing"
            )
    if report.events:
        lines.append(f"NCCL RAS events: {len(report.events)}")
    findings = diagnose(report)
    if findings:
        lines.append("findings:")
        lines.extend(f"  - {f}" for f in findings)
    else:
        lines.append(
            "findings: none; every rank answered and the collective counts agree. If the job is stuck, query "
            "again in a minute: counts that do not move while every rank answers point at the application "
            "(all ranks waiting outside NCCL), not at the network"
        )
    return "\n".join(lines)


def _address(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"RAS address {addr!r}: expected HOST:PORT (NCCL_RAS_ADDR's form, e.g. {DEFAULT_ADDR})")
    return host.strip("[]") or "localhost", int(port)


def query(addr: str = DEFAULT_ADDR, timeout: float = 5.0, verbose: bool = True) -> str:
    """The JSON status report of the NCCL job whose RAS service listens at ``addr``."""
    host, port = _address(addr)
    try:
        sock = socket.create_connection((host, port), timeout=timeout + 10)
    except OSError as exc:
        raise UserError(
            f"cannot reach NCCL's RAS service at {host}:{port} ({exc.strerror or exc}): run this in a pod of the job "
            "while NCCL is initialised (NCCL 2.24+, NCCL_RAS_ENABLE not 0), and pass --addr if NCCL_RAS_ADDR is set"
        ) from None
    with sock, sock.makefile("rwb") as stream:

        def ask(line: str, expect: str) -> str:
            stream.write(line.encode() + b"\n")
            stream.flush()
            reply = stream.readline(4096).decode(errors="replace")
            if not reply.upper().startswith(expect):
                raise UserError(f"NCCL's RAS service at {host}:{port} answered {reply.strip()!r} to {line!r}")
            return reply

        try:
            ask(f"CLIENT PROTOCOL {CLIENT_PROTOCOL}", "SERVER PROTOCOL ")
            ask(f"TIMEOUT {max(1, int(timeout))}", "OK")
            ask("SET FORMAT json", "OK")  # NCCL 2.28.7+; older NCCL answers with an error
            stream.write(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
            stream.flush()
            body = stream.read(MAX_REPLY)
        except TimeoutError:
            raise UserError(f"NCCL's RAS service at {host}:{port} did not answer within {timeout + 10:.0f} s") from None
    return body.decode(errors="replace")

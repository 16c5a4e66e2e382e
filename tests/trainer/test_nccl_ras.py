"""NCCL RAS: the JSON of `ncclras -f json` as NCCL's user guide records it, and the client protocol.

fixtures/nccl/ras-*.json are the samples of NVIDIA/nccl v2.30.7-1
docs/userguide/source/troubleshooting/ras.rst (first line: the source), the only recorded RAS JSON.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import threading

import pytest

from tests.trainer.conftest import FIXTURES, clean_env, trainyard
from trainer import nccl_ras
from trainyard.contract.errors import UserError

STATUS = FIXTURES / "nccl" / "ras-2.29.1-status.json"
EVENT = FIXTURES / "nccl" / "ras-2.29-monitor-event.json"


def recorded(path) -> str:
    text = path.read_text()
    assert text.startswith("# source: NVIDIA/nccl tag v2.30.7-1")
    return text.split("\n", 1)[1]


def test_the_documented_status_names_the_missing_rank():
    report = nccl_ras.parse(recorded(STATUS))
    assert len(report.statuses) == 1 and report.statuses[0]["nccl_version"] == "2.29.1"
    (finding,) = nccl_ras.diagnose(report)
    assert finding.startswith(
        "communicator 0xae94423cfbb2ef4a (size 2): rank 1 (process 1524345 on 172.16.64.245, GPU 1) is not answering"
    )


def test_the_documented_monitor_event():
    (finding,) = nccl_ras.diagnose(nccl_ras.parse(recorded(EVENT)))
    assert finding == "2025-12-19 13:07:07 LIFECYCLE PEER_DEAD: process 1524345 on 172.16.64.245, GPU [1]"


def hung(counts: dict[int, int]) -> dict:
    """The documented status with every rank answering and these AllReduce counts (the situation
    the guide's text example shows: "26 ranks have launched up to operation 6650, 6 ... 6649")."""
    status = json.loads(recorded(STATUS))
    comm = status["communicators"][0]
    template = comm["ranks"][0]
    comm["ranks"] = []
    for rank, n in counts.items():
        r = copy.deepcopy(template)
        r.update(rank=rank, pid=1524344 + rank, cuda_dev=rank)
        r["collective_counts"]["AllReduce"] = n
        comm["ranks"].append(r)
    comm.update(size=len(counts), ranks_count=len(counts), missing_ranks_count=0, missing_ranks=[])
    return status


def test_ranks_behind_in_their_collective_counts_are_named():
    report = nccl_ras.parse(json.dumps(hung({0: 6650, 1: 6649, 2: 6650, 3: 6649})))
    (finding,) = nccl_ras.diagnose(report)
    assert "AllReduce: rank(s) 1, 3 launched 6649 operations, the others 6650" in finding
    assert "py-spy dump" in finding
    healthy = nccl_ras.parse(json.dumps(hung({0: 7, 1: 7})))
    assert nccl_ras.diagnose(healthy) == [] and "findings: none" in nccl_ras.render(healthy)


@pytest.mark.parametrize("text", ["{", "[1, 2]", '{"a": 1}', "{}" * 3, "   "])
def test_what_is_not_ras_json_is_refused(text):
    with pytest.raises(UserError, match="RAS output: "):
        nccl_ras.parse(text)


def test_nccl_report_reads_ras_json_from_standard_input():
    out = subprocess.run(
        trainyard("nccl-report", "-"), input=recorded(STATUS), capture_output=True, text=True, env=clean_env()
    )
    assert out.returncode == 1, out.stderr
    assert "0xae94423cfbb2ef4a: size 2, 1 rank(s) answered, 1 missing" in out.stdout
    assert "rank 1 (process 1524345 on 172.16.64.245, GPU 1) is not answering" in out.stdout


class FakeRas(threading.Thread):
    """A RAS service answering as NCCL's does (v2.30.7-1 src/ras/client_support.cc: "SERVER PROTOCOL 2",
    "OK" to TIMEOUT and SET FORMAT, then the report and a close)."""

    def __init__(self, body: str) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.body, self.commands = body, []

    def run(self) -> None:
        conn, _ = self.server.accept()
        with conn, conn.makefile("rwb") as f:
            while line := f.readline().decode().strip():
                self.commands.append(line)
                if line.startswith("CLIENT PROTOCOL"):
                    f.write(b"SERVER PROTOCOL 2\n")
                elif line.startswith(("TIMEOUT", "SET FORMAT")):
                    f.write(b"OK\n")
                elif line.endswith("STATUS"):
                    f.write(self.body.encode())
                    f.flush()
                    break
                f.flush()
        self.server.close()


def test_nccl_ras_queries_the_service_and_diagnoses():
    ras = FakeRas(json.dumps(hung({0: 12, 1: 11})))
    ras.start()
    out = subprocess.run(
        trainyard("nccl-ras", "--addr", f"127.0.0.1:{ras.port}", "--timeout", "3"),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    ras.join(10)
    assert ras.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 3", "SET FORMAT json", "VERBOSE STATUS"]
    assert out.returncode == 1, out.stderr
    assert "AllReduce: rank(s) 1 launched 11 operations, the others 12" in out.stdout


def test_nccl_ras_without_a_service_is_a_clear_error():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    out = subprocess.run(
        trainyard("nccl-ras", "--addr", f"127.0.0.1:{port}"), capture_output=True, text=True, env=clean_env()
    )
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: cannot reach NCCL's RAS service at 127.0.0.1:{port}")
    assert "NCCL_RAS_ENABLE" in out.stderr and "Traceback" not in out.stderr

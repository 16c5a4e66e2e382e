"""nccl-report on real NCCL logs of releases 2.3 to 2.30, and on logs edited the ways people paste them.

The logs under fixtures/nccl/releases are excerpts of real output, each file naming its source on
its first line (an NVIDIA/nccl issue, or the 2.30 user guide's logging examples); see
trainer/nccl_log.py for the formats of each release.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.trainer.conftest import FIXTURES, clean_env, trainyard
from trainer import nccl_log
from trainer.nccl_log import parse_files

RELEASES = FIXTURES / "nccl" / "releases"

# file: (versions, transports, link layers, GPUDirect seen, intra-node paths, processes at Init COMPLETE, ranks)
EXPECTED = {
    "2.3.7-IB-old-NET-IB-format.log": (["2.3.7+cuda9.0"], {"IB": 1}, ["IB"], [], [], 0, []),
    "2.4.7-IB-and-socket.log": (["2.4.7+cuda10.0"], {"IB": 1, "unknown": 7}, ["IB"], [], [], 0, []),
    "2.4.8-socket-only-lo.log": (["2.4.8+cuda10.1"], {"Socket": 2}, [], [], [], 0, []),
    "2.5.6-IB-RoCE-Ring-lines.log": ([], {"IB": 1}, ["IB+RoCE"], [], ["P2P/IPC"], 0, []),
    "2.5.6-socket-only-mpirun-prefixed.log": (["2.5.6+cuda10.2"], {"Socket": 3}, [], [], [], 0, []),
    "2.7to2.11-IB-GDRDMA-Channel-lines.log": ([], {"IB": 1}, [], [True], [], 0, []),
    "2.11.4-socket-NCCL_NET=Socket.log": (["2.11.4+cuda11.4"], {"Socket": 1, "unknown": 1}, [], [], [], 0, []),
    "2.12.12-IB-plus-RoCE-RO.log": (["2.12.12+cuda11.7"], {"IB": 2}, ["IB+RoCE"], [], [], 0, []),
    "2.14.3-ray-bare-version.log": (["2.14.3+cuda11.8"], {"unknown": 1}, [], [], [], 0, []),
    "2.18.3-socket-only-no-libibverbs.log": (["2.18.3+cuda12.2"], {"Socket": 2}, [], [], [], 0, []),
    "2.18.3to2.20-IB-NVLS-InitCOMPLETE.log": ([], {"unknown": 4}, [], [], [], 4, [32, 34, 35, 36]),
    "2.18.5-RoCE-NCCL_IB_HCA.log": (["2.18.5+cuda12.0"], {"IB": 2}, ["RoCE"], [], [], 0, []),
    "2.19.3-RoCE.log": (["2.19.3+cuda12.3"], {"IB": 2}, ["RoCE"], [], [], 0, []),
    "2.19.3-socket-only-InitSTART.log": (["2.19.3+cuda12.3"], {"Socket": 1}, [], [], [], 0, [0]),
    "2.21.5-socket-bare-version.log": (["2.21.5+cuda12.4"], {"unknown": 4}, [], [], [], 0, []),
    "2.21or2.22-IBext_v8-merged-RoCE-InitSTART.log": ([], {"IB": 1}, ["RoCE"], [False], [], 0, [2]),
    "2.22.3-RoCE-IBext_v8-torchrun.log": (
        ["2.22.3+cuda12.6"],
        {"IB": 5, "unknown": 2},
        ["RoCE"],
        [],
        ["P2P/CUMEM"],
        0,
        [],
    ),
    "2.22.x-IB-InitCOMPLETE-Init-timings.log": ([], {"IB": 1}, [], [False], ["P2P/direct pointer"], 1, [0, 1, 4, 5, 6]),
    "2.25.1-socket-only-virbr-usb.log": (["2.25.1+cuda12.8"], {"Socket": 1, "unknown": 1}, [], [], [], 0, []),
    "2.27-preview-RoCE-InitSTART.log": ([], {"IB": 2, "unknown": 1}, ["RoCE"], [], [], 0, [0]),
    "2.28.9-socket-one-rank-H200-InitCOMPLETE.log": (["2.28.9+cuda13.0"], {"Socket": 1}, [], [], [], 1, [0]),
    "2.28or2.29-InitCOMPLETE-host-prefix-stripped.log": ([], {"unknown": 3}, [], [], [], 3, [2, 3, 4]),
    "2.30-docs-logging-examples.log": (
        ["2.30.3+cuda13.0"],
        {"IB": 2, "Socket": 1, "unknown": 18},
        [],
        [],
        ["P2P/CUMEM", "SHM/direct"],
        0,
        [0],
    ),
}


def facts(report: nccl_log.Report) -> tuple:
    procs = report.processes
    return (
        sorted({p.version for p in procs if p.version}),
        dict(report.transports()),
        sorted({p.link_layer for p in procs if p.link_layer}),
        sorted({p.gdr for p in procs if p.gdr is not None}),
        sorted({x for p in procs for x in p.intra_node}),
        sum(p.init_complete for p in procs),
        sorted({c.rank for p in procs for c in p.comms})[:6],
    )


def test_every_release_log_is_covered():
    assert sorted(p.name for p in RELEASES.glob("*.log")) == sorted(EXPECTED)
    for path in RELEASES.glob("*.log"):
        assert path.read_text().startswith("# source: "), f"{path.name} names no source"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_release_log(name):
    assert facts(parse_files([RELEASES / name])) == EXPECTED[name]


def test_details_of_old_and_new_formats():
    by_file = {name: parse_files([RELEASES / name]).processes for name in EXPECTED}
    old = by_file["2.3.7-IB-old-NET-IB-format.log"][0]  # one device per line, "Using internal Network IB"
    assert [d["name"] for d in old.ib_devices] == ["mlx5_1", "mlx5_3", "mlx5_0", "mlx5_2"]
    assert old.bootstrap == "enp1s0f0:100.97.70.134" and old.oob == "enp1s0f0"
    merged = by_file["2.21or2.22-IBext_v8-merged-RoCE-InitSTART.log"][0]  # [0]={[0] mlx5_2:1/RoCE, ...}
    assert [d["name"] for d in merged.ib_devices] == ["mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1"]
    assert {k for k in merged.paths if k.startswith("NET/")} == {"NET/IBext_v8"}  # the HPC-X plugin's channels
    mpirun = by_file["2.5.6-socket-only-mpirun-prefixed.log"]  # every line behind "[1,N]<stdout>:"
    assert [p.host for p in mpirun] == ["5873af64cf59"] * 3 and mpirun[0].bootstrap == "lo:127.0.0.1"
    stripped = by_file["2.28or2.29-InitCOMPLETE-host-prefix-stripped.log"]  # no host:pid:tid at all
    assert [(p.pid, p.device, p.ranks) for p in stripped] == [(None, 2, [2]), (None, 3, [3]), (None, 4, [4])]
    assert stripped[0].label == "(no host:pid) GPU 2 (rank 2)"
    docs = by_file["2.30-docs-logging-examples.log"]  # 2.26+ time stamp before a WARN
    (warned,) = [p for p in docs if p.warnings]
    assert warned.pid == 189884 and warned.warnings[0].source == "plugin/net.cc:334"
    assert warned.warnings[0].message == "Failed to initialize any NET plugin"
    assert next(p for p in docs if p.pid == 1896826).env == {"NCCL_SHM_DISABLE": "1"}
    h200 = by_file["2.28.9-socket-one-rank-H200-InitCOMPLETE.log"][0]  # 2.28: "NET/IB : Using [RO]; OOB" yet no device
    assert h200.ib_no_device and h200.bootstrap == "eth0:192.0.2.2" and h200.socket_devices[0]["name"] == "eth0"
    no_verbs = by_file["2.25.1-socket-only-virbr-usb.log"][0]  # "Failed to open libibverbs.so[.1]"
    assert no_verbs.ib_no_device and [d["name"] for d in no_verbs.socket_devices][:3] == ["enp3s0f0", "usb0", "virbr0"]


# ------------------------------------------------------------------ logs as people paste them


def lines_of(name: str) -> list[str]:
    return [line for line in (RELEASES / name).read_text().splitlines() if not line.startswith("#")]


def parse_text(tmp_path: Path, text: str) -> nccl_log.Report:
    path = tmp_path / "pasted.log"
    path.write_text(text)
    return parse_files([path])


def test_kubectl_prefix_and_timestamps_change_nothing(tmp_path):
    name = "2.22.3-RoCE-IBext_v8-torchrun.log"
    edited = "".join(
        f"[pod/job-worker-0/trainer] 2026-06-01T10:00:{i % 60:02d}.123456789Z {line}\r\n"
        for i, line in enumerate(lines_of(name))
    )
    assert facts(parse_text(tmp_path, edited)) == EXPECTED[name]


def test_redacted_host_names_keep_processes_apart_by_pid(tmp_path):
    name = "2.4.7-IB-and-socket.log"
    edited = "\n".join(re.sub(r"^(master|secondary)_node:", "<redacted>:", line) for line in lines_of(name))
    report = parse_text(tmp_path, edited)
    assert len(report.processes) == 8 and {p.host for p in report.processes} == {"<redacted>"}
    assert facts(report) == EXPECTED[name]
    xxx = "\n".join(re.sub(r"^\S+?:\d+:\d+ ", "node-xxx:XXX:XXX ", line) for line in lines_of(name))
    assert parse_text(tmp_path, xxx).processes[0].label.startswith("(no host:pid) GPU 0")  # pid gone: by GPU


def test_interleaved_and_glued_output_of_several_ranks(tmp_path):
    a, b = lines_of("2.19.3-RoCE.log"), lines_of("2.18.5-RoCE-NCCL_IB_HCA.log")
    mixed = [x for pair in zip(a, b, strict=False) for x in pair] + a[len(b) :] + b[len(a) :]
    # and half the lines ended by a carriage return (a progress bar's way) instead of a newline
    glued = [mixed[i] + "\r" + mixed[i + 1] for i in range(0, len(mixed) - 1, 2)] + mixed[len(mixed) // 2 * 2 :]
    alone = parse_files([RELEASES / "2.19.3-RoCE.log", RELEASES / "2.18.5-RoCE-NCCL_IB_HCA.log"])
    together = parse_text(tmp_path, "\n".join(glued) + "\n")
    assert [(p.host, p.pid, p.transport, p.ib_devices) for p in together.processes] == [
        (p.host, p.pid, p.transport, p.ib_devices) for p in alone.processes
    ]


def test_standard_input_and_the_exit_status():
    log = (RELEASES / "2.19.3-RoCE.log").read_text()
    out = subprocess.run(
        trainyard("nccl-report", "-", "--expect", "IB"), input=log, capture_output=True, text=True, env=clean_env()
    )
    assert out.returncode == 0, out.stderr
    assert "2 process(es) in 1 file(s)" in out.stdout and "IB over RoCE" in out.stdout


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "<stdin>: no NCCL lines (lines like 'host:pid:tid [0] NCCL INFO ...')"),
        ("Traceback (most recent call last):\n  oops\n", "<stdin>: no NCCL lines"),
        ("NCCL version 2.21.5+cuda12.4\n", "<stdin>: only the line 'NCCL version 2.21.5+cuda12.4'"),
    ],
)
def test_input_without_nccl_lines_is_an_error(text, message):
    out = subprocess.run(trainyard("nccl-report", "-"), input=text, capture_output=True, text=True, env=clean_env())
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"error: {message}") and "NCCL_DEBUG=INFO" in out.stderr


def test_hostile_input_is_read_in_linear_time_and_bounded_memory(tmp_path):
    path = tmp_path / "hostile.log"
    with path.open("w") as fh:
        fh.write("x" * 5_000_000 + "\n")  # one enormous line without NCCL
        fh.write(("NCCL INFO " * 200_000) + "\n")  # markers without heads
        fh.write(("a:1:1 [0] NCCL INFO comm 0x1 rank 1 nranks 2 " * 20_000) + "\n")
        fh.write(":" * 3_000_000 + "NCCL WARN\n")
        fh.write(lines_of("2.19.3-RoCE.log")[0] + "\n")
    first_host = lines_of("2.19.3-RoCE.log")[0].split(":")[0]
    t0 = time.perf_counter()
    report = parse_files([path])
    elapsed = time.perf_counter() - t0
    assert report.processes and report.processes[-1].host == first_host
    assert elapsed < 20, elapsed  # about 0.2 s here: a generous bound on a linear parse

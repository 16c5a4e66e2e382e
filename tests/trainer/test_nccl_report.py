"""nccl-report and the train loop's transport decision, on NCCL_DEBUG=INFO logs as NCCL writes them."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.trainer.conftest import FIXTURES, clean_env, trainyard
from trainer import nccl_log
from trainer.nccl_log import parse_files, transport_verdict, verify_own_log
from trainer.transport import own_log_path, prepare_nccl_log

LOGS = FIXTURES / "nccl"


def only(name: str) -> nccl_log.ProcessLog:
    report = parse_files([LOGS / name])
    assert len(report.processes) == 1
    return report.processes[0]


def test_infiniband_with_gpudirect_two_local_ranks():
    report = parse_files([LOGS / "ib_gdr.log"])
    assert [(p.host, p.pid, p.ranks) for p in report.processes] == [
        ("llm-pretrain-master-0", 1042, [0]),
        ("llm-pretrain-master-0", 1043, [1]),
    ]
    for p in report.processes:
        assert p.version == "2.21.5+cuda12.4"  # printed bare on stdout by rank 0's process
        assert p.transport == "IB" and p.link_layer == "IB"
        assert [d["name"] for d in p.ib_devices] == ["mlx5_0", "mlx5_1"]
        assert p.oob == "net1:192.168.10.101"
        assert p.gdr is True
        assert p.intra_node == ["P2P/IPC"]
        assert p.nranks == 4 and p.nnodes == 2 and p.init_complete
        assert not p.warnings
    assert nccl_log.expectation_failures(report, "IB") == []


def test_roce_without_gpudirect_uses_shared_memory_inside_the_node():
    p = only("roce.log")
    assert p.version == "2.23.4+cuda12.6"
    assert p.transport == "IB" and p.link_layer == "RoCE"
    assert p.gdr is False
    assert p.gdr_hcas == {"mlx5_2": "disabled (no module)", "mlx5_3": "disabled (no module)"}
    assert p.intra_node == ["SHM/direct"]
    assert p.ranks == [2] and p.init_complete
    text = nccl_log.render(parse_files([LOGS / "roce.log"]), "IB")
    assert "IB over RoCE" in text and "nvidia-peermem" in text and "expectation IB: met" in text


def test_socket_fallback_is_detected_and_explained():
    p = only("socket_fallback.log")
    assert p.version == "2.18.5+cuda12.2"
    assert p.transport == "Socket" and p.ib_no_device
    assert p.socket_devices == [{"name": "eth0", "address": "10.244.3.17"}]
    assert p.paths == {"NET/Socket": 4}
    failures = nccl_log.expectation_failures(parse_files([LOGS / "socket_fallback.log"]), "IB")
    assert len(failures) == 1
    assert "fell back to TCP sockets (NET/Socket on eth0:10.244.3.17)" in failures[0]
    assert "No device found" in failures[0] and "rdma/" in failures[0]


def test_shm_failure_warnings_are_explained_and_init_is_incomplete():
    report = parse_files([LOGS / "shm_failure.log"])
    first, second = report.processes
    assert first.ranks == [2] and second.ranks == [3]
    assert not first.init_complete and not second.init_complete
    assert [w.source for w in first.warnings] == ["misc/shmutils.cc:72", "misc/shmutils.cc:113"]
    assert "failed to extend /dev/shm/nccl-w7Qn8Y to 9637892 bytes" in first.warnings[0].message
    assert "/dev/shm is too small" in first.warnings[0].explanation
    assert "emptyDir" in first.warnings[0].explanation
    text = nccl_log.render(report)
    assert "init: 0 of 2 process(es) reached Init COMPLETE" in text


def test_ibv_reg_mr_failure_points_at_memlock_and_ipc_lock():
    p = only("ib_memlock.log")
    assert len(p.warnings) == 2
    assert all("IPC_LOCK" in w.explanation and "memlock" in w.explanation for w in p.warnings)
    assert p.transport == "IB" and not p.init_complete


def test_logs_of_several_pods_are_kept_per_process():
    report = parse_files([LOGS / "ib_gdr.log", LOGS / "shm_failure.log", LOGS / "ib_memlock.log"])
    assert [min(p.ranks) for p in report.processes] == [0, 1, 2, 3, 3]
    assert report.transports() == {"IB": 5}


@pytest.mark.parametrize(
    ("logs", "expect", "rc"),
    [
        (["ib_gdr.log", "roce.log"], "IB", 0),
        (["socket_fallback.log"], "IB", 1),
        (["socket_fallback.log"], "Socket", 0),
        (["ib_gdr.log", "socket_fallback.log"], "IB", 1),
        (["roce.log"], "Socket", 1),
    ],
)
def test_cli_exit_status_follows_the_expectation(logs, expect, rc):
    out = subprocess.run(
        trainyard("nccl-report", *[str(LOGS / n) for n in logs], "--expect", expect),
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == rc, out.stdout + out.stderr
    assert ("NOT MET" in out.stdout) == (rc == 1)


def test_cli_json():
    out = subprocess.run(
        trainyard("nccl-report", str(LOGS / "socket_fallback.log"), str(LOGS / "roce.log"), "--expect", "IB", "--json"),
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert data["transports"] == {"Socket": 1, "IB": 1}
    assert data["expect"]["met"] is False and len(data["expect"]["failures"]) == 1
    by_rank = {p["ranks"][0]: p for p in data["processes"]}
    assert by_rank[1]["transport"] == "Socket" and by_rank[2]["link_layer"] == "RoCE"


def test_cli_missing_log_is_a_clean_error(tmp_path):
    out = subprocess.run(
        trainyard("nccl-report", str(tmp_path / "nope.log")), capture_output=True, text=True, env=clean_env()
    )
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: cannot read NCCL log {tmp_path / 'nope.log'}")
    assert "Traceback" not in out.stderr


def test_empty_log_does_not_meet_an_expectation(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("no NCCL here\n")
    failures = nccl_log.expectation_failures(parse_files([log]), "IB")
    assert failures and "NCCL_DEBUG=INFO" in failures[0]


# ------------------------------------------------------------------ the train loop's decision


def test_verdict_fallback_stops_training_unless_allowed():
    proc = only("socket_fallback.log")
    stop = transport_verdict(proc, "IB", allow_fallback=False)
    assert stop.level == "error" and "--allow-transport-fallback" in stop.message
    go = transport_verdict(proc, "IB", allow_fallback=True)
    assert go.level == "warning" and "continuing" in go.message


def test_verdict_matching_transport_is_ok_and_other_mismatches_warn():
    assert transport_verdict(only("roce.log"), "IB").level == "ok"
    assert transport_verdict(only("socket_fallback.log"), "Socket").level == "ok"
    assert transport_verdict(only("roce.log"), "Socket").level == "warning"
    assert transport_verdict(only("roce.log"), None).level == "ok"
    assert transport_verdict(None, "IB").level == "warning"


def test_verify_own_log_reads_only_this_process(tmp_path):
    # A file with two processes: the verdict is about the pid asked for.
    log = tmp_path / "nccl.log"
    log.write_text((LOGS / "ib_gdr.log").read_text() + (LOGS / "socket_fallback.log").read_text())
    assert verify_own_log(log, 1042, "IB", allow_fallback=False).level == "ok"
    assert verify_own_log(log, 211, "IB", allow_fallback=False).level == "error"
    assert verify_own_log(log, 99999, "IB", allow_fallback=False).level == "warning"
    assert verify_own_log(tmp_path / "missing.log", 1042, "IB", allow_fallback=False).level == "warning"


def test_prepare_nccl_log_sets_a_file_and_the_subsystems_needed():
    env = {"TRAINYARD_EXPECT_TRANSPORT": "IB", "NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "COLL"}
    pattern = prepare_nccl_log(env)
    assert pattern == env["NCCL_DEBUG_FILE"] and pattern.endswith("nccl.%h.%p.log")
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "COLL,INIT,NET"
    assert "%" not in own_log_path(pattern, pid=42).name and own_log_path(pattern, pid=42).name.endswith(".42.log")
    kept = {"TRAINYARD_EXPECT_TRANSPORT": "IB", "NCCL_DEBUG_FILE": "/logs/n.%p", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    prepare_nccl_log(kept)
    assert kept["NCCL_DEBUG_FILE"] == "/logs/n.%p" and kept["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert prepare_nccl_log({"NCCL_DEBUG": "INFO"}) is None  # nothing expected, nothing changed

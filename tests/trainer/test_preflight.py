"""Preflight against real conditions: network namespaces with and without the fabric interface,
small tmpfs mounts as /dev/shm, a capability dropped from the process."""

from __future__ import annotations

import ctypes
import json
import resource
import subprocess
from pathlib import Path

import pytest

from tests.trainer.conftest import clean_env, needs_netns, needs_root, trainyard
from trainer.interfaces import IfnameSpecError, gloo_ifname, list_interfaces, parse_ifname
from trainer.preflight import check_gpus

MiB = 1 << 20


def preflight(argv_prefix: list[str] | None = None, *args: str, preexec=None, **env: str) -> tuple[int, dict]:
    out = subprocess.run(
        [*(argv_prefix or []), *trainyard("preflight", "--json", *args)],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        preexec_fn=preexec,
        timeout=60,
    )
    assert out.stdout, out.stderr
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)["checks"]}


@needs_netns
@pytest.mark.netns
def test_fabric_interface_present_up_with_an_address(netns, tmpfs):
    ns = netns()
    ns.veth("net1", address="192.168.77.2/24")
    shm = tmpfs("64m")
    rc, checks = preflight(
        ns.exec([]),
        "--shm-path",
        str(shm),
        NCCL_SOCKET_IFNAME="net1",
        TRAINYARD_FABRIC="tcp",
        TRAINYARD_EXPECT_TRANSPORT="Socket",
        TRAINYARD_SHM_BYTES=str(32 * MiB),
        NCCL_IB_DISABLE="1",
    )
    assert rc == 0, checks
    assert checks["interface"]["status"] == "pass"
    assert checks["interface"]["detail"] == "NCCL_SOCKET_IFNAME=net1: net1 up, 192.168.77.2"
    assert checks["shm"]["status"] == "pass" and "64 MiB" in checks["shm"]["detail"]
    assert checks["webhook"]["status"] == "pass"
    assert checks["ipc-lock"]["status"] == "skip"  # a TCP fabric needs no RDMA


@needs_netns
@pytest.mark.netns
def test_fabric_interface_missing(netns):
    ns = netns()
    rc, checks = preflight(ns.exec([]), NCCL_SOCKET_IFNAME="net1", TRAINYARD_FABRIC="roce")
    assert rc == 1
    c = checks["interface"]
    assert c["status"] == "fail"
    assert "no interface matches" in c["detail"] and "present: lo" in c["detail"]
    assert "k8s.v1.cni.cncf.io/networks" in c["fix"]


@needs_netns
@pytest.mark.netns
@pytest.mark.parametrize(
    ("address", "up", "peer_up", "problem"),
    [
        ("192.168.77.2/24", False, True, "net1 is down"),
        ("192.168.77.2/24", True, False, "net1 is up but has no carrier"),
        (None, True, True, "net1 has no IP address"),
    ],
)
def test_fabric_interface_not_usable(netns, address, up, peer_up, problem):
    ns = netns()
    ns.veth("net1", address=address, up=up, peer_up=peer_up)
    rc, checks = preflight(ns.exec([]), NCCL_SOCKET_IFNAME="=net1")
    assert rc == 1
    assert checks["interface"]["status"] == "fail"
    assert problem in checks["interface"]["detail"]


@needs_netns
@pytest.mark.netns
def test_exclusion_syntax_finds_the_remaining_interface(netns):
    ns = netns()
    ns.veth("net1", address="192.168.77.2/24")
    rc, checks = preflight(ns.exec([]), NCCL_SOCKET_IFNAME="^lo,docker")
    assert rc == 0
    assert "net1 up" in checks["interface"]["detail"]


@needs_root
def test_shm_too_small_for_the_profile(tmpfs):
    shm = tmpfs("64m")
    rc, checks = preflight(None, TRAINYARD_SHM_PATH=str(shm), TRAINYARD_SHM_BYTES=str(128 * MiB))
    assert rc == 1
    c = checks["shm"]
    assert c["status"] == "fail"
    assert c["detail"] == f"{shm} (tmpfs): 64 MiB (64 MiB free), required 128 MiB"
    assert "at least 128 MiB" in c["fix"]


def test_shm_on_disk_is_flagged_as_not_memory_backed(tmp_path):
    folder = tmp_path / "not-shm"
    folder.mkdir()
    rc, checks = preflight(None, "--shm-path", str(folder), TRAINYARD_SHM_BYTES="1024")
    if checks["shm"]["detail"].startswith(f"{folder} (tmpfs"):
        pytest.skip("the temporary directory is itself on tmpfs here")
    assert rc == 0
    assert checks["shm"]["status"] == "warn" and "not memory-backed" in checks["shm"]["detail"]


def test_shm_bytes_that_is_not_a_number_is_a_configuration_error():
    rc, checks = preflight(None, TRAINYARD_SHM_BYTES="8Gi")
    assert rc == 2
    assert checks["shm"]["status"] == "error"


def test_unknown_transport_is_a_configuration_error():
    rc, checks = preflight(None, TRAINYARD_EXPECT_TRANSPORT="RDMA")
    assert rc == 2
    assert "IB, Socket" in checks["nccl-env"]["fix"]


def test_nccl_env_lint_is_the_shared_one():
    rc, checks = preflight(None, TRAINYARD_EXPECT_TRANSPORT="IB", NCCL_IB_DISABLE="1", NCCL_SOCKET_TIMEOUT="60")
    assert rc == 1
    detail = checks["nccl-env"]["detail"]
    assert "NCCL_IB_DISABLE=1 turns RDMA off" in detail and "NCCL_SOCKET_TIMEOUT does not exist" in detail


def _drop_ipc_lock(memlock: int):
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_capbset_drop, cap_ipc_lock = 24, 14
        if libc.prctl(pr_capbset_drop, cap_ipc_lock, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))

    return preexec


@needs_root
def test_ib_without_ipc_lock_and_a_memlock_limit_fails():
    rc, checks = preflight(None, preexec=_drop_ipc_lock(64 * 1024), TRAINYARD_EXPECT_TRANSPORT="IB")
    assert rc == 1
    assert checks["ipc-lock"]["status"] == "fail" and "not effective" in checks["ipc-lock"]["detail"]
    assert checks["memlock"]["status"] == "fail" and "64 KiB" in checks["memlock"]["detail"]
    assert "unlimited" in checks["memlock"]["fix"]

    rc, checks = preflight(None, TRAINYARD_EXPECT_TRANSPORT="IB")  # root, with every capability
    assert checks["ipc-lock"]["status"] == "pass"
    assert checks["memlock"]["status"] == "pass" and "CAP_IPC_LOCK lifts the limit" in checks["memlock"]["detail"]


def _can_raise_memlock() -> bool:
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] == resource.RLIM_INFINITY or bool(
        _caps_effective() >> 24 & 1  # CAP_SYS_RESOURCE
    )


def _caps_effective() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


@needs_root
@pytest.mark.skipif(
    not _can_raise_memlock(), reason="raising the memlock hard limit to unlimited needs CAP_SYS_RESOURCE"
)
def test_ib_without_ipc_lock_but_unlimited_memlock_passes_with_a_warning():
    rc, checks = preflight(None, preexec=_drop_ipc_lock(resource.RLIM_INFINITY), TRAINYARD_EXPECT_TRANSPORT="IB")
    assert rc == 0
    assert checks["ipc-lock"]["status"] == "warn" and "memlock is unlimited" in checks["ipc-lock"]["detail"]
    assert checks["memlock"]["status"] == "pass"


def test_gpus_requested_but_not_visible():
    if list(Path("/dev").glob("nvidia[0-9]*")):
        pytest.skip("this machine has GPUs")
    rc, checks = preflight(None, NVIDIA_VISIBLE_DEVICES="GPU-1b2c,GPU-3d4e")
    assert rc == 1
    assert checks["gpus"]["detail"] == "2 GPU(s) requested, 0 visible (/dev/nvidiaN)"
    rc, checks = preflight(None)
    assert checks["gpus"]["status"] == "skip"


@needs_netns
@pytest.mark.netns
def test_table_for_people(netns):
    ns = netns()
    out = subprocess.run(
        ns.exec(trainyard("preflight")),
        capture_output=True,
        text=True,
        env=clean_env(NCCL_SOCKET_IFNAME="net1"),
    )
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    assert any(line.startswith("interface") and " FAIL " in line for line in lines)
    assert any(line.strip().startswith("fix: the pod has no fabric interface") for line in lines)
    assert lines[-1] == "preflight FAILED: interface"


@needs_netns
@pytest.mark.netns
def test_launch_does_not_start_training_when_preflight_fails(netns, tmp_path):
    ns = netns()
    out = subprocess.run(
        ns.exec(trainyard("launch", "--", "--checkpoint-dir", str(tmp_path / "ckpt"))),
        capture_output=True,
        text=True,
        env=clean_env(NCCL_SOCKET_IFNAME="net1", PET_NNODES="1"),
        timeout=60,
    )
    assert out.returncode == 1
    assert "launch: preflight failed; not starting training" in out.stderr
    assert "torch.distributed.run" not in out.stdout + out.stderr
    assert not (tmp_path / "ckpt").exists()


# --------------------------------------------------------------- NCCL_SOCKET_IFNAME semantics


def test_ifname_syntax():
    spec = parse_ifname("^=docker0,lo")
    assert spec.exclude and spec.exact and spec.names == ("docker0", "lo")
    assert not spec.matches("docker0") and spec.matches("docker1") and spec.matches("net1")
    prefix = parse_ifname("net")
    assert prefix.matches("net1") and prefix.matches("net10") and not prefix.matches("eth0")
    for bad in ("", " , ", "^", "a b", "waytoolonginterfacename"):
        with pytest.raises(IfnameSpecError):
            parse_ifname(bad)


def test_gloo_follows_nccl_to_an_existing_interface():
    assert "lo" in list_interfaces()
    assert gloo_ifname("=net1") == "net1"  # exact: taken as is
    assert gloo_ifname("lo") == "lo"
    assert gloo_ifname("nosuchif") is None


def test_a_negative_gpu_request_is_a_usage_error():
    out = subprocess.run(trainyard("preflight", "--gpus", "-1"), capture_output=True, text=True, env=clean_env())
    assert out.returncode == 2
    assert out.stderr.splitlines()[0].startswith("usage: trainyard preflight ")
    assert out.stderr.splitlines()[-1] == (
        "trainyard preflight: error: argument --gpus: -1 is not a number of GPUs (0 or more)"
    )
    assert check_gpus({}, -1).status == "error"


def test_nccl_env_is_judged_for_the_nccl_installed_or_the_image_fact():
    from trainer.preflight import check_nccl_env, installed_nccl
    from trainyard.contract.nccl import TRAINER_NCCL

    version = installed_nccl() or TRAINER_NCCL  # the CPU test environment has no nvidia-nccl wheel
    check = check_nccl_env({"TRAINYARD_EXPECT_TRANSPORT": "IB", "NCCL_IB_GID_INDEX": "3"})
    assert check.status == "warn" and f"NCCL {version} (2.21+) picks the RoCE v2 GID" in check.detail
    check = check_nccl_env({"TRAINYARD_EXPECT_TRANSPORT": "IB", "UCX_TLS": "tcp", "NCCL_PLUGIN_P2P": "ucx"})
    assert check.status == "fail" and "UCX_TLS=tcp" in check.detail

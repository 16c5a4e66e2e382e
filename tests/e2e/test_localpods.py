"""Pods as process groups in network namespaces: the stand-in for kubelet, pod network and Multus
that the demo runs the training job on. Needs root and ``ip netns``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainyard.contract.errors import UserError
from trainyard.sandbox.localpods import STATE_DIR, LocalCluster, isolation_available, sweep_stale

available, why = isolation_available()
_skip_without_netns = pytest.mark.skipif(not available, reason=f"needs root and ip netns: {why}")


def needs_netns(test):
    """The netns tier: skipped with the reason where network namespaces cannot be made."""
    return pytest.mark.netns(_skip_without_netns(test))


NAD = {
    "apiVersion": "k8s.cni.cncf.io/v1",
    "kind": "NetworkAttachmentDefinition",
    "metadata": {"name": "training-network", "namespace": "ml"},
    "spec": {
        "config": json.dumps(
            {
                "cniVersion": "0.3.1",
                "type": "macvlan",
                "master": "eth0",
                "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "subnet": "192.168.100.0/24",
                    "rangeStart": "192.168.100.10",
                    "rangeEnd": "192.168.100.50",
                },
            }
        )
    },
}

# the "server" pod writes what it sees to the shared claim; the "client" pod sends bytes over net1
SERVER = """
import os, socket, json
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((os.environ["FABRIC_IP"], 5000)); s.listen()
c, _ = s.accept(); n = 0
while chunk := c.recv(1 << 16): n += len(chunk)
st = os.statvfs("/dev/shm")
json.dump({"bytes": n, "shm": st.f_blocks * st.f_frsize, "argv": os.sys.argv[1:]}, open("/data/result.json", "w"))
"""
CLIENT = """
import os, socket, sys, pathlib
marker = pathlib.Path("/data/client-failed-once")
if not marker.exists():
    marker.write_text("x"); sys.exit(3)          # the first run fails: restartPolicy OnFailure restarts it
print("server resolves to", socket.gethostbyname("srv-0"))
s = socket.create_connection((os.environ["SERVER_FABRIC_IP"], 5000), timeout=10)
s.sendall(b"x" * 2_000_000); s.close()
"""


def pod(name: str, script: str, env: dict, args: list[str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {"k8s.v1.cni.cncf.io/networks": "training-network"},
        },
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/ml/trainer:0.1.0",
                    "args": ["-c", script, *(args or [])],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "96Mi"}},
            ],
        },
    }


def links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@needs_netns
def test_pods_get_namespaces_fabric_shm_dns_volumes_and_restarts(tmp_path):
    entry = {"registry.example.com/ml/trainer": [sys.executable]}
    with LocalCluster(tmp_path, [NAD], entry, isolate=True) as cluster:
        server = pod("srv-0", SERVER, {"FABRIC_IP": "set below"}, args=["$(FABRIC_IP)"])
        client = pod("cli-0", CLIENT, {"SERVER_FABRIC_IP": "set below"})
        srv, cli = cluster.add_pods([server, client], "ml")
        assert set(srv.interfaces) == {"eth0", "net1"} and srv.interfaces["net1"] == "192.168.100.10"
        server["spec"]["containers"][0]["env"][0]["value"] = srv.interfaces["net1"]
        client["spec"]["containers"][0]["env"][0]["value"] = srv.interfaces["net1"]
        made = (links(), netns())
        cluster.start(srv)
        cluster.start(cli)
        deadline = time.monotonic() + 60
        events = []
        while not (srv.finished and cli.finished) and time.monotonic() < deadline:
            events += cluster.poll()
            time.sleep(0.05)
        events += cluster.poll()
        assert srv.exit_codes == {"main": 0}, srv.logs["main"].read_text()
        assert cli.exit_codes == {"main": 0} and cli.restarts == {"main": 1}, events
        result = json.loads((tmp_path / "pvc" / "shared" / "result.json").read_text())
        assert result["bytes"] == 2_000_000
        assert result["shm"] == 96 * 2**20  # the pod's own /dev/shm, sized from its emptyDir
        assert result["argv"] == [srv.interfaces["net1"]]  # $(VAR) expanded from the env
        assert f"server resolves to {srv.ip}" in cli.logs["main"].read_text()
        counters = cluster.counters(cli)
        assert counters["net1"]["tx"] > 2_000_000 > counters["eth0"]["tx"]
        assert cluster.id in made[0] and cluster.id in made[1]
    assert cluster.id not in links() and cluster.id not in netns()
    assert not list(Path("/etc/netns").glob(f"ty-{cluster.id}-*"))


@needs_netns
def test_unknown_network_fails_the_pod_like_multus(tmp_path):
    with (
        LocalCluster(tmp_path, [], {}, isolate=True) as cluster,
        pytest.raises(UserError, match="cannot find a network-attachment-definition"),
    ):
        cluster.add_pods([pod("a", "", {})], "ml")
    assert cluster.id not in links()


@needs_netns
def test_a_killed_run_is_swept_by_the_next(tmp_path):
    code = f"""
import sys, os, signal
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from pathlib import Path
from trainyard.sandbox.localpods import LocalCluster
c = LocalCluster(Path({str(tmp_path)!r}), [], {{}}, isolate=True)
c.add_pods([{{"metadata": {{"name": "p"}}, "spec": {{"containers": []}}}}], "ml")
print(c.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    left = r.stdout.strip()
    assert left and left in links() and (STATE_DIR / f"{left}.json").exists()
    assert left in sweep_stale()
    assert left not in links() and left not in netns()


# A JobSet pod in small: an init container that must finish first, the completion index through
# the downward API, and the peer reached at <hostname>.<subdomain> (the headless Service's name).
INIT = """
import os, pathlib, sys
marker = pathlib.Path("/data/init-" + os.environ["HOSTNAME"])
if not marker.exists():
    marker.write_text("x"); sys.exit(5)       # the first run fails: the kubelet runs it again
pathlib.Path("/data/ready-" + os.environ["HOSTNAME"]).write_text(os.environ["RANK"])
"""
MAIN = """
import os, pathlib, socket
assert pathlib.Path("/data/ready-" + os.environ["HOSTNAME"]).exists(), "the init container ran first"
peer = socket.gethostbyname("job-node-0-0.job")
pathlib.Path("/data/main-" + os.environ["HOSTNAME"]).write_text(os.environ["RANK"] + " " + peer)
"""


def jobset_pod(index: int, init_script: str = INIT) -> dict:
    index_path = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    rank = {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": index_path}}}
    container = {"image": "registry.example.com/ml/trainer:0.1.0", "env": [rank],
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}  # fmt: skip
    return {
        "metadata": {
            "name": f"job-node-0-{index}-abcde",
            "namespace": "ml",
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {
            "restartPolicy": "OnFailure",
            "hostname": f"job-node-0-{index}",
            "subdomain": "job",
            "initContainers": [{**container, "name": "preflight", "args": ["-c", init_script]}],
            "containers": [{**container, "name": "node", "args": ["-c", MAIN]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
        },
    }


@needs_netns
def test_init_containers_run_first_to_completion_with_downward_api_and_jobset_dns(tmp_path):
    entry = {"registry.example.com/ml/trainer": [sys.executable]}
    with LocalCluster(tmp_path, [], entry, isolate=True) as cluster:
        pods = cluster.add_pods([jobset_pod(0), jobset_pod(1)], "ml")
        for p in pods:
            cluster.start(p)
            assert set(p.processes) == {"preflight"}, "only the init container starts"
        deadline, events = time.monotonic() + 60, []
        while not all(p.finished for p in pods) and time.monotonic() < deadline:
            events += cluster.poll()
            time.sleep(0.05)
        for i, p in enumerate(pods):
            assert p.exit_codes == {"preflight": 0, "node": 0}, (events, p.logs["node"].read_text())
            assert p.restarts == {"preflight": 1, "node": 0}
            rank, peer = (tmp_path / "pvc" / "shared" / f"main-job-node-0-{i}").read_text().split()
            assert rank == str(i) and peer == pods[0].ip
        assert "job-node-0-1-abcde/preflight (init) completed" in events


@needs_netns
def test_a_failing_init_container_fails_a_never_restarting_pod(tmp_path):
    entry = {"registry.example.com/ml/trainer": [sys.executable]}
    with LocalCluster(tmp_path, [], entry, isolate=True) as cluster:
        spec = jobset_pod(0, init_script="raise SystemExit(7)")
        spec["spec"]["restartPolicy"] = "Never"
        (p,) = cluster.add_pods([spec], "ml")
        cluster.start(p)
        deadline = time.monotonic() + 30
        while not p.finished and time.monotonic() < deadline:
            cluster.poll()
            time.sleep(0.05)
        assert p.exit_codes == {"preflight": 7} and "node" not in p.processes


def test_gated_pods_and_sidecars_are_refused(tmp_path):
    with LocalCluster(tmp_path, [], {}, isolate=False) as cluster:
        gated = jobset_pod(0)
        gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
        with pytest.raises(UserError, match=r"scheduling gates \['kueue.x-k8s.io/topology'\] are still on"):
            cluster.add_pods([gated], "ml")
        sidecar = jobset_pod(0)
        sidecar["spec"]["initContainers"][0]["restartPolicy"] = "Always"
        with pytest.raises(UserError, match="is a sidecar"):
            cluster.add_pods([sidecar], "ml")


def test_with_the_kubelets_crash_loop_a_failing_init_container_is_restarted_at_once_then_after_a_back_off(tmp_path):
    entry = {"registry.example.com/ml/trainer": [sys.executable]}
    with LocalCluster(tmp_path, [], entry, isolate=False, max_restarts=None, crashloop=True) as cluster:
        (p,) = cluster.add_pods([jobset_pod(0, init_script="raise SystemExit(3)")], "ml")
        cluster.start(p)
        deadline, events = time.monotonic() + 30, []
        while "preflight" not in p.restart_at and time.monotonic() < deadline:
            events += cluster.poll()
            time.sleep(0.05)
        code, _, exited = p.last_exit["preflight"]
        assert code == 3 and p.restarts["preflight"] == 1, events
        assert p.restart_at["preflight"] - exited == pytest.approx(10)
        assert any(e.endswith("(init) exited with 3; restarting (1)") for e in events)
        assert events[-1].endswith("(init) exited with 3; back-off 10 s before restarting it")
        assert not p.finished and "preflight" not in p.exit_codes, "OnFailure: the pod does not fail"
        events = cluster.poll()
        assert events == [] and p.restarts["preflight"] == 1, "not before its back-off ends"


@needs_netns
def test_a_recreated_jobset_pod_answers_for_its_hostname_and_a_removed_one_no_longer_does(tmp_path):
    """A requeued job's new pod takes its hostname over from the old one still being stopped (its
    headless Service lists the new endpoint), and a removed pod's names go from every hosts file."""
    with LocalCluster(tmp_path, [], {}, isolate=True) as cluster:
        (old,) = cluster.add_pods([jobset_pod(0)], "ml")
        again = jobset_pod(0)
        again["metadata"]["name"] = "job-node-0-0-fghij"
        (new,) = cluster.add_pods([again], "ml")
        (peer,) = cluster.add_pods([jobset_pod(1)], "ml")

        def resolve(name: str) -> list[str]:
            hosts = (Path("/etc/netns") / peer.netns / "hosts").read_text()
            return [line.split()[0] for line in hosts.splitlines() if name in line.split()[1:]]

        assert old.ip != new.ip
        assert resolve("job-node-0-0.job") == [new.ip]
        assert resolve("job-node-0-0-abcde") == [old.ip]
        cluster.remove_pod(new.name, grace=0)
        assert resolve("job-node-0-0.job") == [old.ip]
        cluster.remove_pod(old.name, grace=0)
        assert resolve("job-node-0-0.job") == [] and resolve("job-node-0-0-abcde") == []


@needs_netns
def test_a_pod_has_its_hostname_and_resolves_it_to_its_own_address(tmp_path):
    """As under a container runtime: ``gethostname()`` is the pod's hostname and the pod's hosts
    file resolves it (torchrun's c10d rendezvous asks both to decide whether it hosts the store)."""
    entry = {"registry.example.com/ml/trainer": [sys.executable]}
    spec = jobset_pod(0)
    spec["spec"]["initContainers"] = []
    spec["spec"]["containers"][0]["args"] = ["-c", "import time; print('up', flush=True); time.sleep(60)"]
    with LocalCluster(tmp_path, [], entry, isolate=True) as cluster:
        (p,) = cluster.add_pods([spec], "ml")
        cluster.start(p)
        deadline = time.monotonic() + 30  # exec enters the namespaces the container is in once it runs
        while "up\n" not in p.logs["node"].read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        probe = "import socket; h = socket.gethostname(); print(h, socket.getaddrinfo(h, None)[0][4][0])"
        done = cluster.exec(p, "node", [sys.executable, "-c", probe])
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["job-node-0-0", p.ip]

"""Pods a local process plays (trainyard/sandbox/played.py): which pods, their readiness probe as
the kubelet's prober runs it, and what the kubelet reports for them."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import ClassVar

import pytest

from trainyard.cluster.processes import Daemon, spawn, wait_for
from trainyard.contract.errors import UserError
from trainyard.sandbox.kubelet import Kubelet, Tracked
from trainyard.sandbox.played import Probe, player, replica_set_name

KUEUE = Daemon("kueue", 1, 1, "/dev/null", plays="kueue-system/kueue-controller-manager", probe_port=1)
WEBHOOK = Daemon("trainyard-webhook", 2, 2, "/dev/null", plays="trainyard-system/trainyard-webhook", probe_port=2)


def _pod(namespace: str, owner: str, template_hash: str, kind: str = "ReplicaSet") -> dict:
    return {
        "metadata": {
            "name": f"{owner}-x1y2z",
            "namespace": namespace,
            "labels": {"pod-template-hash": template_hash},
            "ownerReferences": [{"kind": kind, "name": owner}],
        }
    }


def test_a_pod_of_a_played_deployments_replica_set_is_that_process():
    pod = _pod("kueue-system", "kueue-controller-manager-66dd74c4c4", "66dd74c4c4")
    assert player(pod, [WEBHOOK, KUEUE]) is KUEUE


def test_pods_of_other_deployments_namespaces_or_owners_are_not_played():
    daemons = [WEBHOOK, KUEUE]
    assert player(_pod("default", "kueue-controller-manager-66dd74c4c4", "66dd74c4c4"), daemons) is None
    assert player(_pod("kueue-system", "kueue-controller-manager-66dd74c4c4", "7f7f7f7f"), daemons) is None
    assert player(_pod("kueue-system", "kueue-controller-manager-66dd74c4c4", "66dd74c4c4", "Job"), daemons) is None
    # a Deployment whose name only starts like the played one's
    assert player(_pod("kueue-system", "kueue-controller-manager-2-66dd74c4c4", "66dd74c4c4"), daemons) is None
    assert player({"metadata": {"name": "p", "namespace": "kueue-system"}}, daemons) is None
    assert (
        player(_pod("kueue-system", "kueue-controller-manager-66dd74c4c4", "66dd74c4c4"), [Daemon("etcd", 3, 3, "")])
        is None
    )


def test_a_long_deployment_name_is_cut_as_the_deployment_controller_cuts_it():
    name = "d" * 260
    assert replica_set_name(name, "abc") == "d" * 249 + "-abc"
    assert len(replica_set_name(name, "abc")) == 253
    long = Daemon("x", 1, 1, "", plays=f"ns/{name}", probe_port=1)
    assert player(_pod("ns", replica_set_name(name, "abc"), "abc"), [long]) is long


CONTAINER = {
    "name": "manager",
    "readinessProbe": {
        "httpGet": {"path": "/readyz", "port": 8081, "scheme": "HTTP"},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 3,
    },
}


def test_the_probe_waits_its_initial_delay_then_runs_every_period_with_its_thresholds():
    probe = Probe.of(CONTAINER, 4242, started=100.0)
    assert probe is not None and probe.url == "http://127.0.0.1:4242/readyz"
    assert not probe.due(104.9) and probe.due(105.0) and not probe.ready  # unready until a success
    assert probe.record(True, 105.0) and probe.ready
    assert not probe.due(114.9) and probe.due(115.0)
    # failureThreshold 3: two failures keep it ready, the third makes it unready; a success in
    # between starts the count again
    assert not probe.record(False, 115.0) and not probe.record(False, 125.0) and probe.ready
    assert not probe.record(True, 135.0) and probe.ready
    assert not probe.record(False, 145.0) and not probe.record(False, 155.0)
    assert probe.record(False, 165.0) and not probe.ready
    assert probe.record(True, 175.0) and probe.ready


def test_a_success_threshold_above_one_needs_that_many_successes():
    container = {"name": "c", "readinessProbe": {"httpGet": {"path": "healthz", "port": 1}, "successThreshold": 2}}
    probe = Probe.of(container, 7, started=0.0)
    assert probe is not None and probe.url == "http://127.0.0.1:7/healthz" and probe.due(0.0)
    assert not probe.record(True, 0.0) and not probe.ready
    assert probe.record(True, 10.0) and probe.ready


def test_no_probe_is_ready_once_running_and_a_probe_it_cannot_answer_is_refused_by_name():
    assert Probe.of({"name": "c"}, 1, 0.0) is None
    for probe in (
        {"tcpSocket": {"port": 8081}},
        {"exec": {"command": ["true"]}},
        {"httpGet": {"path": "/readyz", "port": 8081, "scheme": "HTTPS"}},
    ):
        with pytest.raises(UserError, match=r"container c: its readiness probe .* is not an HTTP GET"):
            Probe.of({"name": "c", "readinessProbe": probe}, 1, 0.0)
    with pytest.raises(UserError, match="is not an HTTP GET"):  # a process that moved no probe port
        Probe.of(CONTAINER, 0, 0.0)


class _Health(http.server.BaseHTTPRequestHandler):
    codes: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        code = self.codes.pop(0) if self.codes else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health() -> Iterator[tuple[int, list[int]]]:
    codes: ClassVar[list[int]] = []
    handler = type("Handler", (_Health,), {"codes": codes})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], codes
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_counts_200_to_399_as_success_and_anything_else_or_no_answer_as_failure(health):
    port, codes = health
    container = {"name": "c", "readinessProbe": {"httpGet": {"path": "/readyz", "port": 1}, "failureThreshold": 1}}
    probe = Probe.of(container, port, 0.0)
    assert probe is not None
    codes.extend([302, 500, 399, 400])
    assert (
        probe.record(probe.check(), 0.0) and probe.ready
    )  # a redirect is not followed: the prober's Warning, a success
    assert probe.record(probe.check(), 1.0) and not probe.ready
    assert probe.record(probe.check(), 2.0) and probe.ready
    assert probe.record(probe.check(), 3.0) and not probe.ready
    closed = Probe.of(container, port, 0.0)
    assert closed is not None
    closed.url = "http://127.0.0.1:1/readyz"  # nothing listens there
    closed.ready = True
    assert closed.record(closed.check(), 0.0) and not closed.ready


def _played(daemon: Daemon, probe: Probe | None) -> dict:
    spec = {"containers": [{"name": "manager", "image": "registry.k8s.io/kueue/kueue:v0.19.2"}]}
    tracked = Tracked("uid", "kueue-controller-manager-66dd74c4c4-x1y2z", "kueue-system", "n0", None, spec,
                      "2026-12-07T00:00:00Z", played=daemon, probe=probe)  # fmt: skip
    return Kubelet.status(Kubelet.__new__(Kubelet), tracked, spec)


def test_a_played_pod_is_running_without_an_ip_and_ready_as_its_probe_says(tmp_path):
    daemon = spawn("kueue", ["sleep", "30"], tmp_path / "kueue.log", plays="kueue-system/kueue-controller-manager")
    try:
        probe = Probe.of(CONTAINER, 4242, 0.0)
        assert probe is not None
        status = _played(daemon, probe)
        assert status["phase"] == "Running" and "podIP" not in status and "podIPs" not in status
        container = status["containerStatuses"][0]
        assert container["state"] == {"running": {"startedAt": "2026-12-07T00:00:00Z"}} and not container["ready"]
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"
        probe.record(True, 5.0)
        status = _played(daemon, probe)
        assert status["containerStatuses"][0]["ready"]
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
        assert _played(daemon, None)["containerStatuses"][0]["ready"]  # no probe: ready once running
    finally:
        daemon.stop()
    status = _played(daemon, probe)
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CrashLoopBackOff" and f"kueue (pid {daemon.pid}), has exited" in waiting["message"]
    assert not status["containerStatuses"][0]["ready"]


def _kubelet(players) -> Kubelet:
    return Kubelet(None, None, SimpleNamespace(), progress=lambda _: None, players=players)  # type: ignore[arg-type]


def _bound(containers: list[dict], owner: str = "kueue-controller-manager-66dd74c4c4") -> dict:
    pod = _pod("kueue-system", owner, "66dd74c4c4")
    pod["metadata"]["uid"] = f"uid-{len(containers)}-{owner}"
    pod["spec"] = {"nodeName": "n0", "containers": containers}
    return pod


def test_the_kubelet_plays_a_bound_pod_of_a_played_deployment_and_reads_the_players_when_one_is_new():
    reads: list[int] = []

    def players() -> list[Daemon]:
        reads.append(1)
        return [KUEUE]

    kubelet = _kubelet(players)
    said = kubelet._run(_bound([CONTAINER]))
    assert said == ["kueue-controller-manager-66dd74c4c4-x1y2z on n0: played by the local process kueue (pid 1)"]
    (tracked,) = kubelet.pods.values()
    assert tracked.played is KUEUE and tracked.local is None
    assert tracked.probe is not None and tracked.probe.url == "http://127.0.0.1:1/readyz"
    assert len(reads) == 1  # not known yet: read; the next pod of the same Deployment is found at once
    kubelet._run(_bound([CONTAINER], owner="kueue-controller-manager-66dd74c4c4"))
    assert len(reads) == 1
    job_pod = _bound([CONTAINER], owner="smoke-ddp-node-0-0")
    job_pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "smoke-ddp-node-0-0"}]

    def add_pods(pods: list[dict], namespace: str) -> list:
        raise UserError("started as any pod")  # LocalCluster's answer for a pod it cannot set up

    kubelet.cluster = SimpleNamespace(add_pods=add_pods)
    (said,) = kubelet._run(job_pod)  # a Job's pod: no player is looked for, it is run as any pod
    assert said.endswith("cannot start: started as any pod") and len(reads) == 1


def test_a_played_pod_with_more_than_its_one_container_waits_and_says_why():
    kubelet = _kubelet(lambda: [KUEUE])
    (said,) = kubelet._run(_bound([CONTAINER, {**CONTAINER, "name": "sidecar"}]))
    assert "cannot be played by kueue: pod kueue-controller-manager-66dd74c4c4-x1y2z: a local process plays one" in said
    (tracked,) = kubelet.pods.values()
    assert tracked.played is None and "plays one container" in tracked.waiting
    status = Kubelet.status(kubelet, tracked, tracked.spec)
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


def test_a_probe_that_gets_no_answer_never_holds_the_kubelets_loop():
    """A controller stopped (SIGSTOP) accepts the connection and never answers: its probe runs in a
    thread of its own, the loop goes on at once, and the result (a failure at the timeout) is
    counted when it comes."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepted by the kernel, never answered
    kubelet = _kubelet(lambda: [Daemon("kueue", 1, 1, "", plays=KUEUE.plays, probe_port=silent.getsockname()[1])])
    try:
        container = {**CONTAINER, "readinessProbe": {**CONTAINER["readinessProbe"], "initialDelaySeconds": 0}}
        kubelet._run(_bound([container]))
        (tracked,) = kubelet.pods.values()
        assert tracked.probe is not None
        tracked.probe.ready, tracked.probe.failures = True, 1
        t0 = time.monotonic()
        assert kubelet._probe(tracked) == [] and tracked.uid in kubelet._probing  # sent, not awaited
        assert kubelet._probe(tracked) == []  # still under way: nothing counted, nothing sent again
        assert time.monotonic() - t0 < 0.5
        wait_for(lambda: kubelet._probing[tracked.uid].done(), timeout=5, what="the probe's timeout")
        said = kubelet._probe(tracked)
        assert said == [f"{tracked.name}: not ready ({tracked.probe.url})"] and not tracked.probe.ready
    finally:
        kubelet.stop()
        silent.close()

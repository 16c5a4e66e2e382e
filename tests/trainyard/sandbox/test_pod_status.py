"""The demo's pod column, as kubectl's STATUS and RESTARTS (k8s.io/kubernetes@v1.36.5:
pkg/printers/internalversion/printers.go printPod), from statuses the kubelet writes."""

from __future__ import annotations

import pytest

from trainyard.sandbox.clusterdemo import pod_status

SPEC = {"initContainers": [{"name": "preflight"}], "containers": [{"name": "node"}]}


def _pod(phase: str, inits: list[dict], containers: list[dict], *, initialized: bool = False, **meta) -> dict:
    conditions = [{"type": "Initialized", "status": "True" if initialized else "False"}]
    status = {"phase": phase, "conditions": conditions, "initContainerStatuses": inits, "containerStatuses": containers}
    return {"metadata": meta, "spec": SPEC, "status": status}


def _c(state: dict, restarts: int = 0, ready: bool = False) -> dict:
    return {"state": state, "restartCount": restarts, "ready": ready}


DONE = _c({"terminated": {"exitCode": 0, "reason": "Completed"}})
WAITING = _c({"waiting": {"reason": "PodInitializing"}})


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (_pod("Pending", [_c({"running": {}})], [WAITING]), ("Init:0/1", 0)),
        (_pod("Pending", [_c({"waiting": {"reason": "CrashLoopBackOff"}}, 2)], [WAITING]),
         ("Init:CrashLoopBackOff", 2)),
        (_pod("Failed", [_c({"terminated": {"exitCode": 1, "reason": "Error"}})], [WAITING]), ("Init:Error", 0)),
        (_pod("Pending", [_c({"terminated": {"exitCode": 3}})], [WAITING]), ("Init:ExitCode:3", 0)),
        (_pod("Running", [DONE], [_c({"running": {}}, 1, ready=True)], initialized=True), ("Running", 1)),
        (_pod("Running", [DONE], [_c({"waiting": {"reason": "CrashLoopBackOff"}}, 4)], initialized=True),
         ("CrashLoopBackOff", 4)),
        (_pod("Succeeded", [DONE], [_c({"terminated": {"exitCode": 0, "reason": "Completed"}})], initialized=True),
         ("Completed", 0)),
        (_pod("Failed", [DONE], [_c({"terminated": {"exitCode": 137, "reason": "Error"}})], initialized=True),
         ("Error", 0)),
        (_pod("Running", [DONE], [_c({"running": {}}, ready=True)], initialized=True, deletionTimestamp="t"),
         ("Terminating", 0)),
        ({"metadata": {}, "spec": SPEC, "status": {"phase": "Pending"}}, ("Pending", 0)),
    ],
)  # fmt: skip
def test_the_pod_column_is_kubectls(pod, want):
    assert pod_status(pod) == want

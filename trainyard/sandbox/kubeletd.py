"""``trainyard kubelet``: the sandbox as the kubelet of a running local cluster's nodes,
as a process of its own, so that what reaches the cluster after ``trainyard cluster up`` runs.

``trainyard cluster up`` starts it (unless ``--no-kubelet``) and records it with the control
plane's processes, so ``trainyard cluster down`` stops it, last started first: on SIGTERM it stops
every pod it runs and removes their network namespaces before it exits. It registers the nodes the
cluster declares (Ready, with their Leases), provides the claims' volumes, runs the pods the
scheduler binds to those nodes as ``make demo`` does (trainyard/sandbox/kubelet.py), reports the
pods of the Deployments whose part ``up``'s processes play as those processes
(trainyard/sandbox/played.py), and logs one line for each thing that happens.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx

from trainyard.cluster.cli import KUBELET_READY
from trainyard.cluster.client import ApiError
from trainyard.cluster.controlplane import Paths, Started, State
from trainyard.cluster.processes import Daemon
from trainyard.contract.errors import UserError
from trainyard.repo.model import declared, repository
from trainyard.sandbox.clusterdemo import sandbox_kubelet
from trainyard.sandbox.demo import ROOT
from trainyard.sandbox.localpods import isolation_available

WORK = "sandbox"  # DIR/sandbox: the pods' folders, logs and volumes


def _say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def serve(folder: Path) -> int:
    """Be the kubelet of the cluster running in ``folder`` until SIGTERM or SIGINT."""
    folder = folder.resolve()
    state = State.load(folder)
    if state is None:
        raise UserError(f"{folder}: no cluster here (no state file): start one with trainyard cluster up")
    available, why = isolation_available()
    if not available:
        raise UserError(f"the pods need network namespaces ({why}); run as root")
    stop = threading.Event()
    facts = declared.load(repository.load(ROOT), state.cluster)
    started = Started(folder, state, Paths(folder))

    def players() -> list[Daemon]:
        """What up records in the state file as it starts processes; the state read at start if
        the file is gone or is no longer one up wrote (said once per pod, not a crash)."""
        try:
            return (State.load(folder) or state).daemons
        except UserError as exc:
            _say(f"the state file cannot be read again ({exc}); the processes known at start are used")
            return state.daemons

    with started.client() as kube, sandbox_kubelet(kube, facts, folder / WORK, _say, players) as kubelet:
        nodes = kubelet.register()
        _say(f"{len(nodes)}{KUBELET_READY}{', '.join(nodes)}")
        for line in kubelet.provide_storage():
            _say(line)
        kubelet.start()
        # from here a signal ends the loop and the pods are stopped as the context closes (before,
        # the sandbox's own handler stops them and exits)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.is_set():
            try:
                lines = kubelet.step(0.5)
            except (httpx.HTTPError, ApiError) as exc:  # the API server restarting: the next step retries
                _say(f"kube-apiserver did not answer ({exc}); retrying")
                stop.wait(1)
                continue
            for line in lines:
                _say(line)
        _say("stopping: the pods and their network namespaces are removed")
    return 0

"""The sandbox as the kubelet of a local cluster's nodes (``trainyard cluster up`` + ``make demo``).

It registers one Node per node the cluster's facts declare (clusters/<name>/cluster.yaml: each
pool's count, labels and allocatable; ``kubernetes.io/hostname`` is the node's name), keeps each
Ready with its Lease in ``kube-node-lease`` as a kubelet does, and runs the pods kube-scheduler
binds to them through :class:`~trainyard.sandbox.localpods.LocalCluster` (a network namespace
each, ``eth0`` on the cluster bridge, ``net1`` from the NetworkAttachmentDefinition the pod's
networks annotation names, ``/dev/shm`` of the emptyDir's size, the shared claim, init containers
in order). What happens is written back as the kubelet writes it (pods/status: phase, conditions,
podIP, container states with exit codes and restart counts), so Jobs, JobSets, TrainJobs and
Workloads progress. A pod being deleted is stopped, then deleted for good (grace 0), as the
kubelet finishes a deletion; a container that exits non-zero is restarted as the pod's
restartPolicy says, for ever, after the kubelet's CrashLoopBackOff (``waiting: CrashLoopBackOff``
with the last exit as ``lastState`` meanwhile), so a Job's backoffLimit is what ends it.

Contracts followed (the statuses kwok v0.8.0's stages write, and the kubelet's own):
k8s.io/kubernetes@v1.36.5 pkg/kubelet/nodestatus/setters.go (node conditions and addresses),
pkg/kubelet/nodelease (Lease: holderIdentity, leaseDurationSeconds 40, renewTime every 10 s,
owner reference to the Node), pkg/kubelet/status/generate.go (pod conditions) and
kubelet_pods.go convertToAPIContainerStatuses (container states: ``Completed``/``Error`` as the
terminated reason, ``lastState``) and kuberuntime/kuberuntime_manager.go doBackOff (the
``CrashLoopBackOff`` reason and its message).

Not a kubelet: images are not pulled. A container whose image has no local entrypoint (the
trainer image runs ``trainyard launch``) waits with reason ``ErrImagePull`` and says why, as a
node that cannot pull it would; a pod LocalCluster cannot set up (a Secret volume) waits with
``CreateContainerConfigError``. The pods of a Deployment whose part a process of ``cluster up``
plays (the upstream controllers, the fabric webhook) are reported as that process, Ready as their
readiness probe says (played.py).
The identity is the cluster admin's, not ``system:node:<name>``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.components import KUBERNETES_VERSION
from trainyard.cluster.processes import Daemon
from trainyard.contract.errors import UserError
from trainyard.contract.k8s import HOSTNAME_LABEL as HOSTNAME
from trainyard.repo.model.declared import ClusterFacts
from trainyard.sandbox import played
from trainyard.sandbox.localpods import LocalCluster, LocalPod
from trainyard.sandbox.played import Probe

LEASE_SECONDS = 40
RENEW_SECONDS = 10.0
MAX_PODS = "110"  # the kubelet's default --max-pods
PROBE_THREADS = 8  # readiness probes under way at once; each ends within its timeoutSeconds
KUBELET_VERSION = KUBERNETES_VERSION  # as a node reports it: the control plane's own version

Progress = Callable[[str], None]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_names(facts: ClusterFacts) -> list[tuple[str, dict]]:
    """(name, pool) of each node the facts declare: ``<pool>-<index>``."""
    return [(f"{pool.name}-{i}", pool) for pool in facts.spec.node_pools for i in range(pool.count)]  # type: ignore[misc]


def node_object(name: str, pool) -> dict:
    capacity = {k: str(v) for k, v in pool.allocatable.items()}
    capacity.setdefault("pods", MAX_PODS)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **pool.labels,
                HOSTNAME: name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "trainyard.dev/node-pool": pool.name,
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def node_status(name: str, capacity: dict) -> dict:
    now = _now()

    def condition(kind: str, status: str, reason: str, message: str) -> dict:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": capacity,
        "allocatable": capacity,
        "phase": "Running",
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (trainyard sandbox)"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "containerRuntimeVersion": "trainyard-sandbox://1",
            "osImage": "trainyard sandbox",
            "kernelVersion": "",
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
        },
    }


@dataclass
class Tracked:
    """A pod this kubelet runs (or cannot run), by uid."""

    uid: str
    name: str
    namespace: str
    node: str
    local: LocalPod | None
    spec: dict  # the pod's spec (immutable, but for scheduling gates and a few image fields)
    started: str
    waiting: str = ""  # why it cannot start
    reported: str = ""  # the last status sent, to send only changes
    done: bool = False
    played: Daemon | None = None  # the local process that plays its container (played.py)
    probe: Probe | None = None  # the readiness probe sent to that process


@dataclass
class Kubelet:
    kube: Kube
    facts: ClusterFacts
    cluster: LocalCluster
    progress: Progress = print
    # the processes that play Deployments' containers (played.py), read again for a pod none plays
    players: Callable[[], list[Daemon]] = list
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[str, Tracked] = field(default_factory=dict)
    events: queue.Queue = field(default_factory=queue.Queue)
    _renewed: float = 0.0
    _deleted: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _players: list[Daemon] = field(default_factory=list)
    _probing: dict[str, Future] = field(default_factory=dict)  # by pod uid: the probe under way
    _prober: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="kubelet-probe")
    )

    def __post_init__(self) -> None:
        # a kubelet restarts a failed container for ever, with its CrashLoopBackOff; the Job
        # controller counts those restarts against the Job's backoffLimit
        self.cluster.max_restarts = None
        self.cluster.crashloop = True

    # --- nodes -------------------------------------------------------------------------------
    def register(self) -> list[str]:
        """Create (or take over) the declared Nodes, Ready, with their Leases."""
        for name, pool in node_names(self.facts):
            node = node_object(name, pool)
            try:
                self.kube.create(node)
            except ApiError as exc:
                if exc.reason != "AlreadyExists":
                    raise
            got = self.kube.get(f"/api/v1/nodes/{name}")
            self._patch_status(f"/api/v1/nodes/{name}/status", node_status(name, node["status"]["capacity"]))
            joined = name not in self.nodes
            self.nodes[name] = got
            if joined:  # what is bound to it already, as a kubelet's first list: a pod left being deleted among them
                bound = self.kube.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={name}"})
                for pod in bound["items"]:
                    self.events.put(("SYNC", pod))
        self.renew(force=True)
        return list(self.nodes)

    def renew(self, force: bool = False) -> None:
        """Each node's Lease, renewed every 10 s (a node unheard of for 40 s goes NotReady)."""
        if not force and time.monotonic() - self._renewed < RENEW_SECONDS:
            return
        self._renewed = time.monotonic()
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for name, node in self.nodes.items():
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                    ],
                },
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
            }
            self.kube.apply(lease, manager="trainyard-kubelet")

    def _patch_status(self, path: str, status: dict) -> None:
        self.kube.request(
            "PATCH",
            path,
            content=json.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
        )

    # --- storage -----------------------------------------------------------------------------
    def provide_storage(self) -> list[str]:
        """A PersistentVolume for each claim still Pending, pre-bound to it (``claimRef``), so that
        kube-controller-manager's PV controller binds the pair as it binds a provisioned volume.
        The volume is the folder the pods' claim mounts (LocalCluster: ``pvc/<claim>``, shared:
        ReadWriteMany like the NFS class the repository's claims ask for); the provisioner the
        cluster would run for that class does not run here."""
        said = []
        claims = self.kube.get("/api/v1/persistentvolumeclaims")["items"]
        for claim in claims:
            meta, spec = claim["metadata"], claim["spec"]
            if (claim.get("status") or {}).get("phase") != "Pending" or spec.get("volumeName"):
                continue
            folder = self.cluster.workdir / "pvc" / meta["name"]
            folder.mkdir(parents=True, exist_ok=True)
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"pvc-{meta['uid']}", "labels": {"trainyard.dev/sandbox": "true"}},
                "spec": {
                    "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "storageClassName": spec.get("storageClassName") or "",
                    "persistentVolumeReclaimPolicy": "Delete",
                    "hostPath": {"path": str(folder), "type": "DirectoryOrCreate"},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": meta["namespace"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            }
            try:
                self.kube.create(pv)
            except ApiError as exc:
                if exc.reason != "AlreadyExists":
                    raise
                continue
            said.append(f"claim {meta['namespace']}/{meta['name']}: volume {pv['metadata']['name']} ({folder})")
        return said

    # --- pods --------------------------------------------------------------------------------
    def _watch(self) -> None:
        """Pods bound to any node, as watch events, onto ``events`` (re-listing after a break)."""
        while not self._stop.is_set():
            try:
                listing = self.kube.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName!="})
                for pod in listing["items"]:
                    self.events.put(("SYNC", pod))
                version = listing["metadata"]["resourceVersion"]
                params = {
                    "watch": "1",
                    "fieldSelector": "spec.nodeName!=",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "false",
                    "timeoutSeconds": "300",
                }
                with self.kube.http.stream("GET", "/api/v1/pods", params=params, timeout=None) as response:
                    for line in response.iter_lines():
                        if self._stop.is_set():
                            return
                        if line:
                            event = json.loads(line)
                            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                                self.events.put((event["type"], event["object"]))
            except (httpx.HTTPError, ApiError, ValueError):
                if self._stop.wait(0.5):
                    return

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._watch, name="kubelet-watch", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        self._prober.shutdown(wait=False, cancel_futures=True)

    def step(self, timeout: float = 0.2) -> list[str]:
        """Handle what the watch saw, advance the pods, report; returns what happened."""
        said: list[str] = []
        deadline = time.monotonic() + timeout
        latest: dict[str, tuple[str, dict]] = {}  # by uid: only a pod's newest state counts, as in an informer
        while True:
            try:
                kind, pod = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            latest[pod["metadata"]["uid"]] = (kind, pod)
        for kind, pod in latest.values():
            said += self._event(kind, pod)
        said += [f"pod event: {e}" for e in self.cluster.poll()]
        for tracked in list(self.pods.values()):
            said += self._probe(tracked)
            self._report(tracked)
        self.renew()
        return said

    def _event(self, kind: str, pod: dict) -> list[str]:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        if spec.get("nodeName") not in self.nodes:
            return []
        tracked = self.pods.get(uid)
        if kind == "DELETED":
            if tracked is not None:
                self._forget(tracked)
            return []
        if meta.get("deletionTimestamp"):
            if uid in self._deleted:  # a later update of a pod already being deleted
                return []
            self._deleted.add(uid)
            if tracked is not None and tracked.local is not None:
                self.cluster.remove_pod(tracked.local.name, grace=float(spec.get("terminationGracePeriodSeconds", 30)))
            self.pods.pop(uid, None)
            self._probing.pop(uid, None)
            # the kubelet ends a graceful deletion once the containers are gone
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            try:
                self.kube.request("DELETE", path, json={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
            return [f"{meta['name']}: deleted, its containers stopped"]
        phase = (pod.get("status") or {}).get("phase")
        if tracked is not None or phase in ("Succeeded", "Failed"):
            return []
        return self._run(pod)

    def _forget(self, tracked: Tracked) -> None:
        if tracked.local is not None:
            self.cluster.remove_pod(tracked.local.name, grace=0)
        self.pods.pop(tracked.uid, None)
        self._probing.pop(tracked.uid, None)

    def lose(self, node: str) -> list[str]:
        """``node``'s machine is gone: its containers die with it (SIGKILL, nothing reported),
        its Lease is no longer renewed and its Node is deleted, as the cloud provider's node
        controller deletes the Node of a machine that no longer exists. ``register`` brings it back."""
        self.nodes.pop(node)
        said = []
        for tracked in [t for t in self.pods.values() if t.node == node]:
            self._forget(tracked)
            said.append(f"{tracked.name}: lost with {node}")
        self.kube.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        return [*said, f"node {node}: gone (its Node deleted)"]

    def keep_ready(self, stop: threading.Event) -> threading.Thread:
        """Renew the nodes' Leases in a thread until ``stop``, running no pods: nodes for the
        scheduler and Kueue to place pods on, for a caller that looks at the pods, not their run."""

        def renew() -> None:
            while not stop.wait(RENEW_SECONDS / 2):
                with contextlib.suppress(httpx.HTTPError, ApiError):
                    self.renew()

        thread = threading.Thread(target=renew, name="kubelet-leases", daemon=True)
        thread.start()
        return thread

    def _run(self, pod: dict) -> list[str]:
        meta, spec = pod["metadata"], pod["spec"]
        # One LocalCluster holds every node's pods, by name: a pod recreated under its old name
        # (a v1 job's master-0) replaces the stopped one.
        stale = [t for t in self.pods.values() if t.name == meta["name"] and t.namespace == meta["namespace"]]
        for t in stale:
            self._forget(t)
        tracked = Tracked(meta["uid"], meta["name"], meta["namespace"], spec["nodeName"], None, spec, _now())
        self.pods[tracked.uid] = tracked
        if played.of_a_deployment(pod):  # the players are read again only for a pod one may play
            daemon = played.player(pod, self._players) or played.player(pod, self._refresh_players())
            if daemon is not None:
                return self._play(tracked, daemon)
        try:
            local = self.cluster.add_pods([pod], meta["namespace"])[0]
            self._write_projected(pod, local)
            tracked.local = local
            self.cluster.start(local)
        except UserError as exc:
            tracked.waiting = str(exc)
            if tracked.local is not None:
                self.cluster.remove_pod(tracked.local.name, grace=0)
                tracked.local = None
            return [f"{meta['name']} on {spec['nodeName']}: cannot start: {exc}"]
        addresses = ", ".join(f"{i} {a}" for i, a in local.interfaces.items()) or "127.0.0.1"
        return [f"{meta['name']} bound to {spec['nodeName']}: started ({addresses})"]

    def _probe(self, tracked: Tracked) -> list[str]:
        """Send a played pod's readiness probe when due, in a thread of its own as the kubelet's
        prober runs one per container, so that a process that does not answer (stopped, hung)
        delays neither the other pods nor the Leases; its result is counted when it comes."""
        probe, now = tracked.probe, time.monotonic()
        if probe is None:
            return []
        running = self._probing.get(tracked.uid)
        if running is not None:
            if not running.done():
                return []
            del self._probing[tracked.uid]
            if probe.record(running.result(), now):
                return [f"{tracked.name}: {'ready' if probe.ready else 'not ready'} ({probe.url})"]
        elif probe.due(now):
            self._probing[tracked.uid] = self._prober.submit(probe.check)
        return []

    def _refresh_players(self) -> list[Daemon]:
        self._players = [d for d in self.players() if d.plays]
        return self._players

    def _play(self, tracked: Tracked, daemon: Daemon) -> list[str]:
        where = f"{tracked.name} on {tracked.node}"
        containers = tracked.spec["containers"]
        try:
            if len(containers) != 1 or tracked.spec.get("initContainers"):
                raise UserError(f"pod {tracked.name}: a local process plays one container, and it has more")
            tracked.probe = Probe.of(containers[0], daemon.probe_port, time.monotonic())
        except UserError as exc:
            tracked.waiting = str(exc)
            return [f"{where}: cannot be played by {daemon.name}: {exc}"]
        tracked.played = daemon
        return [f"{where}: played by the local process {daemon.name} (pid {daemon.pid})"]

    def _write_projected(self, pod: dict, local: LocalPod) -> None:
        """The token volume's ``namespace`` file (no token: the trainer never calls the API)."""
        for volume in pod["spec"].get("volumes") or []:
            if "projected" in volume:
                folder = self.cluster.workdir / "pods" / local.name / volume["name"]
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "namespace").write_text(local.namespace)

    # --- status ------------------------------------------------------------------------------
    def status(self, tracked: Tracked, pod_spec: dict) -> dict:
        """The pod's status as a kubelet reports it."""
        now = _now()
        local = tracked.local
        containers = pod_spec["containers"]
        inits = pod_spec.get("initContainers") or []
        if tracked.played is not None:
            return _played_status(tracked, now)
        if local is None:
            # the kubelet's reasons: an image it cannot get, or a pod it cannot set up
            reason = "ErrImagePull" if "entrypoint" in tracked.waiting else "CreateContainerConfigError"
            waiting = {"waiting": {"reason": reason, "message": tracked.waiting}}
            statuses = [_container(None, c, waiting) for c in containers]
            return {
                "phase": "Pending",
                "hostIP": "127.0.0.1",
                "startTime": tracked.started,
                "conditions": _conditions(now, initialized=False, ready=False),
                "containerStatuses": statuses,
            }
        policy = pod_spec.get("restartPolicy", "Always")
        init_status = []
        for i, c in enumerate(inits):
            running = i == local.init_done and c["name"] in local.processes
            state = _state(local, c["name"], tracked, running=running, pending="PodInitializing")
            init_status.append(_container(local, c, state))
        statuses = []
        for c in containers:
            proc = local.processes.get(c["name"])
            running = proc is not None and proc.poll() is None
            state = _state(
                local, c["name"], tracked, running=running, pending="PodInitializing" if inits else "ContainerCreating"
            )
            statuses.append(_container(local, c, state))
        failed_init = any(local.exit_codes.get(c["name"], 0) != 0 for c in inits)
        if failed_init:
            phase = "Failed"
        elif all(c["name"] in local.exit_codes for c in containers):
            codes = [local.exit_codes[c["name"]] for c in containers]
            phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            if phase == "Failed" and policy == "Always":
                phase = "Running"  # unreachable in practice: LocalCluster restarts it
        elif local.init_done < len(inits):
            phase = "Pending"
        else:
            phase = "Running"
        ready = phase == "Running" and all("running" in s["state"] for s in statuses)
        for s in statuses:
            s["ready"] = ready
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": local.ip,
            "podIPs": [{"ip": local.ip}],
            "startTime": tracked.started,
            "conditions": _conditions(now, initialized=local.init_done >= len(inits), ready=ready),
            "containerStatuses": statuses,
        }
        if inits:
            status["initContainerStatuses"] = init_status
        return status

    def _report(self, tracked: Tracked) -> None:
        if tracked.done:
            return
        status = self.status(tracked, tracked.spec)
        key = json.dumps({k: v for k, v in status.items() if k != "conditions"}, sort_keys=True)
        if key == tracked.reported:
            return
        path = f"/api/v1/namespaces/{tracked.namespace}/pods/{tracked.name}/status"
        try:
            self.kube.request(
                "PATCH",
                path,
                content=json.dumps({"metadata": {"uid": tracked.uid}, "status": status}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        except ApiError as exc:
            if exc.code in (404, 409):  # gone, or a new pod of the same name (uid precondition)
                self._forget(tracked)
                return
            raise
        tracked.reported = key
        if status["phase"] in ("Succeeded", "Failed"):
            tracked.done = True
            codes = {s["name"]: s["state"]["terminated"]["exitCode"] for s in status["containerStatuses"]
                     if "terminated" in s["state"]}  # fmt: skip
            self.progress(f"{tracked.name}: {status['phase']} (exit codes {codes})")

    def close(self) -> None:
        self.stop()


def _played_status(tracked: Tracked, now: str) -> dict:
    """A pod played by a local process (played.py): no pod IP, its one container that process."""
    daemon = tracked.played
    assert daemon is not None
    if daemon.alive():
        state: dict = {"running": {"startedAt": tracked.started}}
        ready = tracked.probe.ready if tracked.probe is not None else True
    else:
        message = f"the local process that plays it, {daemon.name} (pid {daemon.pid}), has exited"
        state, ready = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}, False
    container = _container(None, tracked.spec["containers"][0], state)
    container["ready"] = ready
    return {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "startTime": tracked.started,
        "conditions": _conditions(now, initialized=True, ready=ready),
        "containerStatuses": [container],
    }


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminated(code: int, started: float, finished: float) -> dict:
    if code < 0:  # killed by a signal: container runtimes report 128 + the signal's number
        code = 128 - code
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": _iso(started),
        "finishedAt": _iso(finished),
    }


def _state(local: LocalPod, name: str, tracked: Tracked, *, running: bool, pending: str) -> dict:
    """One container's state: exited for good, waiting out its back-off, running, or not yet started."""
    if name in local.exit_codes:
        return {"terminated": _terminated(*local.last_exit[name])}
    if name in local.restart_at:
        finished = local.last_exit[name][2]
        message = (
            f"back-off {local.restart_at[name] - finished:.0f}s restarting failed container={name} "
            f"pod={tracked.name}_{tracked.namespace}({tracked.uid})"
        )
        return {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    if running:
        return {"running": {"startedAt": _iso(local.started_at[name])}}
    return {"waiting": {"reason": pending}}


def _container(local: LocalPod | None, spec: dict, state: dict) -> dict:
    name = spec["name"]
    status = {
        "name": name,
        "image": spec.get("image", ""),
        "imageID": "",
        "ready": False,
        "started": "running" in state,
        "restartCount": local.restarts.get(name, 0) if local else 0,
        "state": state,
    }
    if local is not None and name in local.last_exit and "terminated" not in state:
        status["lastState"] = {"terminated": _terminated(*local.last_exit[name])}  # the instance before
    return status


def _conditions(now: str, *, initialized: bool, ready: bool) -> list[dict]:
    def c(kind: str, ok: bool) -> dict:
        return {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": now}

    return [
        c("PodReadyToStartContainers", True),
        c("Initialized", initialized),
        c("Ready", ready),
        c("ContainersReady", ready),
        c("PodScheduled", True),
    ]

"""Pods whose container a local process plays, as the sandbox's kubelet reports them.

``trainyard cluster up`` runs each upstream controller (Kueue, Trainer, JobSet, the v1 training
operator: trainyard/cluster/controllers.py) and the fabric webhook (trainyard/cluster/webhook.py)
as a process on this machine's loopback, not from its image. Once Argo CD syncs their
Deployments, the ReplicaSet controller creates the pods and the scheduler binds them to the
sandbox's nodes; the kubelet then reports such a pod as that process: Running while it lives, and
Ready as the pod's own readiness probe says, sent to the port the process moved its probe
listener to, on the schedule of the kubelet's prober. A Deployment is Available, and Argo CD finds
its Application Healthy, only once the controller answers its probe.

What differs from a pod: every pod of the Deployment is the one process (a second replica, or a
rollout's new pod, is the same process); deleting a pod leaves the process running (``cluster
down`` stops it); and the pod has no IP, since the process listens on the host's loopback, so
the EndpointSlice controller leaves it out of its Service's endpoints
(k8s.io/endpointslice@v0.36.5 util/controller_utils.go ShouldPodBeInEndpoints) and the Service
keeps the route services.py gives it to the process.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from trainyard.cluster.processes import Daemon
from trainyard.contract.errors import UserError

TEMPLATE_HASH = "pod-template-hash"  # k8s.io/api@v0.36.5 apps/v1 DefaultDeploymentUniqueLabelKey
NAME_MAX = 253  # a ReplicaSet name: a DNS-1123 subdomain


def replica_set_name(deployment: str, template_hash: str) -> str:
    """The name the Deployment controller gives the ReplicaSet of a template
    (k8s.io/kubernetes@v1.36.5 pkg/controller/deployment/sync.go generateReplicaSetName)."""
    keep = NAME_MAX - 1 - len(template_hash)
    if len(deployment) > keep > 0:
        deployment = deployment[:keep]
    return f"{deployment}-{template_hash}"


def of_a_deployment(pod: dict) -> bool:
    """Whether ``pod`` may be a Deployment's: a ReplicaSet owns it and it has a template hash (only
    such a pod is looked up among the players)."""
    meta = pod["metadata"]
    owned = any(o.get("kind") == "ReplicaSet" for o in meta.get("ownerReferences") or [])
    return owned and bool((meta.get("labels") or {}).get(TEMPLATE_HASH))


def player(pod: dict, daemons: list[Daemon]) -> Daemon | None:
    """The daemon that plays ``pod``'s Deployment, if one does: its ReplicaSet owner is the
    Deployment's for the pod's template hash."""
    if not of_a_deployment(pod):
        return None
    meta = pod["metadata"]
    template_hash = meta["labels"][TEMPLATE_HASH]
    owners = [o.get("name") for o in meta["ownerReferences"] if o.get("kind") == "ReplicaSet"]
    for daemon in daemons:
        namespace, _, deployment = daemon.plays.partition("/")
        if namespace == meta.get("namespace") and replica_set_name(deployment, template_hash) in owners:
            return daemon
    return None


@dataclass
class Probe:
    """A readiness probe as the kubelet's prober runs it (k8s.io/kubernetes@v1.36.5
    pkg/kubelet/prober/worker.go doProbe): unready until its first success, none before
    ``initialDelaySeconds`` from the container's start, then one every ``periodSeconds``; the result
    changes after ``successThreshold`` successes or ``failureThreshold`` failures in a row. An HTTP
    answer from 200 to 399 is a success (pkg/probe/http/http.go)."""

    url: str
    period: float
    timeout: float
    successes: int
    failures: int
    next_at: float  # monotonic time of the next probe
    ready: bool = False
    last: bool | None = None
    run: int = 0

    @classmethod
    def of(cls, container: dict, port: int, started: float) -> Probe | None:
        """The probe of ``container`` sent to ``127.0.0.1:port``; None if it has no readiness
        probe (ready once running). UserError for one a local process cannot answer."""
        spec = container.get("readinessProbe")
        if not spec:
            return None
        get = spec.get("httpGet")
        if not get or (get.get("scheme") or "HTTP") != "HTTP" or not port:
            raise UserError(
                f"container {container.get('name')}: its readiness probe ({spec}) is not an HTTP GET on the "
                "port its local process answers"
            )
        path = str(get.get("path") or "/")
        return cls(
            url=f"http://127.0.0.1:{port}{path if path.startswith('/') else '/' + path}",
            period=float(spec.get("periodSeconds") or 10),
            timeout=float(spec.get("timeoutSeconds") or 1),
            successes=int(spec.get("successThreshold") or 1),
            failures=int(spec.get("failureThreshold") or 3),
            next_at=started + float(spec.get("initialDelaySeconds") or 0),
        )

    def record(self, ok: bool, now: float) -> bool:
        """Count one result; whether readiness changed."""
        self.next_at = now + self.period
        self.run = self.run + 1 if ok == self.last else 1
        self.last = ok
        if self.run < (self.successes if ok else self.failures) or ok == self.ready:
            return False
        self.ready = ok
        return True

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def check(self) -> bool:
        """One probe: an answer from 200 to 399 within the timeout (redirects not followed)."""
        try:
            return 200 <= httpx.get(self.url, timeout=self.timeout).status_code < 400
        except httpx.HTTPError:
            return False

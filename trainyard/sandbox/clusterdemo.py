"""``make demo``: one job of the dev cluster, end to end, on a real control plane on this machine.

1. git: render and validate the cluster (kustomize, the Argo CD emulation); the offline expansion
   previews the pods the job should get.
2. control plane: ``trainyard cluster up``: etcd, kube-apiserver, kube-controller-manager,
   kube-scheduler, the fabric webhook (or admission policies), and Kueue, JobSet, Kubeflow
   Trainer and the v1 training operator from their releases; the repository, less the demo's job
   folder, committed to ``DIR/repo.git`` and synced into it, then Argo CD itself started on it.
3. nodes: the sandbox registers the nodes the cluster's facts declare and becomes their kubelet
   (trainyard.sandbox.kubelet); the claims get volumes.
4. git push: the job folder is committed and pushed; Argo CD's ApplicationSet controller creates
   the job's Application and its application controller syncs it, shown as Argo CD reports it.
5. the control plane at work: Kueue admits the TrainJob into a topology domain, Trainer builds the
   JobSet, the Job controller creates the pods, kube-apiserver calls the webhook, Kueue lifts its
   topology gate, the scheduler binds them, the kubelet runs them. Each change is shown as the
   API server holds it, with the repository's Argo CD health check (its Lua, from the synced
   argocd-cm) of the TrainJob, JobSet, Workload and the v1 jobs.
6. training: a committed checkpoint, then the container of a worker pod is killed (exit 137);
   the kubelet restarts it as its restartPolicy says, the restart count reaches the API, the
   trainer resumes from the committed step.
7. the TrainJob ends Complete (and the cluster's other jobs, a v1 PyTorchJob in dev, end too);
   everything is stopped and removed.

All along, a real Prometheus (trainyard.sandbox.monitoring) scrapes the trainer pods as the
cluster's PodMonitor says and the webhook as its ServiceMonitor says, and evaluates the
repository's alert rules; the report gives the job's throughput, loss and last checkpoint as
PromQL answers them, and a plot of loss and throughput is written beside it.

``--offline`` keeps the path without Kubernetes (trainyard.sandbox.demo): for a machine without Go.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainyard.cluster import argocd_daemons, controlplane, gitrepo, up
from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.controllers import INSTALLS, RESTARTING
from trainyard.cluster.processes import Daemon
from trainyard.cluster.webhook import WEBHOOK_NAME
from trainyard.contract import reports
from trainyard.contract.errors import UserError, interruption
from trainyard.contract.names import NETWORKS_ANNOTATION, SHM_PATH, TRAINER_REPOSITORY
from trainyard.repo.jobs.preview import is_job
from trainyard.repo.model import declared, repository
from trainyard.repo.upstream import health as argo_health
from trainyard.sandbox.demo import LAUNCH, ROOT, RunLogFollower, preflight_in, say, trainer_config
from trainyard.sandbox.kubelet import Kubelet
from trainyard.sandbox.localpods import LocalCluster, LocalPod, isolation_available
from trainyard.sandbox.monitoring import DemoMonitoring, JobMetrics, job_metrics, plot
from trainyard.sandbox.processes import descendants

STEPS = 7
CONTROLLERS = {c.binary for i in INSTALLS for c in i.controllers}
JOB_KINDS = (
    ("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs"),
    ("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
    ("kubeflow.org/v1", "TFJob", "tfjobs"),
    ("kubeflow.org/v2beta1", "MPIJob", "mpijobs"),
)


@dataclass
class Outcome:
    job: str
    seconds: float = 0.0
    states: dict[str, str] = field(default_factory=dict)  # job -> final state
    killed: str = ""  # the pod whose container was killed, or the node lost
    resumed_from: int | None = None
    restarts: int = 0
    lost_node: str = ""
    evicted: str = ""  # Kueue's reason and message when it evicted the workload
    fault_at: float | None = None  # Unix seconds
    metrics: JobMetrics | None = None  # as Prometheus answers
    plot: Path | None = None
    report_file: Path | None = None


def _api(kind: str, api_version: str, plural: str, namespace: str) -> str:
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}"


def holding(obj: dict, kind: str) -> dict | None:
    """The condition ``kind`` of ``obj`` when it holds (status True), else None."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def _condition(obj: dict, kind: str) -> bool:
    return holding(obj, kind) is not None


def _state(obj: dict) -> str:
    """A one-word state, as kubectl's columns show it."""
    for kind in ("Complete", "Succeeded", "Failed", "Finished", "Completed", "Evicted", "Admitted", "QuotaReserved",
                 "Running", "Suspended", "Created"):  # fmt: skip
        if _condition(obj, kind):
            return kind
    phase = (obj.get("status") or {}).get("phase")
    return phase or "Pending"


def _health_text(cm: dict[str, str], obj: dict) -> str:
    h = argo_health.health(cm, obj)
    if h is None:
        return ""
    message = f": {h['message']}" if h.get("message") else ""
    return f"  [Argo CD health {h['status']}{message}]"


class Watcher:
    """What the API server holds about the demo's namespace, printed as it changes."""

    def __init__(self, kube: Kube, namespace: str, argocd_cm: dict[str, str]) -> None:
        self.kube, self.namespace, self.cm = kube, namespace, argocd_cm
        self.seen: dict[str, str] = {}

    def lines(self) -> list[str]:
        out = []
        listings = [*JOB_KINDS, ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
                    ("kueue.x-k8s.io/v1beta2", "Workload", "workloads"), ("batch/v1", "Job", "jobs"),
                    ("v1", "Pod", "pods")]  # fmt: skip
        for api_version, kind, plural in listings:
            try:
                items = self.kube.get(_api(kind, api_version, plural, self.namespace))["items"]
            except ApiError:
                continue
            for obj in items:
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                key = f"{kind} {obj['metadata']['name']}"
                text = self._describe(kind, obj) + _health_text(self.cm, obj)
                if self.seen.get(key) != text:
                    self.seen[key] = text
                    out.append(f"api: {key}: {text}")
        return out

    def _describe(self, kind: str, obj: dict) -> str:
        status = obj.get("status") or {}
        if kind == "Pod":
            spec = obj["spec"]
            gates = [g["name"] for g in spec.get("schedulingGates") or []]
            state, restarts = pod_status(obj)
            where = f" on {spec['nodeName']}" if spec.get("nodeName") else ""
            extra = f", gated by {', '.join(gates)}" if gates else ""
            extra += f", restarts {restarts}" if restarts else ""
            return f"{state}{where}{extra}"
        if kind == "Workload":
            admission = status.get("admission") or {}
            domains = []
            for ps in admission.get("podSetAssignments") or []:
                for s in (ps.get("topologyAssignment") or {}).get("slices") or []:
                    values = (s.get("valuesPerLevel") or [{}])[-1].get("individual") or {}
                    domains += [values.get("prefix", "") + r for r in values.get("roots") or []]
            where = f" into {', '.join(domains)}" if domains else ""
            return f"{_state(obj)}{where}{_why(obj, 'Failed')}{_why(obj, 'Evicted')}"
        if kind == "Job":
            counts = f"{status.get('succeeded', 0)} succeeded, {status.get('active', 0)} active"
            return f"{_state(obj)}, {counts}{_why(obj, 'Failed')}"
        return f"{_state(obj)}{_why(obj, 'Failed')}"


def _why(obj: dict, kind: str) -> str:
    """The reason and message of a condition that holds (Failed: a Job's BackoffLimitExceeded, the
    JobSet and TrainJob after it; Evicted: Kueue's), as the controller wrote them."""
    c = holding(obj, kind)
    return f" ({_reason(c)})" if c else ""


def _reason(condition: dict) -> str:
    return f"{condition.get('reason', '')}: {condition.get('message', '')}"


def pod_status(pod: dict) -> tuple[str, int]:
    """kubectl's STATUS and RESTARTS columns for a pod (k8s.io/kubernetes@v1.36.5:
    pkg/printers/internalversion/printers.go printPod; sidecars aside, which the sandbox refuses):
    ``Init:CrashLoopBackOff`` for a preflight that keeps failing, ``Init:0/1`` while it runs."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase", "Pending")
    inits = status.get("initContainerStatuses") or []
    restarts = sum(c.get("restartCount", 0) for c in inits)
    initializing = False
    for i, c in enumerate(inits):
        state = c.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        initializing = True
        if terminated:
            reason = "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif waiting and waiting.get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(pod['spec'].get('initContainers') or [])}"
        break
    if not initializing or _condition(pod, "Initialized"):
        restarts, error, running = 0, "", False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += c.get("restartCount", 0)
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif terminated := state.get("terminated"):
                reason = terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}"
                error = reason if terminated.get("exitCode") else error
            elif c.get("ready") and "running" in state:
                running = True
        if reason == "Completed":
            reason = "Running" if running and _condition(pod, "Ready") else error or ("NotReady" if running else reason)
    if pod["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return reason, restarts


def _fabric(pod: dict) -> str:
    """What the fabric admission put in the pod, as stored."""
    container = pod["spec"]["containers"][0]
    nccl = sorted(e["name"] for e in container.get("env") or [] if e["name"].startswith("NCCL_"))
    caps = ((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
    shm = next(
        (
            (v.get("emptyDir") or {}).get("sizeLimit")
            for v in pod["spec"].get("volumes") or []
            for m in container.get("volumeMounts") or []
            if m["mountPath"] == SHM_PATH and m["name"] == v["name"]
        ),
        None,
    )
    networks = (pod["metadata"].get("annotations") or {}).get(NETWORKS_ANNOTATION, "none")
    return f"networks {networks}; {', '.join(nccl) or 'no NCCL env'}; caps {caps or 'none'}; /dev/shm {shm or 'none'}"


def _kill_container(cluster: LocalCluster, pod: LocalPod) -> int:
    """SIGKILL the pod's first container and everything it started (torchrun and its workers)."""
    proc = pod.processes[pod.spec["spec"]["containers"][0]["name"]]
    for pid in [proc.pid, *descendants({proc.pid})]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return proc.pid


def run(args: argparse.Namespace) -> Outcome:
    t0 = time.monotonic()
    repo = repository.load(ROOT)
    cluster_name, job = args.cluster, args.job
    facts = declared.load(repo, cluster_name)
    available, why = isolation_available()
    if not available:
        raise UserError(f"the pods need network namespaces ({why}); run as root, or `make demo OFFLINE=1`")
    say(f"[1/{STEPS}] git: render and validate cluster {cluster_name} (kustomize, the Argo CD emulation)")
    render = up.render_for(repo, cluster_name)
    say(f"      {len(render.apps)} Applications; admission by {facts.spec.admission}")
    outcome = Outcome(job=job)
    with tempfile.TemporaryDirectory(prefix="trainyard-demo-") as tmp, contextlib.ExitStack() as stack:
        work = Path(args.workdir or tmp).resolve()
        folder = work / "cluster"
        say(f"[2/{STEPS}] control plane: trainyard cluster up --cluster {cluster_name} (Kubernetes "
            f"{facts.spec.kubernetes_version}, the controllers of the pinned releases)")  # fmt: skip
        job_folder = _job_folder(render, job)
        started = up.up(repo, cluster_name, folder, argocd=True, leave_out=(job_folder,),
                        progress=lambda line: say(f"      {line}"))  # fmt: skip
        stack.callback(lambda: controlplane.down(folder))
        kube = stack.enter_context(started.client())
        cm = kube.get("/api/v1/namespaces/argocd/configmaps/argocd-cm").get("data") or {}
        kubelet = stack.enter_context(
            sandbox_kubelet(
                kube, facts, work, lambda line: say(f"      kubelet: {line}"), players=lambda: started.state.daemons
            )
        )
        say(f"[3/{STEPS}] nodes: the sandbox registers the declared nodes and is their kubelet")
        nodes = kubelet.register()
        say(f"      {len(nodes)} nodes Ready: {', '.join(nodes)}")
        for line in kubelet.provide_storage():
            say(f"      {line}")
        monitoring = _monitoring(kubelet.cluster, render, work / "prometheus", started.state.daemons)
        stack.callback(monitoring.close)
        kubelet.start()
        deadline = time.monotonic() + args.timeout  # the job's time; a first build is not counted
        say(f"[4/{STEPS}] git push: {job_folder} committed to {started.served.url}")  # type: ignore[union-attr]
        _push_job(kube, started.served, render, job_folder)  # type: ignore[arg-type]
        namespace = _job_namespace(render, job)
        watcher = Watcher(kube, namespace, cm)
        say(f"[5/{STEPS}] the control plane at work on {namespace}/{job} (what kube-apiserver holds, as it changes)")
        began = time.time()
        _follow(kubelet, watcher, kube, namespace, job, outcome, args, deadline, started.state.daemons, monitoring)
        outcome.metrics = job_metrics(monitoring.prometheus, job, cluster_name, began, time.time())
        report_dir = Path(args.report_dir).resolve()
        fault = None
        if outcome.fault_at is not None:
            what = f"node {outcome.lost_node} lost" if outcome.lost_node else "worker killed"
            fault = (outcome.fault_at - began, what)
        outcome.plot = plot(outcome.metrics, job, report_dir / f"{job}.png", fault)
        outcome.report_file = report_dir / f"{job}.txt"
        outcome.seconds = time.monotonic() - t0
        for status, names in argocd_daemons.health(kube).items():  # the platform's, with the job's
            say(f"      argocd: {status}: {', '.join(names)}")
        say(f"[{STEPS}/{STEPS}] stopping: pods, controllers, the control plane; namespaces and bridges removed")
    return outcome


@contextlib.contextmanager
def sandbox_kubelet(kube: Kube, facts, work: Path, progress, players=list) -> Iterator[Kubelet]:
    """The sandbox as the kubelet of ``facts``' nodes: pods in network namespaces under
    ``work/pods``, the trainer image run as ``trainyard launch`` from this environment, and the
    pods of Deployments a local process plays (``players``: the cluster's daemons) reported as that
    process. Stopped, its pods and namespaces removed, on leaving."""
    nads = kube.get("/apis/k8s.cni.cncf.io/v1/network-attachment-definitions")["items"]
    base_env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "OMP_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
    }
    cluster = LocalCluster(work / "pods", nads, {TRAINER_REPOSITORY: LAUNCH}, base_env=base_env, isolate=True)
    try:
        kubelet = Kubelet(kube, facts, cluster, progress=progress, players=players)
        try:
            yield kubelet
        finally:
            kubelet.stop()
    finally:
        cluster.close()


def _monitoring(cluster: LocalCluster, render, folder: Path, daemons: list[Daemon]) -> DemoMonitoring:
    """Prometheus over the sandbox's pods and the local webhook, as the cluster's monitors say."""
    hook = next((d for d in daemons if d.name == WEBHOOK_NAME), None)
    # the webhook's second port is its plain-HTTP probe and metrics listener (trainyard/cluster/webhook.py)
    webhook_metrics = f"127.0.0.1:{hook.ports[1]}" if hook is not None and len(hook.ports) > 1 else None
    monitoring = DemoMonitoring(cluster, list(render.resources()), folder, webhook_metrics)
    monitoring.start()
    jobs = ", ".join(j["job_name"] for j in monitoring.prometheus.config["scrape_configs"])
    rules = sum(len(g.get("rules") or []) for g in monitoring.prometheus.rules)
    say(f"      prometheus {monitoring.prometheus.url}: scrape jobs {jobs}; {rules} rules of the repository loaded")
    if monitoring.not_scraped:
        say(f"      not scraped here: {', '.join(monitoring.not_scraped)} (no endpoint of that Service runs locally)")
    return monitoring


ARGOCD_SYNC_TIMEOUT = 120.0


def _job_folder(render, job: str) -> str:
    """The job folder (relative to the repository) whose Application holds ``job``."""
    for ar in render.apps:
        if ar.app.generated_by and any(r.name == job and is_job(r.doc) for r in ar.resources):
            return str(ar.app.source.get("path", ""))
    raise UserError(f"no job folder of cluster {render.cluster} holds a job {job!r}")


def _push_job(kube: Kube, served: gitrepo.Served, render, job_folder: str) -> None:
    """Commit the job folder to the cluster's repository and push it; follow Argo CD creating and
    syncing its Application, as Argo CD reports it."""
    shutil.copytree(ROOT / job_folder, served.checkout / job_folder)
    pushed_at = dt.datetime.now(dt.UTC)
    revision = gitrepo.commit_and_push(served, f"{Path(job_folder).name}: a training job")
    app = next(ar.app for ar in render.apps if ar.app.generated_by and ar.app.source.get("path") == job_folder)
    say(f"      pushed {revision[:12]}; the ApplicationSet {app.generated_by} makes Application {app.name}")
    synced = argocd_daemons.wait_synced(kube, app.name, revision, ARGOCD_SYNC_TIMEOUT, since=pushed_at)
    for line in argocd_daemons.describe_sync(synced):
        say(f"      argocd: {app.name}: {line}")


def _job_namespace(render, job: str) -> str:
    for ar in render.apps:
        for r in ar.resources:
            if r.name == job and is_job(r.doc):
                return r.namespace or "default"
    raise UserError(f"no job {job!r} in cluster {render.cluster}'s Applications")


def _check_alive(daemons: list[Daemon], restarts: dict[str, int]) -> None:
    """Say when a controller exits (its wrapper restarts it, as its Deployment's kubelet would);
    a control-plane process that dies ends the demo, saying which and why."""
    for d in daemons:
        if not d.alive():
            tail = "\n".join(d.log_tail(2000).splitlines()[-8:])
            raise UserError(f"{d.name} (pid {d.pid}) exited while the job ran; the end of {d.log}:\n{tail}")
        if d.name in restarts:
            lines = [line for line in d.log_tail(50000).splitlines() if line.startswith(RESTARTING)]
            for line in lines[restarts[d.name] :]:
                say(f"      control plane: {d.name}: {line.removeprefix('trainyard: ')}")
            restarts[d.name] = max(restarts[d.name], len(lines))


def _follow(kubelet: Kubelet, watcher: Watcher, kube: Kube, namespace: str, job: str, outcome: Outcome,
            args: argparse.Namespace, deadline: float, daemons: list[Daemon],
            monitoring: DemoMonitoring) -> None:  # fmt: skip
    """Steps 4 to 6: until the job and the namespace's other jobs have ended."""
    log: RunLogFollower | None = None
    restarts = {d.name: 0 for d in daemons if d.name in CONTROLLERS}
    training_said = shown_fabric = waiting_said = False
    max_steps = 0
    while True:
        if time.monotonic() > deadline:
            raise UserError(
                f"the job did not finish within {args.timeout:g} s; the logs are in {kubelet.cluster.workdir}"
            )
        _check_alive(daemons, restarts)
        for line in kubelet.step(0.3):
            say(f"      kubelet: {line}")
        for line in watcher.lines():
            say(f"      {line}")
        monitoring.refresh(kube.get("/api/v1/pods")["items"])
        ours = _job_pods(kubelet, job)
        if ours and not shown_fabric and all(p.processes for p in ours):
            shown_fabric = True
            for p in ours:
                stored = kube.get(f"/api/v1/namespaces/{namespace}/pods/{p.name}")
                addresses = ", ".join(f"{i} {a}" for i, a in p.interfaces.items())
                say(f"      {p.name} ({addresses}): {_fabric(stored)}")
            _, cfg = trainer_config(ours[0].spec)
            max_steps = cfg.max_steps
            path = kubelet.cluster.host_path(ours[0], str(cfg.metrics_path))
            if path is not None:
                log = RunLogFollower(path)
        if log is not None:
            for record in log.read():
                if isinstance(record, reports.Start) and not training_said:
                    training_said = True
                    say(f"[6/{STEPS}] training: world size {record.world_size}, {record.backend}; {max_steps} steps")
                    for p in ours:
                        if p.processes and all(proc.poll() is None for proc in p.processes.values()):
                            for line in preflight_in(kubelet.cluster, p):
                                if " skip:" not in line:
                                    say(f"      {p.name} preflight {line}")
                elif isinstance(record, reports.Resume):
                    outcome.resumed_from = record.step
                    say(f"      resumed from committed step {record.step} (world size {record.world_size})")
                elif isinstance(record, reports.Committed):
                    say(f"      checkpoint step-{record.step} committed")
                elif isinstance(record, reports.Done):
                    say(f"      done: step {record.step}, loss {record.loss:.4f}")
            committed = log.committed()
            halfway = committed and max_steps // 2 <= committed[-1] < max_steps
            if halfway and args.lose_node:
                # the node goes once the namespace's other jobs are done, so that only this job meets
                # it (a v1 job's master there would be run again alone when the node returns)
                others = {k: v for k, v in _job_states(kube, namespace).items() if k != job}
                running = sorted(k for k, v in others.items() if v not in ("Complete", "Succeeded", "Failed"))
                if running and not waiting_said:
                    waiting_said = True
                    say(f"      fault: the node goes once {', '.join(running)} has ended (only {job} meets it)")
                halfway = not running
            if not args.no_fault and not outcome.killed and halfway and len(ours) > 1:
                victim = ours[-1]  # not node rank 0's pod: it hosts the rendezvous
                if args.lose_node:
                    node = next(t.node for t in kubelet.pods.values() if t.local is victim)
                    outcome.killed = outcome.lost_node = node
                    outcome.fault_at = time.time()
                    say(f"      fault: node {node} lost after step {committed[-1]} was committed (its machine gone "
                        "with its pods, its Node deleted)")  # fmt: skip
                    for line in kubelet.lose(node):
                        say(f"      kubelet: {line}")
                else:
                    pid = _kill_container(kubelet.cluster, victim)
                    outcome.killed = victim.name
                    outcome.fault_at = time.time()
                    say(f"      fault: kill -9 of {victim.name}'s container (pid {pid}) after step {committed[-1]} "
                        "was committed; its restartPolicy restarts it")  # fmt: skip
        if outcome.lost_node and not outcome.evicted:
            evicted = _evicted(kube, namespace, job)
            if evicted:
                outcome.evicted = evicted
                for line in watcher.lines():  # while it is evicted: Kueue admits it again once the node is back
                    say(f"      {line}")
                say(f"      Kueue evicted the workload ({evicted}) and requeued it; the node returns:")
                kubelet.register()
                say(f"      kubelet: node {outcome.lost_node} registered again, Ready")
        states = _job_states(kube, namespace)
        if job in states and all(s in ("Complete", "Succeeded", "Failed") for s in states.values()):
            outcome.states = states
            outcome.restarts = sum(sum(p.restarts.values()) for p in _job_pods(kubelet, job))
            for line in watcher.lines():
                say(f"      {line}")
            break
    if outcome.states[job] == "Failed":
        raise UserError(f"job {job} failed (its controller's reason above){_last_log(kubelet, job, args)}")


def _evicted(kube: Kube, namespace: str, job: str) -> str:
    """Kueue's reason and message when it has evicted the job's Workload, else ''."""
    for w in kube.get(_api("Workload", "kueue.x-k8s.io/v1beta2", "workloads", namespace))["items"]:
        if any(o.get("name") == job for o in w["metadata"].get("ownerReferences") or []):
            c = holding(w, "Evicted")
            return _reason(c) if c else ""
    return ""


def _last_log(kubelet: Kubelet, job: str, args: argparse.Namespace) -> str:
    """The end of the job's container log written last, where the failure says itself (a failed
    preflight, a trainer that exited), and where the logs stay."""
    logs = sorted((kubelet.cluster.workdir / "logs").glob(f"{job}-*.log"), key=lambda p: p.stat().st_mtime)
    if not logs:
        return ""
    tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-12:])
    kept = f"the logs are in {logs[-1].parent}" if args.workdir else "--workdir DIR keeps the logs"
    return f"; the end of {logs[-1].name} ({kept}):\n{tail}"


def _job_pods(kubelet: Kubelet, job: str) -> list[LocalPod]:
    return sorted(
        (t.local for t in kubelet.pods.values() if t.local is not None and t.name.startswith(f"{job}-")),
        key=lambda p: p.name,
    )


def _job_states(kube: Kube, namespace: str) -> dict[str, str]:
    states = {}
    for api_version, kind, plural in JOB_KINDS:
        try:
            items = kube.get(_api(kind, api_version, plural, namespace))["items"]
        except ApiError:
            continue
        for obj in items:
            states[obj["metadata"]["name"]] = _state(obj)
    return states


def report(outcome: Outcome) -> None:
    lines = [f"== report: {outcome.job}"]
    lines += [f"   {name}: {state}" for name, state in sorted(outcome.states.items())]
    if outcome.lost_node:
        lines.append(
            f"   fault: node {outcome.lost_node} lost; Kueue evicted the workload ({outcome.evicted}), requeued "
            f"it and admitted it again once the node returned; resumed from committed step {outcome.resumed_from}"
        )
    elif outcome.killed:
        lines.append(f"   fault: {outcome.killed}'s container killed; container restarts {outcome.restarts}; "
                     f"resumed from committed step {outcome.resumed_from}")  # fmt: skip
    lines.append(f"   total time {outcome.seconds:.0f} s")
    if outcome.metrics is not None:
        lines.append("   as Prometheus answers (PromQL over what it scraped from the pods' metrics port):")
        width = max(len(what) for what, _, _ in outcome.metrics.lines)
        lines += [f"     {what:<{width}}  {value:<16} {query}" for what, value, query in outcome.metrics.lines]
        lines.append(f"     alerts firing at the end: {', '.join(outcome.metrics.firing) or 'none'}")
    say()
    for line in lines:
        say(line)
    if outcome.report_file is not None:
        outcome.report_file.parent.mkdir(parents=True, exist_ok=True)
        outcome.report_file.write_text("\n".join(lines) + "\n")
        say(f"   written to {outcome.report_file}, with the plot of loss and throughput {outcome.plot}")


def main(args: argparse.Namespace) -> int:
    try:
        outcome = run(args)
    except KeyboardInterrupt as exc:
        word, status = interruption(exc)
        print(f"{word}; everything the demo started was stopped and removed", file=sys.stderr)
        return status
    report(outcome)
    if args.lose_node and not outcome.lost_node:
        raise UserError(
            "--lose-node: the namespace's other jobs were still running at the job's last checkpoint, so no node "
            "was lost; run it again, or a longer job (--job)"
        )
    if outcome.killed and outcome.resumed_from is None:
        raise UserError("the killed worker's job did not resume from a checkpoint")
    return 0

"""``trainyard demo`` (``make demo``): the whole path of one job, on this machine.

1. Render and validate the ``dev`` cluster from git (real kustomize, the Argo CD emulation).
2. Start the fabric webhook with the cluster's profile, over TLS with fresh certificates.
3. Expand the demo job (``overlays/dev/jobs/smoke-ddp``, a TrainJob) into the pods its
   controllers create (Kueue admits it, Kubeflow Trainer builds the JobSet from the cluster's
   runtime, JobSet and the Job controller create the pods: trainyard.repo.jobs.preview), send each to
   the webhook as an AdmissionReview over HTTPS as kube-apiserver does, apply the patch, check
   the result with the ValidatingAdmissionPolicy's CEL and the Kubernetes schema, then name the
   pod (``generateName``) as the API server does and lift Kueue's topology gate as its ungater
   does. A v1 job (``--job mnist-ddp``, a PyTorchJob) goes the same way through the Training
   Operator's expansion.
4. Run each pod as a process group from its final spec: its own network namespace, ``eth0`` on
   a "cluster" bridge and, because its networks annotation asks for it, ``net1`` on the fabric
   bridge, addresses from the NAD's range, ``/dev/shm`` from its emptyDir, init containers
   first (the runtime's preflight) (trainyard.sandbox.localpods).
5. Train through ``trainyard launch`` (preflight, torchrun, ``trainer train``) with checkpoints;
   halfway, kill -9 a training process in the last pod; the job resumes from the last
   committed step.
6. Report what the webhook injected, what ``trainyard preflight --json`` finds in each running
   trainer container, the bytes each pod sent and received on ``net1`` and ``eth0``, first and
   last loss, the step it resumed from and the total time.

``--admission policy`` runs the other admission mode instead, offline and in seconds: after step 1,
the job's pods go through the cluster's MutatingAdmissionPolicies (their CEL evaluated by a compiled
CEL runtime, trainyard.repo.generate.mutating_harness) and through the webhook's engine; the demo shows
what each policy did, that both give the same pod, that a second pass changes nothing and that the
ValidatingAdmissionPolicy admits the result. No webhook, pods or training. A cluster in webhook mode
is shown what base/mutating-policy would do there with its own parameters.

The demo reads the trainer's products only through declared contracts: the trainer's own argument
parser for the job's arguments (trainer.options), the run log schema for its progress and
preflight's JSON for the checks (trainyard.contract.reports).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import secrets
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import jsonpatch
import orjson

from trainer import options
from trainyard.contract import reports
from trainyard.contract.argv import split_passthrough
from trainyard.contract.errors import UserError, interruption
from trainyard.contract.names import KUEUE_TOPOLOGY_GATE, SHM_VOLUME, TRAINER_REPOSITORY
from trainyard.repo import validate
from trainyard.repo.generate import mutating_harness, mutating_policy
from trainyard.repo.jobs import preview
from trainyard.repo.model import rendered_facts, repository, schema
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.upstream import jobset, vap
from trainyard.sandbox.localpods import LocalCluster, LocalPod
from trainyard.sandbox.processes import training_workers
from trainyard.sandbox.webhook_process import LocalWebhook
from webhook.certs import generate
from webhook.review import admission_review

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ["trainyard", "launch"]  # the trainer image's entrypoint
# k8s.io/apimachinery pkg/util/rand/rand.go alphanums: what the API server's name generator
# (k8s.io/apiserver pkg/storage/names/generate.go, SimpleNameGenerator) appends to a generateName
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# who creates the pods, in the AdmissionReview's userInfo (the Job controller for a TrainJob's pods)
CREATORS = {
    "TrainJob": "system:serviceaccount:kube-system:job-controller",
    "default": "system:serviceaccount:kubeflow:training-operator",
}


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass
class PodResult:
    name: str
    injected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ops: int = 0
    review_ms: float = 0.0
    policy_before: list[str] = field(default_factory=list)  # the admission policy's rejections
    policy_after: list[str] = field(default_factory=list)
    schema_errors: list[str] = field(default_factory=list)
    interfaces: dict[str, str] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    preflight: list[str] = field(default_factory=list)  # the checks `trainyard launch` ran in the pod
    restarts: int = 0
    exit_code: int | None = None


@dataclass
class Summary:
    cluster: str
    job: str
    profile: str = ""
    cluster_id: str = ""  # names the namespaces, bridges and veths of the run (ty<id>...)
    workdir: str = ""
    isolated: bool = False
    why_not_isolated: str = ""
    pods: list[PodResult] = field(default_factory=list)
    max_steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    killed: dict | None = None  # pod, pid, the last step committed before the kill
    resumed_from: int | None = None
    done_step: int | None = None
    seconds: float = 0.0


# --- 1 to 3: git, webhook, admission ---------------------------------------------------------


def trainer_config(pod: dict) -> tuple[list[str], options.TrainConfig]:
    """The train arguments of a pod's trainer container (the first container: the job bases and
    the runtimes put it first) and the configuration the trainer's own parser makes of them."""
    name = jobset.pod_name(pod)
    container = pod["spec"]["containers"][0]
    command = container.get("command")
    if command not in (None, LAUNCH):
        raise UserError(
            f"pod {name}: container {container['name']} runs {' '.join(command)!r}, not the trainer image's "
            f"entrypoint `{' '.join(LAUNCH)}`; the demo runs jobs whose pods start training through it "
            "(PyTorchJob; an MPIJob's launcher runs mpirun)"
        )
    launch_args, train_args = split_passthrough(container.get("args") or [])
    if launch_args or train_args is None:
        raise UserError(f"pod {name}: expected the container's args as `-- TRAIN ARGS`, got {container.get('args')}")
    parser = argparse.ArgumentParser(prog=f"{name}: trainyard train", add_help=False)
    options.add_arguments(parser)
    try:
        parsed = parser.parse_args(train_args)
    except SystemExit:
        raise UserError(f"pod {name}: the trainer would refuse its arguments (see above)") from None
    return train_args, options.from_args(parsed)


def override(pods: list[dict], extra: list[str]) -> None:
    """Append ``extra`` train arguments to every pod (the trainer's parser takes the last value)."""
    for pod in pods:
        container = pod["spec"]["containers"][0]
        container["args"] = [*container["args"], *extra]


def api_server_name(pod: dict) -> dict:
    """The pod as stored: named from its generateName (after mutating admission, as the API server does)."""
    meta = pod["metadata"]
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"][:58] + "".join(secrets.choice(NAME_ALPHABET) for _ in range(5))
    return pod


def kueue_ungate(pod: dict) -> bool:
    """What Kueue's topology ungater does once it has assigned the pod to its domain (kubernetes-sigs/kueue@v0.19.2:
    pkg/controller/tas/topology_ungater.go): remove the gate (and pin the domain's node labels, which
    on one machine is nothing). Returns whether the pod was gated."""
    spec = pod["spec"]
    gates = spec.get("schedulingGates") or []
    kept = [g for g in gates if g.get("name") != KUEUE_TOPOLOGY_GATE]
    if kept:
        spec["schedulingGates"] = kept
    else:
        spec.pop("schedulingGates", None)
    return len(kept) != len(gates)


def admit_pods(
    client: httpx.Client, pods: list[dict], ctx: preview.Context, summary: Summary, creator: str
) -> list[dict]:
    """Send each pod to the webhook over HTTPS; return the pods as admitted, checked, named."""
    admitted = []
    for pod in pods:
        name, namespace = jobset.pod_name(pod), pod["metadata"]["namespace"]
        result = PodResult(name)
        result.policy_before = vap.check(pod, ctx.params, ctx.policy).failures
        t0 = time.perf_counter()
        review = admission_review(pod, namespace, userInfo={"username": creator})
        r = client.post("/mutate", content=orjson.dumps(review), headers={"content-type": "application/json"})
        result.review_ms = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise UserError(f"the webhook answered {r.status_code} for pod {name}: {r.text[:300]}")
        response = r.json()["response"]
        if not response["allowed"]:
            raise UserError(f"the webhook denied pod {name}: {response['status']['message']}")
        ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        final = jsonpatch.apply_patch(pod, ops)  # what kube-apiserver does with the answer
        result.ops, result.warnings = len(ops), response.get("warnings", [])
        result.injected = preview.injected(pod, final)
        verdict = vap.check(final, ctx.params, ctx.policy)
        result.policy_after = verdict.failures
        result.schema_errors = schema.validate(final)
        summary.pods.append(result)
        say(
            f"      {name}: {len(ops)} patch operations in {result.review_ms:.1f} ms over HTTPS; "
            f"admission policy: {'rejects' if result.policy_before else 'admits'} it as created, "
            f"{'REJECTS' if verdict.failures else 'admits'} it as mutated; "
            f"schema: {'INVALID' if result.schema_errors else 'valid'}"
        )
        problems = result.policy_after + result.schema_errors
        if problems:
            raise UserError(f"pod {name} would not be admitted: " + "; ".join(problems))
        api_server_name(final)
        result.name = final["metadata"]["name"]
        admitted.append(final)
    return admitted


# --- 4 and 5: pods and training ----------------------------------------------------------------


class RunLogFollower:
    """Follows the trainer's run log (rank 0 writes it on the shared checkpoint volume)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.steps: list[reports.Step] = []
        self.events: list[reports.Event] = []

    def read(self) -> list[reports.Step | reports.Event]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # only whole lines
        self.offset += end
        new: list[reports.Step | reports.Event] = []
        for line in data[:end].splitlines():
            if line.strip():
                record = reports.decode(line, str(self.path))
                if isinstance(record, reports.Step):
                    self.steps.append(record)
                    new.append(record)
                else:
                    self.events.append(record.record)
                    new.append(record.record)
        return new

    def committed(self) -> list[int]:
        return [e.step for e in self.events if isinstance(e, reports.Committed)]


def training_process(cluster: LocalCluster, pod: LocalPod) -> int | None:
    """A training process of the pod: a worker torchrun started (not torchrun itself)."""
    workers = training_workers(cluster.pids(pod))
    return workers[min(workers)] if workers else None


def preflight_in(cluster: LocalCluster, pod: LocalPod) -> list[str]:
    """``trainyard preflight --json`` inside the pod's running trainer container, as
    ``kubectl exec`` would run it: the checks as lines ``name status: detail``."""
    trainer = pod.spec["spec"]["containers"][0]["name"]
    if pod.processes[trainer].poll() is not None:
        return [f"(container {trainer} exited before preflight could be run in it)"]
    done = cluster.exec(pod, trainer, ["trainyard", "preflight", "--json"])
    checks, _ = reports.read_preflight(done.stdout, f"preflight in {pod.name}")
    return [f"{c.name} {c.status}: {c.detail}" for c in checks]


def _report_record(record: reports.Step | reports.Event, summary: Summary, every: int, reported: list[int]) -> None:
    if isinstance(record, reports.Start) and record.resumed_from is None and summary.first_loss is None:
        say(f"      training: world size {record.world_size}, {record.backend} on {record.device}")
    elif isinstance(record, reports.Resume):
        summary.resumed_from = record.step
        say(f"      resumed from committed step {record.step} (world size {record.world_size})")
    elif isinstance(record, reports.Committed) and record.step - reported[0] >= every:
        reported[0] = record.step
        say(f"      checkpoint step-{record.step} committed")
    elif isinstance(record, reports.Done):
        summary.done_step, summary.last_loss = record.step, record.loss
        say(f"      done: step {record.step}, loss {record.loss:.4f}")
    elif isinstance(record, reports.Step):
        if record.step == 1 and summary.first_loss is None:
            summary.first_loss = record.loss
        elif record.step % every == 0:
            say(f"      step {record.step}/{summary.max_steps} loss {record.loss:.4f}")


def train(
    cluster: LocalCluster,
    pods: list[LocalPod],
    log: RunLogFollower,
    summary: Summary,
    fault: bool,
    deadline: float,
) -> None:
    """Follow the job to its end: progress from the run log, pod events, the fault, failures."""
    victim = pods[-1]  # not the pod of node rank 0: that one hosts the rendezvous
    every, reported = max(1, summary.max_steps // 6), [0]
    while summary.done_step is None or not all(p.finished for p in pods):
        if time.monotonic() > deadline:
            raise UserError("the job did not finish in time; see the pod logs above")
        for event in cluster.poll():
            say(f"      pod event: {event}")
        for record in log.read():
            _report_record(record, summary, every, reported)
        committed = log.committed()
        # halfway, and never once the last step is committed: a kill while the processes exit
        # would leave torchrun restarting a group whose other half has finished
        halfway = committed and summary.max_steps // 2 <= committed[-1] < summary.max_steps
        if fault and summary.killed is None and halfway and summary.done_step is None:
            pid = training_process(cluster, victim)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                summary.killed = {"pod": victim.name, "pid": pid, "last_committed": committed[-1]}
                say(
                    f"      fault: kill -9 of training process {pid} in {victim.name} "
                    f"(after step {committed[-1]} was committed)"
                )
        failed = [p for p in pods if any(code != 0 for code in p.exit_codes.values())]
        if failed:
            raise UserError(
                "pod(s) failed: "
                + ", ".join(f"{p.name} ({p.exit_codes})" for p in failed)
                + f"; logs: {', '.join(str(log) for p in failed for log in p.logs.values())}"
            )
        time.sleep(0.1)


# --- 6: report ------------------------------------------------------------------------------------


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def report(summary: Summary) -> None:
    say()
    say(f"== report: job {summary.job} on cluster {summary.cluster} (fabric profile {summary.profile})")
    first = summary.pods[0] if summary.pods else None
    for pod in summary.pods:
        say(f"   {pod.name}")
        if pod is not first and (pod.injected, pod.warnings) == (first.injected, first.warnings):
            say(f"     webhook ({pod.ops} operations, {pod.review_ms:.1f} ms): the same settings as {first.name}")
        else:
            say(f"     webhook ({pod.ops} operations, {pod.review_ms:.1f} ms):")
            for line in pod.injected:
                say(f"       + {line}")
            for warning in pod.warnings:
                say(f"       warning: {warning}")
        if pod.counters:
            for iface in sorted(pod.counters):
                c = pod.counters[iface]
                say(
                    f"     {iface:5} {pod.interfaces.get(iface, ''):15} "
                    f"sent {_bytes(c['tx']):>9}   received {_bytes(c['rx']):>9}"
                )
        for line in pod.preflight:
            if not line.split(": ", 1)[0].endswith(" skip"):
                say(f"     preflight {line}")
        say(f"     exit code {pod.exit_code}, container restarts {pod.restarts}")
    if summary.isolated:
        net1 = sum(p.counters.get("net1", {}).get("tx", 0) for p in summary.pods)
        eth0 = sum(p.counters.get("eth0", {}).get("tx", 0) for p in summary.pods)
        say(f"   collective traffic: net1 carried {_bytes(net1)}, eth0 {_bytes(eth0)} ({net1 / max(eth0, 1):.0f}x)")
    else:
        say(f"   pods ran as local processes ({summary.why_not_isolated}): no per-pod interfaces or counters")
    say(f"   loss: first {summary.first_loss:.4f}, last {summary.last_loss:.4f}")
    if summary.killed:
        say(
            f"   fault: killed {summary.killed['pod']} after step {summary.killed['last_committed']} was committed; "
            f"resumed from committed step {summary.resumed_from}"
        )
    say(f"   total time {summary.seconds:.0f} s")


# --- main ---------------------------------------------------------------------------------------


def render_and_validate(repo: repository.Repository, args: argparse.Namespace, summary: Summary, steps: int = 6):
    """Step 1: the cluster from git; returns the demo job's preview, admission on the cluster and its facts."""
    say(f"[1/{steps}] git: render and validate cluster {args.cluster} (kustomize, Argo CD emulation)")
    report_ = validate.validate(repo, [repo.require_cluster(args.cluster)])
    render = report_.renders[args.cluster]
    for problem in report_.errors():
        say(f"      error: {problem}")
    if report_.errors():
        raise UserError(f"cluster {args.cluster} does not validate")
    jobs = {jp.job.name: jp for jp in report_.previews[args.cluster]}
    if args.job not in jobs:
        raise UserError(f"no job {args.job!r} in overlays/{args.cluster}/jobs (jobs: {', '.join(sorted(jobs))})")
    resources = render.resources()
    ctx = preview.load_context(repo, args.cluster, resources)
    summary.profile = ctx.profile
    say(f"      {len(render.apps)} Applications, {len(resources)} objects, 0 errors; fabric profile {ctx.profile}")
    return jobs[args.job], ctx, rendered_facts.collect(resources)


def job_pods(
    jp: preview.JobPreview, args: argparse.Namespace, summary: Summary
) -> tuple[list[dict], options.TrainConfig]:
    """The pods the job's controllers create (as the previews expanded them), with the demo's
    overrides, and the trainer's configuration as its own parser reads their arguments."""
    pods = [tree_copy(p.before) for p in jp.pods]
    extra = []
    if args.max_steps is not None:
        extra += ["--max-steps", str(args.max_steps)]
    if args.checkpoint_every is not None:
        extra += ["--checkpoint-every", str(args.checkpoint_every)]
    override(pods, extra)
    configs = [trainer_config(pod)[1] for pod in pods]  # every pod's arguments must be valid
    cfg = configs[0]
    if cfg.checkpoint_dir is None or cfg.metrics_path is None:
        raise UserError(f"job {args.job}: its trainer has no --checkpoint-dir; the demo needs one to resume")
    summary.max_steps = cfg.max_steps
    return pods, cfg


def local_cluster(work: Path, facts: rendered_facts.Facts, args: argparse.Namespace, summary: Summary) -> LocalCluster:
    base_env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "OMP_NUM_THREADS": "1",  # the pods share this machine's cores
        "LANG": "C.UTF-8",
    }
    cluster = LocalCluster(
        work,
        [r.doc for r in facts.nads.values()],
        {TRAINER_REPOSITORY: LAUNCH},
        base_env=base_env,
        isolate=False if args.no_netns else None,
    )
    summary.isolated, summary.why_not_isolated = cluster.isolated, cluster.why_not_isolated
    summary.cluster_id = cluster.id
    return cluster


def run_pods(cluster: LocalCluster, admitted: list[dict], namespace: str, cfg: options.TrainConfig,
             args: argparse.Namespace, summary: Summary, deadline: float) -> None:  # fmt: skip
    """Steps 4 and 5: the pods in their namespaces, training, the fault, the results per pod."""
    if cluster.isolated:
        say(
            f"[4/6] pods: a network namespace each (ty-{cluster.id}-*), eth0 on the cluster bridge, "
            "net1 on the fabric bridge"
        )
    else:
        say(f"[4/6] pods: LOCAL PROCESSES on 127.0.0.1, not isolated ({cluster.why_not_isolated});")
        say("      run as root with iproute2 for per-pod eth0/net1 and traffic counters")
    local = cluster.add_pods(admitted, namespace)
    for pod, result in zip(local, summary.pods, strict=True):
        result.interfaces = dict(pod.interfaces)
        shm = next(
            (v["emptyDir"].get("sizeLimit") for v in pod.spec["spec"]["volumes"] if v["name"] == SHM_VOLUME),
            "none",
        )
        addresses = ", ".join(f"{i} {a}" for i, a in pod.interfaces.items()) or "127.0.0.1"
        say(f"      {pod.name}: {addresses}, /dev/shm {shm}")

    say(f"[5/6] training: {summary.max_steps} steps, trainyard launch (preflight, torchrun, train) in each pod")
    shared = cluster.host_path(local[0], str(cfg.metrics_path))
    if shared is None:
        raise UserError(f"the job's run log {cfg.metrics_path} is on no volume of the pod")
    log = RunLogFollower(shared)
    for pod in local:
        cluster.start(pod)
    try:
        wait_for_start(cluster, local, log, deadline)
        for pod, result in zip(local, summary.pods, strict=True):
            result.preflight = preflight_in(cluster, pod)
        train(cluster, local, log, summary, fault=not args.no_fault, deadline=deadline)
    except UserError:
        for pod in local:
            for path in pod.logs.values():
                say(f"--- {path} (last lines)")
                say("\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        raise
    for pod, result in zip(local, summary.pods, strict=True):
        result.counters = cluster.counters(pod)
        result.restarts = sum(pod.restarts.values())
        result.exit_code = max(pod.exit_codes.values())


def run(args: argparse.Namespace) -> Summary:
    started = time.monotonic()
    deadline = started + args.timeout
    repo = repository.load(ROOT)
    summary = Summary(cluster=args.cluster, job=args.job)
    jp, ctx, facts = render_and_validate(repo, args, summary)
    job = jp.job
    pods, cfg = job_pods(jp, args, summary)
    with tempfile.TemporaryDirectory(prefix="trainyard-demo-") as tmp, contextlib.ExitStack() as stack:
        work = Path(args.workdir or tmp)
        summary.workdir = str(work)
        tls = work / "tls"
        say(f"[2/6] webhook: certificates for 127.0.0.1, trainyard serve --profile {ctx.profile} over TLS")
        generate(tls)
        webhook = LocalWebhook(repo.root / "policies", tls, tls / "ca.crt", ctx.profile, log=work / "webhook.log")
        stack.callback(webhook.stop)
        client = stack.enter_context(webhook.client())
        say(f"      listening on {webhook.base}")
        say(f"[3/6] admission: {job.kind} {args.job} ({job.source}) -> {len(pods)} pods, as kube-apiserver sends them")
        for note in jp.notes:
            say(f"      {note}")
        admitted = admit_pods(client, pods, ctx, summary, CREATORS.get(job.kind, CREATORS["default"]))
        if any(not p["metadata"].get("name") for p in pods):
            say(f"      the API server names them: {', '.join(p['metadata']['name'] for p in admitted)}")
        gated = [pod["metadata"]["name"] for pod in admitted if kueue_ungate(pod)]
        if gated:
            say(f"      Kueue's ungater lifts its topology gate from {len(gated)} pods; they start")
        cluster = local_cluster(work, facts, args, summary)
        stack.callback(cluster.close)
        run_pods(cluster, admitted, job.namespace or "default", cfg, args, summary, deadline)
        summary.seconds = time.monotonic() - started
    say("[6/6] cleaned up: pods stopped, namespaces, bridges and the webhook removed")
    return summary


def wait_for_start(cluster: LocalCluster, pods: list[LocalPod], log: RunLogFollower, deadline: float) -> None:
    """Until the trainer starts (its start event: preflight passed in every pod, the workers met)."""
    while not any(isinstance(e, reports.Start) for e in log.events):
        if time.monotonic() > deadline:
            raise UserError("training did not start in time; see the pod logs above")
        for event in cluster.poll():
            say(f"      pod event: {event}")
        failed = [p for p in pods if any(code != 0 for code in p.exit_codes.values())]
        if failed:
            raise UserError("pod(s) failed before training started: " + ", ".join(p.name for p in failed))
        log.read()
        time.sleep(0.1)
    log.offset, log.steps, log.events = 0, [], []  # train() reports from the first line


def run_policy(args: argparse.Namespace) -> int:
    """``--admission policy``: the job's pods through the MutatingAdmissionPolicies, offline."""
    import yaml

    repo = repository.load(ROOT)
    summary = Summary(cluster=args.cluster, job=args.job)
    jp, ctx, _ = render_and_validate(repo, args, summary, steps=3)
    harness = ctx.harness
    if harness is None:
        path = ROOT / mutating_policy.FOLDER / mutating_policy.FILE
        say(f"[2/3] policies: cluster {args.cluster} runs the webhook (admission: webhook); {path.relative_to(ROOT)}")
        say("      shows what its MutatingAdmissionPolicies would do with its parameters in policy mode")
        harness = mutating_harness.Harness(list(yaml.safe_load_all(path.read_text(encoding="utf-8"))))
    else:
        say(f"[2/3] policies: cluster {args.cluster} applies the fabric by policy (admission: policy), no webhook:")
    count = len(harness.policies)
    say(f"      {count} MutatingAdmissionPolicies compiled (cel-expr-python), defaultFabric {ctx.profile}")
    say(f"[3/3] admission: {jp.job.kind} {args.job} -> {len(jp.pods)} pods through the policies and the engine")
    data = ctx.params.get("data") or {}
    offered = {k.removeprefix("fabric."): v for k, v in data.items() if k.startswith("fabric.")}
    failed = []
    for pod in jp.pods:
        before = mutating_harness.normalise(pod.before)
        namespace = before["metadata"].get("namespace") or "default"
        c = mutating_harness.compare(harness, ctx.policies, before, namespace, ctx.profile)
        outcome = harness.admit(before, namespace=namespace, default=ctx.profile, offered=offered)
        again = harness.admit(outcome.pod, namespace=namespace, default=ctx.profile, offered=offered)
        verdict = vap.check(outcome.pod, ctx.params, ctx.policy)
        say(
            f"      {pod.name}: policy trainyard-fabric-{outcome.profile or '(none)'}: {len(outcome.ops)} operations; "
            f"engine: {'same pod' if c.same and not c.excluded else 'DIFFERENT' if not c.same else 'not compared'}"
            f"{' (' + ', '.join(c.excluded) + ')' if c.excluded else ''}; second pass: "
            f"{'no change' if not again.ops else f'{len(again.ops)} operations'}; admission policy: "
            f"{'REJECTS: ' + '; '.join(verdict.failures) if verdict.failures else 'admits'}"
        )
        for line in preview.injected(before, outcome.pod):
            say(f"        + {line}")
        if not c.same or again.ops or verdict.failures or outcome.errors:
            failed.append(pod.name)
    if failed:
        raise UserError(f"the policy path does not admit {', '.join(failed)} as the engine would")
    say(f"      every pod: the same as the engine's, idempotent, admitted (fabric profile {ctx.profile})")
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "admission", "webhook") == "policy":
        return run_policy(args)
    try:
        summary = run(args)
    except KeyboardInterrupt as exc:
        word, status = interruption(exc)
        print(f"{word}; everything the demo started was stopped and removed", file=sys.stderr)
        return status
    report(summary)
    if args.summary:
        Path(args.summary).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return 0

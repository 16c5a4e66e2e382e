"""``make demo``: the whole path of one job, on this machine.

1. Render and validate the ``dev`` cluster from git (real kustomize, the Argo CD emulation).
2. Start the fabric webhook with the cluster's profile, over TLS with fresh certificates.
3. Expand the demo job (``overlays/dev/jobs/smoke-ddp``) into the pods the Training Operator
   creates, send each to the webhook as an AdmissionReview over HTTPS as kube-apiserver does,
   apply the patch, and check the result with the ValidatingAdmissionPolicy's CEL and the
   Kubernetes schema.
4. Run each pod as a process group from its final spec: its own network namespace, ``eth0`` on
   a "cluster" bridge and, because its networks annotation asks for it, ``net1`` on the fabric
   bridge, addresses from the NAD's range, ``/dev/shm`` from its emptyDir (trainyard.localpods).
5. Train through ``trainyard launch`` (preflight, torchrun, ``trainer train``) with checkpoints;
   halfway, kill -9 a training process in the worker pod; the job resumes from the last
   committed step.
6. Report what the webhook injected, the bytes each pod sent and received on ``net1`` and
   ``eth0``, first and last loss, the step it resumed from and the total time.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import jsonpatch
import orjson

from trainyard.errors import UserError
from trainyard.processes import training_workers
from webhook.review import admission_review

ROOT = Path(__file__).resolve().parents[1]
TRAINER_REPOSITORY = "registry.example.com/ml/trainer"


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
    killed: dict | None = None  # pod, pid, step at the kill, last committed step before it
    resumed_from: int | None = None
    done_step: int | None = None
    seconds: float = 0.0


# --- 1 to 3: git, webhook, admission ---------------------------------------------------------


def _set_arg(args: list[str], flag: str, value: str) -> list[str]:
    if flag in args:
        i = args.index(flag)
        return [*args[: i + 1], value, *args[i + 2 :]]
    return [*args, flag, value]


def admit_pods(client: httpx.Client, pods: list[dict], ctx, summary: Summary) -> list[dict]:
    """Send each pod to the webhook over HTTPS; return the pods as admitted, checked."""
    from trainyard import preview, schema, vap

    admitted = []
    for pod in pods:
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        result = PodResult(name)
        result.policy_before = vap.check(pod, ctx.params, ctx.policy).failures
        t0 = time.perf_counter()
        r = client.post(
            "/mutate",
            content=orjson.dumps(admission_review(pod, namespace)),
            headers={"content-type": "application/json"},
        )
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
        admitted.append(final)
    return admitted


# --- 4 and 5: pods and training ----------------------------------------------------------------


class Metrics:
    """Follows the trainer's metrics.jsonl (rank 0 writes it on the shared checkpoint volume)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.lines: list[dict] = []

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # only whole lines
        self.offset += end
        new = [orjson.loads(line) for line in data[:end].splitlines() if line.strip()]
        self.lines += new
        return new

    def events(self, name: str) -> list[dict]:
        return [e for e in self.lines if e.get("event") == name]

    @property
    def steps(self) -> list[dict]:
        return [e for e in self.lines if "event" not in e and "step" in e]


def training_process(cluster, pod) -> int | None:
    """A training process of the pod: a worker torchrun started (not torchrun itself)."""
    workers = training_workers(cluster.pids(pod))
    return workers[min(workers)] if workers else None


def train(cluster, pods, metrics: Metrics, summary: Summary, fault: bool, deadline: float) -> None:
    victim = pods[-1]  # a worker: the master hosts the rendezvous
    reported = 0
    while summary.done_step is None or not all(p.finished for p in pods):
        if time.monotonic() > deadline:
            raise UserError("the job did not finish in time; see the pod logs above")
        for event in cluster.poll():
            say(f"      pod event: {event}")
        for line in metrics.read():
            event = line.get("event")
            if event == "start" and line.get("resumed_from") is None and summary.first_loss is None:
                say(f"      training: world size {line['world_size']}, {line['backend']} on {line['device']}")
            elif event == "resume":
                summary.resumed_from = line["step"]
                say(f"      resumed from committed step {line['step']} (world size {line['world_size']})")
            elif event == "committed":
                if line["step"] - reported >= max(1, summary.max_steps // 6):
                    reported = line["step"]
                    say(f"      checkpoint step-{line['step']} committed")
            elif event == "done":
                summary.done_step, summary.last_loss = line["step"], line["loss"]
                say(f"      done: step {line['step']}, loss {line['loss']:.4f}")
            elif event is None and line.get("step") == 1 and summary.first_loss is None:
                summary.first_loss = line["loss"]
            elif event is None and line["step"] % max(1, summary.max_steps // 6) == 0:
                say(f"      step {line['step']}/{summary.max_steps} loss {line['loss']:.4f}")
        committed = metrics.events("committed")
        if fault and summary.killed is None and committed and committed[-1]["step"] >= summary.max_steps // 2:
            pid = training_process(cluster, victim)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                summary.killed = {
                    "pod": victim.name,
                    "pid": pid,
                    "last_committed": committed[-1]["step"],
                    "last_step": metrics.steps[-1]["step"] if metrics.steps else None,
                }
                say(
                    f"      fault: kill -9 of training process {pid} in {victim.name} "
                    f"(last committed step {committed[-1]['step']})"
                )
        if any(p.exit_codes.get(c, 0) != 0 for p in pods for c in p.exit_codes):
            failed = [p for p in pods if any(code != 0 for code in p.exit_codes.values())]
            raise UserError(
                "pod(s) failed: "
                + ", ".join(f"{p.name} ({p.exit_codes})" for p in failed)
                + f"; logs: {', '.join(str(log) for p in failed for log in p.logs.values())}"
            )
        time.sleep(0.1)


# --- 6: report ------------------------------------------------------------------------------------

_CHECK = re.compile(r"^(\S+)\s+(PASS|WARN|SKIP|FAIL|ERROR)\s+(.*)$")


def preflight_lines(log: Path) -> list[str]:
    """The first preflight table in a pod's log (``trainyard launch`` prints it before torchrun)."""
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        m = _CHECK.match(line)
        if m:
            lines.append(f"{m.group(1)} {m.group(2).lower()}: {m.group(3)}")
        elif lines:
            break
    return lines


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def report(summary: Summary) -> None:
    say()
    say(f"== report: job {summary.job} on cluster {summary.cluster} (fabric profile {summary.profile})")
    for pod in summary.pods:
        say(f"   {pod.name}")
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
            f"   fault: killed {summary.killed['pod']} at step {summary.killed['last_step']}; "
            f"resumed from committed step {summary.resumed_from}"
        )
    say(f"   total time {summary.seconds:.0f} s")


# --- main ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> Summary:
    from trainyard import cluster_facts, preview, repository, validate
    from trainyard.localpods import LocalCluster
    from webhook.certs import generate
    from webhook.local import LocalWebhook

    started = time.monotonic()
    deadline = started + args.timeout
    repo = repository.load(ROOT)
    summary = Summary(cluster=args.cluster, job=args.job)
    say(f"[1/6] git: render and validate cluster {args.cluster} (kustomize, Argo CD emulation)")
    report_ = validate.validate(repo, [args.cluster])
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
    facts = cluster_facts.collect(resources)
    summary.profile = ctx.profile
    say(f"      {len(render.apps)} Applications, {len(resources)} objects, 0 errors; fabric profile {ctx.profile}")

    with tempfile.TemporaryDirectory(prefix="trainyard-demo-") as tmp, contextlib.ExitStack() as stack:
        work = Path(args.workdir or tmp)
        tls = work / "tls"
        say(f"[2/6] webhook: certificates for 127.0.0.1, trainyard serve --profile {ctx.profile} over TLS")
        generate(tls)
        webhook = LocalWebhook(repo.root / "policies", tls, tls / "ca.crt", ctx.profile, log=work / "webhook.log")
        stack.callback(webhook.stop)
        client = stack.enter_context(webhook.client())
        say(f"      listening on {webhook.base}")

        job = jobs[args.job].job
        pods = preview.expand_job(job.doc)
        for pod in pods:
            for c in pod["spec"]["containers"]:
                if args.max_steps:
                    c["args"] = _set_arg(c.get("args") or [], "--max-steps", str(args.max_steps))
                if args.checkpoint_every:
                    c["args"] = _set_arg(c["args"], "--checkpoint-every", str(args.checkpoint_every))
        trainer_args = pods[0]["spec"]["containers"][0].get("args") or []
        summary.max_steps = int(trainer_args[trainer_args.index("--max-steps") + 1])
        checkpoint_dir = trainer_args[trainer_args.index("--checkpoint-dir") + 1]
        say(f"[3/6] admission: {job.kind} {args.job} ({job.source}) -> {len(pods)} pods, as kube-apiserver sends them")
        admitted = admit_pods(client, pods, ctx, summary)

        nads = [r.doc for r in facts.nads.values()]
        base_env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(work),
            "OMP_NUM_THREADS": "1",  # the pods share this machine's cores
            "LANG": "C.UTF-8",
        }
        cluster = LocalCluster(
            work,
            nads,
            {TRAINER_REPOSITORY: ["trainyard", "launch"]},
            base_env=base_env,
            isolate=False if args.no_netns else None,
        )
        stack.callback(cluster.close)
        summary.isolated, summary.why_not_isolated = cluster.isolated, cluster.why_not_isolated
        summary.cluster_id, summary.workdir = cluster.id, str(work)
        if cluster.isolated:
            say(
                f"[4/6] pods: a network namespace each (ty-{cluster.id}-*), eth0 on the cluster bridge, "
                "net1 on the fabric bridge"
            )
        else:
            say(f"[4/6] pods: LOCAL PROCESSES on 127.0.0.1, not isolated ({cluster.why_not_isolated});")
            say("      run as root with iproute2 for per-pod eth0/net1 and traffic counters")
        local = cluster.add_pods(admitted, job.namespace or "default")
        for pod, result in zip(local, summary.pods, strict=True):
            result.interfaces = dict(pod.interfaces)
            shm = next(
                (v["emptyDir"].get("sizeLimit") for v in pod.spec["spec"]["volumes"] if v["name"] == "trainyard-shm"),
                "none",
            )
            addresses = ", ".join(f"{i} {a}" for i, a in pod.interfaces.items()) or "127.0.0.1"
            say(f"      {pod.name}: {addresses}, /dev/shm {shm}")

        say(f"[5/6] training: {summary.max_steps} steps, trainyard launch (preflight, torchrun, train) in each pod")
        shared = cluster.host_path(local[0], checkpoint_dir)
        if shared is None:
            raise UserError(f"the job's --checkpoint-dir {checkpoint_dir} is on no volume of the pod")
        metrics = Metrics(shared / "metrics.jsonl")
        for pod in local:
            cluster.start(pod)
        try:
            train(cluster, local, metrics, summary, fault=not args.no_fault, deadline=deadline)
        except UserError:
            for pod in local:
                for log in pod.logs.values():
                    say(f"--- {log} (last lines)")
                    say("\n".join(log.read_text(errors="replace").splitlines()[-15:]))
            raise
        for pod, result in zip(local, summary.pods, strict=True):
            result.counters = cluster.counters(pod)
            result.restarts = sum(pod.restarts.values())
            result.exit_code = max(pod.exit_codes.values())
            trainer = pod.spec["spec"]["containers"][0]["name"]  # the job bases put the trainer first
            result.preflight = preflight_lines(pod.logs[trainer])
        summary.seconds = time.monotonic() - started
    say("[6/6] cleaned up: pods stopped, namespaces, bridges and the webhook removed")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainyard.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cluster", default="dev", help="cluster to take the job from (default dev)")
    parser.add_argument("--job", default="smoke-ddp", help="job folder under overlays/CLUSTER/jobs (default smoke-ddp)")
    parser.add_argument("--no-fault", action="store_true", help="do not kill a training process halfway")
    parser.add_argument(
        "--no-netns",
        action="store_true",
        help="run the pods as plain local processes on 127.0.0.1 (what happens without root or iproute2)",
    )
    parser.add_argument("--max-steps", type=int, help="override the job's --max-steps (a shorter run)")
    parser.add_argument("--checkpoint-every", type=int, help="override the job's --checkpoint-every")
    parser.add_argument("--timeout", type=float, default=300, help="give up after this many seconds (default 300)")
    parser.add_argument("--workdir", help="keep the run's files (logs, checkpoints) here instead of a temp dir")
    parser.add_argument("--summary", metavar="FILE", help="also write the report as JSON")
    args = parser.parse_args(argv)
    try:
        summary = run(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; everything the demo started was stopped and removed", file=sys.stderr)
        return 130
    report(summary)
    if args.summary:
        Path(args.summary).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The trainer's metrics port in `trainyard validate`: a port that clashes with it, a metrics port
the trainer does not serve on, a value of the env that is no port and a port Kubernetes would refuse
are errors naming the job, pod and container; a trainer without the port, or with metrics off, is a
warning; hostile ports never crash validate; a trainer pod without a fabric still serves metrics."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainer.metrics import trainer_labels
from trainyard.cli import main
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT, METRICS_PORT_NAME, NO_FABRIC
from trainyard.contract.names import ENV_FABRIC
from trainyard.repo import validate
from trainyard.repo.model import kustomize
from trainyard.repo.validate import trainer

PORT = {"name": METRICS_PORT_NAME, "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"}
ENV = {"name": ENV_METRICS_PORT, "value": str(DEFAULT_METRICS_PORT)}
NOT_SCRAPED = "not scraped: the trainer serves metrics on"


def _container(ports: object = None, env: object = None, **extra: object) -> dict:
    c: dict = {"name": "node", "image": "registry.example.com/ml/trainer:0.1.0", **extra}
    c["ports"] = [dict(PORT)] if ports is None else ports
    c["env"] = [dict(ENV)] if env is None else env
    return c


MOVED = ("warning", ["serves metrics on 9500", "outside the NetworkPolicy trainer-metrics", "any pod of the cluster"])

# (container, other containers of the pod, [(severity, fragments)] expected)
CASES = {
    "as the runtimes declare it": (_container(), [], []),
    "env unset: the default port": (_container(env=[]), [], []),
    "another port on the metrics number": (
        _container(ports=[dict(PORT), {"name": "web", "containerPort": DEFAULT_METRICS_PORT}]), [],
        [("error", ["ports[1] (web) is containerPort 9404, the port the trainer serves its metrics on",
                    "the two would clash"])],
    ),
    "an unnamed port on the metrics number": (
        _container(ports=[{"containerPort": DEFAULT_METRICS_PORT}]), [],
        [("error", ["ports[0] (unnamed) is containerPort 9404"]), ("warning", [NOT_SCRAPED])],
    ),
    "a sidecar on the metrics number": (
        _container(), [{"name": "proxy", "ports": [{"name": "http", "containerPort": DEFAULT_METRICS_PORT}]}],
        [("error", ["container proxy ports[0] (http) is containerPort 9404", "the two would clash"])],
    ),
    "the metrics port on another number than the env": (
        _container(env=[{"name": ENV_METRICS_PORT, "value": "9500"}]), [],
        [MOVED,
         ("error", ["ports[0] (metrics) is containerPort 9404 but the trainer serves on 9500",
                    f"{ENV_METRICS_PORT}=9500", "Prometheus would scrape a closed port"])],
    ),
    "the metrics port moved but the env unset": (
        _container(ports=[dict(PORT, containerPort=9500)], env=[]), [],
        [("error", ["is containerPort 9500 but the trainer serves on 9404", f"{ENV_METRICS_PORT} unset"])],
    ),
    "the last env entry wins": (
        _container(env=[dict(ENV), {"name": ENV_METRICS_PORT, "value": "9500"}]), [],
        [MOVED, ("error", ["but the trainer serves on 9500"])],
    ),
    "port and env moved together: scraped, but outside the NetworkPolicy": (
        _container(ports=[dict(PORT, containerPort=9500)], env=[{"name": ENV_METRICS_PORT, "value": "9500"}]), [],
        [MOVED],
    ),
    "the env is no port": (
        _container(env=[{"name": ENV_METRICS_PORT, "value": "ninety"}]), [],
        [("error", [f"env {ENV_METRICS_PORT}='ninety' is not a port (1-65535, or 0/off",
                    "the trainer would serve no metrics"])],
    ),
    "the env is a port out of range": (
        _container(env=[{"name": ENV_METRICS_PORT, "value": "70000"}]), [],
        [("error", [f"{ENV_METRICS_PORT}='70000' is not a port"])],
    ),
    "the env from a ConfigMap: unknown here": (
        _container(env=[{"name": ENV_METRICS_PORT, "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]),
        [], [],
    ),
    "UDP": (
        _container(ports=[dict(PORT, protocol="UDP")]), [],
        [("error", ["ports[0] (metrics) has protocol 'UDP': Prometheus scrapes over TCP"])],
    ),
    "two ports named metrics": (
        _container(ports=[dict(PORT), dict(PORT, containerPort=9405)]), [],
        [("error", ["ports[0], ports[1] are all named metrics"]),
         ("error", ["ports[1] (metrics) is containerPort 9405 but the trainer serves on 9404"])],
    ),
    # warnings: the job trains, unscraped
    "no metrics port": (
        _container(ports=[{"name": "pytorchjob-port", "containerPort": 23456}]), [],
        [("warning", [f"{NOT_SCRAPED} 9404", "declares no port named metrics",
                      "add the port {name: metrics, containerPort: 9404, protocol: TCP}"])],
    ),
    "no ports at all": (_container(ports=[]), [], [("warning", [NOT_SCRAPED])]),
    "metrics off": (
        _container(env=[{"name": ENV_METRICS_PORT, "value": "0"}]), [],
        [("warning", [f"not scraped: {ENV_METRICS_PORT}='0' turns the trainer's metrics off", "add the port"])],
    ),
    "metrics off, by word": (
        _container(ports=[], env=[{"name": ENV_METRICS_PORT, "value": "off"}]), [],
        [("warning", [f"{ENV_METRICS_PORT}='off' turns the trainer's metrics off"])],
    ),
    # hostile input: a refusal naming where, never an exception
    "a port number as a string": (
        _container(ports=[dict(PORT, containerPort="9404")]), [],
        [("error", ["ports[0].containerPort '9404' is not a port number (an integer 1-65535)"])],
    ),
    "a huge port number": (
        _container(ports=[dict(PORT), {"name": "big", "containerPort": 10**30}]), [],
        [("error", ["ports[1].containerPort 1000000000000000000000000000000 is not a port number"])],
    ),
    "a negative port number": (
        _container(ports=[dict(PORT), {"name": "neg", "containerPort": -1}]), [],
        [("error", ["ports[1].containerPort -1 is not a port number"])],
    ),
    "a boolean port number": (
        _container(ports=[dict(PORT, containerPort=True)]), [],
        [("error", ["ports[0].containerPort True is not a port number"])],
    ),
    "a list instead of a port": (
        _container(ports=[[METRICS_PORT_NAME, DEFAULT_METRICS_PORT]]), [],
        [("error", ["ports[0] is list ['metrics', 9404], not a port {name, containerPort, protocol}"]),
         ("warning", [NOT_SCRAPED])],
    ),
    "a mapping instead of the list": (
        _container(ports=dict(PORT)), [],
        [("error", ["ports is dict {", "not a list of ports"]), ("warning", [NOT_SCRAPED])],
    ),
    "a port name with unicode": (
        _container(ports=[dict(PORT), {"name": "métrics", "containerPort": 9500}]), [],
        [("error", ["ports[1]: the name 'métrics' is not a port name Kubernetes accepts"])],
    ),
    "a port name too long": (
        _container(ports=[dict(PORT), {"name": "a" * 300, "containerPort": 9500}]), [],
        [("error", ["ports[1]: the name 'aaaaaaaa", "...", "at most 15 characters"])],
    ),
    "a port name not a string": (
        _container(ports=[dict(PORT), {"name": ["x"], "containerPort": 9500}]), [],
        [("error", ["ports[1]: the name ['x'] is not a string"])],
    ),
    "an env value not a string": (
        _container(env=[{"name": ENV_METRICS_PORT, "value": DEFAULT_METRICS_PORT}]), [],
        [("error", [f"env {ENV_METRICS_PORT}: the value 9404 is not a string; quote it"])],
    ),
    "an env that is no list, entries that are no mappings": (
        _container(env={"a": "b"}), [{"name": "x", "ports": "garbage"}, "not a container"], [],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_each_metrics_port_finding_has_its_message(case):
    container, others, expected = CASES[case]
    others = [o for o in others if isinstance(o, dict)]
    found = trainer.metrics_findings(container, others)
    assert len(found) == len(expected), found
    for (severity, message), (want, fragments) in zip(found, expected, strict=True):
        assert severity == want, (message, want)
        assert all(f in message for f in fragments), (message, fragments)


def test_a_hostile_value_is_quoted_short():
    (severity, message), *_ = trainer.metrics_findings(_container(ports=[{"name": "x" * 10_000, "containerPort": 1}]))
    assert severity == "error" and len(message) < 400


# ---------------------------------------------------------------------------------------------
# Through validate: the pods as the controllers and admission make them, each message naming
# the job folder, the pod and the container.

MNIST = "overlays/dev/jobs/mnist-ddp"
SMOKE = "overlays/dev/jobs/smoke-ddp"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"
MASTER = "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0"


def _patch(repo, folder: str, path: str, value: str, op: str = "add") -> None:
    job = repo.root / folder / "job.yaml"
    job.write_text(job.read_text() + f"- op: {op}\n  path: {path}\n  value: {value}\n")


def _trainer_env(repo, value: str) -> None:
    _patch(repo, SMOKE, "/spec/trainer/env", f"[{{name: {ENV_METRICS_PORT}, value: '{value}'}}]")


def _runtime_patch_ports(repo) -> None:
    value = (
        "[{manager: example.com/x, trainingRuntimeSpec: {template: {spec: {replicatedJobs: [{name: node, "
        "template: {spec: {template: {spec: {containers: [{name: node, ports: {name: metrics}}]}}}}}]}}}}]"
    )
    _patch(repo, SMOKE, "/spec/runtimePatches", value)


PYTORCH = "pod mnist-ddp-worker-0, container pytorch"
SMOKE_POD = "pod smoke-ddp-node-0-0-<generated> (and 1 more pod(s)), container node"

# (what the folder does, (severity, folder, fragments))
VALIDATED = {
    "a user port on the metrics number": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", "{name: web, containerPort: 9404}"),
        ("error", MNIST, [PYTORCH, "ports[2] (web) is containerPort 9404", "the two would clash"]),
    ),
    "a TrainJob's env moves the port away from the runtime's": (
        lambda r: _trainer_env(r, "9500"),
        ("error", SMOKE, [SMOKE_POD, "ports[0] (metrics) is containerPort 9404 but the trainer serves on 9500"]),
    ),
    "the metrics on torch's rendezvous port": (
        lambda r: _trainer_env(r, "29500"),
        ("error", SMOKE, [SMOKE_POD, "ports[1] (unnamed) is containerPort 29500"]),
    ),
    "metrics off in a TrainJob": (
        lambda r: _trainer_env(r, "off"),
        ("warning", SMOKE, [SMOKE_POD, f"not scraped: {ENV_METRICS_PORT}='off'"]),
    ),
    "the metrics port removed": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/1", "", op="remove"),
        ("warning", MNIST, [PYTORCH, NOT_SCRAPED, "add the port {name: metrics"]),
    ),
    # hostile input
    "a port number as a string": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", "{name: extra, containerPort: '9404'}"),
        ("error", MNIST, ["Worker.template.spec.containers[0].ports[2].containerPort '9404' is not an integer",
                          "the API server refuses the job"]),
    ),
    "the operator's port as a string": (  # the operator reads it for MASTER_PORT
        lambda r: _patch(r, MNIST, f"{MASTER}/ports/0/containerPort", "'abc'", op="replace"),
        ("error", MNIST, ["Master.template.spec.containers[0].ports[0].containerPort 'abc' is not an integer"]),
    ),
    "a huge port number": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", "{name: big, containerPort: 99999999999999999999}"),
        ("error", MNIST, ["containers[0].ports[2].containerPort '1e+20' is not an integer"]),
    ),
    "a negative port number": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", "{name: neg, containerPort: -5}"),
        ("error", MNIST, [PYTORCH, "ports[2].containerPort -5 is not a port number"]),
    ),
    "a list instead of a port": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", "[metrics, 9404]"),
        ("error", MNIST, ["containers[0].ports[2] is list ['metrics', 9404], not a port"]),
    ),
    "a mapping instead of the ports": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports", "{name: metrics, containerPort: 9404}", op="replace"),
        ("error", MNIST, ["Worker.template.spec.containers[0].ports is dict", "not a list of ports"]),
    ),
    "a port name with unicode": (
        lambda r: _patch(r, MNIST, f"{WORKER}/ports/-", '{name: "métrics", containerPort: 9500}'),
        ("error", MNIST, [PYTORCH, "ports[2]: the name 'métrics' is not a port name Kubernetes accepts"]),
    ),
    "the env as a number": (
        lambda r: _patch(r, MNIST, f"{WORKER}/env/0/value", "9404", op="replace"),
        ("error", MNIST, [PYTORCH, f"env {ENV_METRICS_PORT}: the value 9404 is not a string"]),
    ),
    "the env no port": (
        lambda r: _patch(r, MNIST, f"{WORKER}/env/0/value", "'-1'", op="replace"),
        ("error", MNIST, [PYTORCH, f"env {ENV_METRICS_PORT}='-1' is not a port"]),
    ),
    "ports in a TrainJob's runtime patch": (
        _runtime_patch_ports,
        ("error", SMOKE, ["spec.runtimePatches[0]", "containers[0].ports: a runtime patch cannot set a container's "
                          "ports", "ContainerPatch has name, env, volumeMounts and securityContext only"]),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(VALIDATED))
def test_validate_reports_the_metrics_port_naming_the_pod(repo_copy, case):
    change, (severity, folder, fragments) = VALIDATED[case]
    change(repo_copy)
    kustomize.clear_cache()
    report = validate.validate(repo_copy, ["dev"])  # no exception: a hostile port is a refusal
    problems = [str(p) for p in report.problems if p.severity == severity]
    hits = [p for p in problems if f"] {folder}" in p and all(f in p for f in fragments)]
    assert hits, "\n".join(str(p) for p in report.problems) or "no problems"
    if severity == "warning":
        assert _errors_of(report, folder) == []


def _errors_of(report: validate.Report, folder: str) -> list[str]:
    return [e for e in errors_of(report) if f"] {folder}" in e]


CUSTOM = "registry.example.com/ml/custom-trainer:0.1.0"


def test_a_trainer_pod_without_a_fabric_validates_previews_and_still_serves_metrics(repo_copy, capsys, monkeypatch):
    """A job of an image of its own that runs `trainyard launch`: the webhook never sees it (no
    fabric env), the trainer labels its metrics fabric="none", and the metrics port is still
    checked: present, no finding; removed, the warning."""
    for c in (MASTER, WORKER):
        _patch(repo_copy, MNIST, f"{c}/image", CUSTOM, op="replace")
    kustomize.clear_cache()
    report = validate.validate(repo_copy, ["dev"])
    assert _errors_of(report, MNIST) == []
    assert [w.message for w in report.warnings() if "no pod of this job runs a trainer image" not in w.message] == []
    (jp,) = [jp for jp in report.previews["dev"] if jp.job.name == "mnist-ddp"]
    assert {pod.action for pod in jp.pods} == {"skip"}
    for pod in jp.pods:
        (c,) = pod.after["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert ENV_FABRIC not in env
        assert trainer_labels(env, pytest.fail)[1] == NO_FABRIC
        assert PORT in c["ports"] and env[ENV_METRICS_PORT] == str(DEFAULT_METRICS_PORT)
    monkeypatch.chdir(repo_copy.root)
    assert main(["preview", MNIST]) == 0
    assert "pod mnist-ddp-worker-0" in capsys.readouterr().out

    _patch(repo_copy, MNIST, f"{WORKER}/ports/1", "", op="remove")
    kustomize.clear_cache()
    report = validate.validate(repo_copy, ["dev"])
    assert _errors_of(report, MNIST) == []
    assert any(PYTORCH in w.message and NOT_SCRAPED in w.message for w in report.warnings())


def test_the_mpi_launcher_serves_no_metrics_and_is_not_warned(repo_copy):
    """mpirun in the launcher starts the ranks in the workers: only the workers need the port."""
    edit(repo_copy, "base/jobs/mpijob/mpijob.yaml", "                - name: metrics ", "                - name: web ")
    kustomize.clear_cache()
    warnings = [str(w) for w in validate.validate(repo_copy, ["prod-ib"]).warnings()]
    assert any("pod horovod-worker-0 (and 1 more pod(s)), container mpi: not scraped" in w for w in warnings), warnings
    assert not any("horovod-launcher" in w for w in warnings)

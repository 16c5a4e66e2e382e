"""Job folders written to get past review: each is refused by `trainyard validate` with its own
message, naming the file (and line, where there is one). One folder per kind of attack: pod
security, kinds and fields, what Argo CD would render that kustomize does not, Kubernetes'
limits, capacity, the trainer's arguments and image, patch errors."""

from __future__ import annotations

import os

import pytest

from tests.trainyard.repo.conftest import errors_of
from trainyard.repo import validate
from trainyard.repo.model import kustomize, repository

MNIST = "overlays/dev/jobs/mnist-ddp"
SMOKE = "overlays/dev/jobs/smoke-ddp"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec"
BASE = "  - ../../../../base/jobs/pytorchjob\n"


def _op(op: str, path: str, value: str) -> str:
    return f"\n- op: {op}\n  path: {path}\n  value: {value}\n"


def _add_patch(repo: repository.Repository, op: str) -> None:
    path = repo.root / MNIST / "job.yaml"
    path.write_text(path.read_text() + op)


def _add_file(repo: repository.Repository, name: str, text: str, *, listed: bool = True) -> None:
    (repo.root / MNIST / name).write_text(text)
    if listed:
        _add_resource(repo, name)


def _add_resource(repo: repository.Repository, entry: str) -> None:
    path = repo.root / MNIST / "kustomization.yaml"
    path.write_text(path.read_text().replace(BASE, f"{BASE}  - {entry}\n"))


def _replace(repo: repository.Repository, rel: str, old: str, new: str) -> None:
    path = repo.root / rel
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


def _service(name: str, spec: str) -> str:
    return (
        f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n"
        f"spec: {{{spec}, selector: {{app: x}}, ports: [{{port: 80}}]}}\n"
    )


def _bomb() -> str:
    lines, prev = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"], "a0"
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*{prev}'] * 9)}]")
        prev = f"a{i}"
    return "\n".join(lines) + "\n"


LOOKALIKE = "registry.example.com/ml/my-trainer:1.0"
PRIVILEGED = "the admission policy trainyard-pod-security rejects it: pod mnist-ddp-worker-0"

# (what the folder does, how, where the error points, what it says)
CASES = {
    # pod security: the same ValidatingAdmissionPolicy the job namespaces are bound to
    "privileged container": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/containers/0/securityContext", "{privileged: true}")),
        MNIST, [PRIVILEGED, "securityContext.privileged is true"],
    ),
    "hostPID": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/hostPID", "true")),
        MNIST, [PRIVILEGED, "hostNetwork, hostPID and hostIPC must be unset or false"],
    ),
    "hostNetwork": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/hostNetwork", "true")),
        MNIST, [PRIVILEGED, "host namespaces"],
    ),
    "hostPath /": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/volumes", "[{name: root, hostPath: {path: /}}]")),
        MNIST, [PRIVILEGED, "volume root is a hostPath volume"],
    ),
    "control-plane toleration": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/tolerations",
                                    "[{key: node-role.kubernetes.io/control-plane, operator: Exists}]")),
        MNIST, [PRIVILEGED, "the taint node-role.kubernetes.io/control-plane is tolerated"],
    ),
    "capability beyond the fabric's": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/containers/0/securityContext",
                                    "{capabilities: {add: [SYS_ADMIN]}}")),
        MNIST, [PRIVILEGED, "adds SYS_ADMIN in securityContext.capabilities.add"],
    ),
    "every capability at once": (  # one round of review names all of them
        lambda r: _add_patch(r, _op("add", f"{WORKER}/containers/0/securityContext",
                                    "{capabilities: {add: [SYS_ADMIN, IPC_LOCK, NET_ADMIN, SYS_PTRACE]}}")),
        MNIST, [PRIVILEGED, "adds SYS_ADMIN, NET_ADMIN, SYS_PTRACE in securityContext.capabilities.add"],
    ),
    "every hostPath volume at once": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/volumes",
                                    "[{name: root, hostPath: {path: /}}, {name: dev, hostPath: {path: /dev}}]")),
        MNIST, [PRIVILEGED, "volume root; volume dev is a hostPath volume"],
    ),
    # kinds and fields
    "LoadBalancer Service": (
        lambda r: _add_file(r, "svc.yaml", _service("web", "type: LoadBalancer")),
        f"{MNIST}/svc.yaml", ["trainyard-job-services rejects it", "type LoadBalancer exposes the job"],
    ),
    "externalIPs": (
        lambda r: _add_file(r, "svc.yaml", _service("web", "externalIPs: [1.2.3.4]")),
        f"{MNIST}/svc.yaml", ["spec.externalIPs makes the nodes accept traffic for 1.2.3.4"],
    ),
    "Service named like the operator's": (
        lambda r: _add_file(r, "svc.yaml", _service("mnist-ddp-master-0", "clusterIP: None")),
        f"{MNIST}/svc.yaml",
        ["has the name of the Service the controllers create for PyTorchJob ml-training/mnist-ddp"],
    ),
    "a kind the project does not allow": (
        lambda r: _add_file(r, "role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
                                            "metadata: {name: r}\nrules: []\n"),
        f"{MNIST}/role.yaml", ["project trainyard-jobs", "does not allow rbac.authorization.k8s.io/Role"],
    ),
    # what Argo CD renders and kustomize does not
    "Jsonnet": (
        lambda r: _add_file(r, "job.jsonnet", "{}", listed=False),
        f"{MNIST}/job.jsonnet", ["Argo CD evaluates *.jsonnet files"],
    ),
    ".argocd-source.yaml": (
        lambda r: _add_file(r, ".argocd-source.yaml", "kustomize:\n  images: [evil:1]\n", listed=False),
        f"{MNIST}/.argocd-source.yaml", ["Argo CD merges this file into the Application's source"],
    ),
    ".argocd-source-<app>.yaml": (
        lambda r: _add_file(r, ".argocd-source-dev-job-mnist-ddp.yaml", "kustomize: {}\n", listed=False),
        f"{MNIST}/.argocd-source-dev-job-mnist-ddp.yaml", ["Argo CD merges this file"],
    ),
    "Helm chart": (
        lambda r: _add_file(r, "Chart.yaml", "apiVersion: v2\nname: x\nversion: 1.0.0\n", listed=False),
        f"{MNIST}/Chart.yaml", ["as a Helm chart"],
    ),
    "helmCharts in kustomize": (
        lambda r: _replace(r, f"{MNIST}/kustomization.yaml", "patches:",
                           "helmCharts:\n  - name: x\n    repo: https://charts.example.com\npatches:"),
        f"{MNIST}/kustomization.yaml:8:", ["helmCharts: kustomize plugins and Helm charts are not allowed"],
    ),
    "remote base": (
        lambda r: _add_resource(r, "https://github.com/example/x//deploy?ref=v1"),
        f"{MNIST}/kustomization.yaml:8:", ["fetched from the network by kustomize"],
    ),
    "a folder outside": (
        lambda r: _add_resource(r, "../../../../policies"),
        f"{MNIST}/kustomization.yaml:8:", ["leads outside the job folder (to policies)"],
    ),
    "an absolute path": (
        lambda r: _add_resource(r, "/etc/hosts"),
        f"{MNIST}/kustomization.yaml:8:", ["'/etc/hosts' is an absolute path"],
    ),
    "a symbolic link outside": (
        lambda r: (os.symlink("/etc/passwd", r.root / MNIST / "evil.yaml"), _add_resource(r, "evil.yaml")),
        f"{MNIST}/evil.yaml", ["a symbolic link to /etc/passwd, outside the job folder"],
    ),
    # sizes and Kubernetes' limits
    "a file over the cap": (
        lambda r: _add_file(r, "big.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\n"
                                           f"data: {{a: '{'x' * (2 << 20)}'}}\n"),
        f"{MNIST}/big.yaml", ["over the 1,048,576 a file of a job folder may have"],
    ),
    "YAML nested too deep": (
        lambda r: _add_file(r, "deep.yaml", "a: " + "[" * 500 + "]" * 500 + "\n"),
        f"{MNIST}/deep.yaml:1:", ["nested more than 64 levels deep"],
    ),
    "YAML aliases expanding": (
        lambda r: _add_file(r, "bomb.yaml", _bomb()),
        f"{MNIST}/bomb.yaml:1:", ["nodes once its aliases are expanded (at most 200,000)"],
    ),
    "a name over 253 characters": (
        lambda r: _add_file(r, "cm.yaml", f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {'a' * 300}\n"),
        f"{MNIST}/cm.yaml:4:", ["(300 characters) must be a DNS-1123 subdomain"],
    ),
    "annotations over 256 KiB": (
        lambda r: _add_patch(r, _op("add", "/metadata/annotations", "{big: " + "x" * 270_000 + "}")),
        f"{MNIST}/job.yaml:", ["annotations total 270,003 bytes", "over Kubernetes' limit of 262,144"],
    ),
    # capacity
    "a pod larger than any node": (
        lambda r: _replace(r, f"{MNIST}/job.yaml", "memory: 16Gi", "memory: 4Ti"),
        MNIST, ["pod mnist-ddp-master-0 can never be scheduled", "no node of cluster dev"],
    ),
    "a job over the namespace quota": (
        lambda r: _replace(r, f"{MNIST}/job.yaml", "memory: 16Gi", "memory: 60Gi"),
        MNIST, ["the job needs more than ResourceQuota training-quota", "limits.memory 120Gi > 64Gi"],
    ),
    "64 GPUs per node": (
        lambda r: _replace(r, f"{SMOKE}/job.yaml", 'nvidia.com/gpu: "1"', 'nvidia.com/gpu: "64"'),
        SMOKE, ["Kueue would never admit it", "nvidia.com/gpu 128 > 2"],
    ),
    # the trainer
    "a misspelt trainer argument": (
        lambda r: _add_patch(r, _op("add", f"{WORKER}/containers/0/args/-", "--modle")),
        MNIST, ["pod mnist-ddp-worker-0, container pytorch", "unrecognized arguments: --modle"],
    ),
    "a global batch the world does not divide": (
        lambda r: _replace(r, f"{MNIST}/job.yaml", '    - "64"', '    - "63"'),
        MNIST, ["--batch-size 63 is not a multiple of 2 pod(s) x 1 process(es)", "use --batch-size 64"],
    ),
    "a lookalike trainer image": (
        lambda r: _add_patch(r, _op("replace", f"{WORKER}/containers/0/image", LOOKALIKE)),
        MNIST, ["runs the trainer image in pod(s) mnist-ddp-master-0 but registry.example.com/ml/my-trainer:1.0",
                "in pod(s) mnist-ddp-worker-0"],
    ),
    # patch errors
    "a patch that does not apply": (
        lambda r: _add_patch(r, _op("replace", "/spec/nosuch/thing", "1")),
        f"{MNIST}/job.yaml:42:", ["JSON patch operation 7 (replace /spec/nosuch/thing) does not apply"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_job_folder_is_refused_with_its_own_message(repo_copy, case):
    change, where, fragments = CASES[case]
    change(repo_copy)
    kustomize.clear_cache()
    errors = errors_of(validate.validate(repository.load(repo_copy.root), ["dev"]))
    hits = [e for e in errors if f"] {where}" in e and all(f in e for f in fragments)]
    assert hits, "\n".join(errors) or "no errors"
    assert "Traceback" not in "\n".join(errors)


def test_each_hostile_folder_has_a_message_of_its_own():
    """No two cases are recognised by the same words: each attack has its own refusal."""
    keys = [tuple(fragments) for _, _, fragments in CASES.values()]
    assert len(set(keys)) == len(keys)


def test_a_trainjob_quantity_written_as_a_number_is_refused(repo_copy):
    """Trainer's defaulting webhook stores it as a string: Argo CD itself found such a TrainJob
    OutOfSync for ever (tests/trainyard/cluster/test_argocd_itself.py)."""
    _replace(repo_copy, f"{SMOKE}/job.yaml", 'nvidia.com/gpu: "1"', "nvidia.com/gpu: 1")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("resourcesPerNode.limits.nvidia.com/gpu: 1 is a number" in e and '("1")' in e for e in errors), errors


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js}\nspec: {replicatedJobs: []}\n",
         "a bare JobSet gets no runtime"),
        ("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: vj}\nspec: {tasks: []}\n",
         "Volcano is not installed on trainyard clusters"),
        ("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: mine}\nspec: {}\n",
         "runtimes are the platform's"),
        ("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: mine}\nspec: {}\n",
         "runtimes are the platform's"),
        ("apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {generateName: run-}\nspec: {}\n",
         "metadata.generateName without metadata.name"),
    ],
)  # fmt: skip
def test_an_upstream_kind_we_do_not_run_says_what_to_write_instead(repo_copy, doc, says):
    _add_file(repo_copy, "extra.yaml", doc)
    kustomize.clear_cache()
    errors = errors_of(validate.validate(repository.load(repo_copy.root), ["dev"]))
    hits = [e for e in errors if f"{MNIST}/extra.yaml:1:" in e and says in e]
    assert hits, "\n".join(errors)
    assert "accumulating resources" not in "\n".join(errors)  # not kustomize's raw text


def test_a_namespace_the_kustomization_sets_on_a_cluster_scoped_kind_points_at_its_line(repo_copy):
    _add_file(repo_copy, "queue.yaml", "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\n"
              "metadata: {name: mine}\nspec: {namespaceSelector: {}}\n")  # fmt: skip
    kustomize.clear_cache()
    errors = errors_of(validate.validate(repository.load(repo_copy.root), ["dev"]))
    line = next(i for i, t in enumerate((repo_copy.root / MNIST / "kustomization.yaml").read_text().splitlines(), 1)
                if t.startswith("namespace:"))  # fmt: skip
    hits = [e for e in errors if f"namespace: ml-training of {MNIST}/kustomization.yaml:{line} gives it" in e]
    assert hits, "\n".join(errors)

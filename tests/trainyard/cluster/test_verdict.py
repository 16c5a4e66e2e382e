"""validate's verdict is the cluster's: the pods of every job are created on the real kube-apiserver
(a dry run) and admitted or refused exactly as ``trainyard validate`` says.

The jobs: every job folder of the repository on its own cluster, and the corpus of upstream-style
jobs (tests/corpus/jobs/, each citing its source) adopted into ``overlays/dev/jobs/<name>/`` of a
copy of the repository, as docs/gitops.md tells a user to. Each is validated; then each pod its
preview shows, as its controller creates it, goes through the cluster's own admission in the job
namespace (defaulting, LimitRanger, ServiceAccount, the fabric webhook or policies, the
ValidatingAdmissionPolicies, pod validation, ResourceQuota). A pod validate says kube-apiserver
refuses must be refused, with the cause validate named; every other pod must be admitted. (A pod
validate says is admitted but never starts, for a network, scheduler, claim or node selection, is
admitted here too: the dry run cannot show the wait, validate's message names it.)

What a job's controller makes before its pods and a dry run of the job does not (the MPI
launcher's ServiceAccount) is made for the while, in its stead. The job namespace's quota is
already partly used by the repository's jobs, which the controllers
run: for the dry runs its hard limits are raised by what is used, so each pod is judged against the
quota as if nothing else ran, which is what validate judges.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import COPIED
from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.processes import wait_for
from trainyard.contract.quantity import parse_quantity
from trainyard.repo import validate
from trainyard.repo.jobs import preview
from trainyard.repo.model import declared, kustomize, repository
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE, VAP_NAME
from trainyard.repo.validate import startable

pytestmark = pytest.mark.cluster

REPO_ROOT = Path(__file__).resolve().parents[3]
CORPUS = REPO_ROOT / "tests" / "corpus" / "jobs"
CORPUS_CLUSTER = "dev"
SUFFIX = "-verdict"


@functools.cache
def _repo_report(cluster: str) -> validate.Report:
    return validate.validate(repository.load(REPO_ROOT), [cluster])


def _adopted(tmp: Path, name: str) -> tuple[repository.Repository, str]:
    """A copy of the repository with the corpus job ``name`` as a job folder of the corpus cluster."""
    for part in COPIED:
        shutil.copytree(REPO_ROOT / part, tmp / part)
    folder = f"overlays/{CORPUS_CLUSTER}/jobs/{name}"
    shutil.copytree(CORPUS / name, tmp / folder)
    return repository.load(tmp), folder


def _refusals(jp: preview.JobPreview, objects: startable.ClusterObjects) -> dict[str, list[tuple[str, str]]]:
    """Per pod: (what kube-apiserver's refusal says in part, validate's message) for each reason
    validate gives for kube-apiserver refusing it: the preview's (the fabric webhook's denial, the
    ValidatingAdmissionPolicies, the Pod schema) and startable's."""
    out: dict[str, list[tuple[str, str]]] = {pod.name: [] for pod in jp.pods}
    for pod in jp.pods:
        said = out[pod.name]
        problems = pod.problems()
        if pod.action == "deny":
            said += [("fabric.trainyard.dev", m) for m in problems if f"{pod.by} denies it" in m]
        if pod.vap_after is not None:
            said += [(VAP_NAME, f"pod {pod.name}: the admission policy rejects it after {pod.by}: {m}")
                     for m in pod.vap_after.failures]  # fmt: skip
        for d in pod.denied:
            policy, _, message = d.partition(": ")
            said.append((policy, f"the admission policy {policy} rejects it: {message}"))
        said += [("invalid", f"pod {pod.name}: {e}") for e in pod.schema_errors]
    for f in startable.judge(objects, jp):
        if f.refused:
            out[f.pod].append((f.server_says, f.message))
    return out


def _dry_run_body(pod: dict, namespace: str) -> dict:
    """The pod as its controller creates it, under a name of its own (the controllers' pods of the
    repository's jobs hold theirs) and without owner references (Kueue's pod webhook looks the owner
    up; a corpus job's owner does not exist, and the owner changes nothing validate judges)."""
    body = copy.deepcopy(pod)
    meta = body.setdefault("metadata", {})
    meta["namespace"] = namespace
    meta.pop("ownerReferences", None)
    if meta.get("name"):
        meta["name"] = meta["name"][: 63 - len(SUFFIX)] + SUFFIX
    return body


def _quantity_text(value: Decimal) -> str:
    return format(value.normalize(), "f")


@contextlib.contextmanager
def _headroom(kube: Kube, namespace: str):
    """Each ResourceQuota of ``namespace`` raised by what it counts as used, until the block ends:
    a pod then fits exactly when it fits the quota alone. Quota admission reads the quota's
    status.hard, which kube-controller-manager copies from the spec: waited for."""
    quotas = kube.get(f"/api/v1/namespaces/{namespace}/resourcequotas")["items"]
    headers = {"Content-Type": "application/merge-patch+json"}
    raised = []
    for quota in quotas:
        hard = quota["spec"]["hard"]
        used = (quota.get("status") or {}).get("used") or {}
        more = {k: _quantity_text(parse_quantity(v) + parse_quantity(used.get(k, "0"))) for k, v in hard.items()}
        path = f"/api/v1/namespaces/{namespace}/resourcequotas/{quota['metadata']['name']}"
        kube.request("PATCH", path, content=json.dumps({"spec": {"hard": more}}), headers=headers)
        raised.append((path, hard, more))
    try:
        for path, _, more in raised:

            def copied(p: str = path, want: dict = more) -> bool:
                status = (kube.get(p).get("status") or {}).get("hard") or {}
                return all(parse_quantity(status.get(k, "-1")) == parse_quantity(v) for k, v in want.items())

            wait_for(copied, timeout=60, what=f"{path}: status.hard raised", interval=0.2)
        yield
    finally:
        for path, hard, _ in raised:
            kube.request("PATCH", path, content=json.dumps({"spec": {"hard": hard}}), headers=headers)


def _judge_on_cluster(
    kube: Kube, report: validate.Report, cluster: str, folder: str, repo: repository.Repository
) -> tuple[list[str], int]:
    """Every disagreement between validate and kube-apiserver over the pods of the jobs of
    ``folder``; and how many pods were sent."""
    objects = startable.ClusterObjects.of(report.renders[cluster].resources(), declared.load(repo, cluster))
    errors = [p.message for p in report.errors() if p.cluster == cluster]
    disagreements: list[str] = []
    judged = 0
    jobs = [jp for jp in report.previews[cluster] if jp.job.source == folder]
    for jp in jobs:
        refusals = _refusals(jp, objects)
        with _made_by_the_controller(kube, jp):
            judged += _send(kube, jp, refusals, errors, folder, disagreements)
    return disagreements, judged


@contextlib.contextmanager
def _made_by_the_controller(kube: Kube, jp: preview.JobPreview):
    """The ServiceAccounts a job's controller makes before its pods (the MPI launcher's), made here
    in its stead while the job's pods are sent: a dry run of the job makes nothing."""
    namespace = jp.job.namespace or TRAINING_NAMESPACE
    made = []
    for kind, name in jp.created:
        if kind == "ServiceAccount":
            account = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}
            try:
                kube.create(account)
            except ApiError as exc:
                if exc.code != 409:  # already there: the repository's own job's controller made it
                    raise
                continue
            made.append(account)
    try:
        yield
    finally:
        for account in made:
            kube.delete(account)


def _send(
    kube: Kube,
    jp: preview.JobPreview,
    refusals: dict[str, list[tuple[str, str]]],
    errors: list[str],
    folder: str,
    disagreements: list[str],
) -> int:
    """Each pod of ``jp`` as a dry run; what differs from validate's verdict goes to ``disagreements``."""
    judged = 0
    for pod in jp.pods:
        namespace = (pod.before.get("metadata") or {}).get("namespace") or TRAINING_NAMESPACE
        said = refusals[pod.name]
        for _, message in said:
            if message not in errors:
                disagreements.append(f"{folder}: pod {pod.name}: validate did not report {message!r}")
        judged += 1
        try:
            kube.create(_dry_run_body(pod.before, namespace), dry_run=True)
        except ApiError as exc:
            if not said:
                disagreements.append(f"{folder}: pod {pod.name}: validate admits it, kube-apiserver refuses it: {exc}")
            elif not any(cause.lower() in exc.message.lower() for cause, _ in said):
                causes = "; ".join(m for _, m in said)
                disagreements.append(
                    f"{folder}: pod {pod.name}: kube-apiserver refuses it for another cause: {exc} (validate: {causes})"
                )
            continue
        if said:
            causes = "; ".join(m for _, m in said)
            disagreements.append(f"{folder}: pod {pod.name}: validate refuses it ({causes}); kube-apiserver admits it")
    return judged


@pytest.mark.parametrize("cluster", ["dev", "prod-roce", "prod-ib"])
def test_the_repositorys_jobs_are_admitted_as_validate_says(clusters, cluster):
    repo = repository.load(REPO_ROOT)
    report = _repo_report(cluster)
    folders = sorted(
        f"overlays/{cluster}/jobs/{p.name}" for p in (REPO_ROOT / "overlays" / cluster / "jobs").iterdir() if p.is_dir()
    )
    assert folders
    problems: list[str] = []
    with clusters.kube(cluster) as kube, _headroom(kube, TRAINING_NAMESPACE):
        for folder in folders:
            found, judged = _judge_on_cluster(kube, report, cluster, folder, repo)
            assert judged, f"{folder}: validate previewed no pod"
            problems += found
    assert not problems, "\n".join(problems)
    assert not report.errors(), "the repository's own jobs pass validate"


CORPUS_JOBS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", CORPUS_JOBS)
def test_an_upstream_job_is_admitted_or_refused_as_validate_says(clusters, tmp_path, name):
    repo, folder = _adopted(tmp_path, name)
    report = validate.validate(repo, [CORPUS_CLUSTER], only_jobs={CORPUS_CLUSTER: {folder}})
    previewed = [jp for jp in report.previews[CORPUS_CLUSTER] if jp.job.source == folder]
    assert previewed, f"{folder}: validate previewed no job: {[str(p) for p in report.errors()]}"
    with clusters.kube(CORPUS_CLUSTER) as kube:
        # the job objects themselves, as Argo CD applies them: what validate previews, the API
        # server (CRD schemas, the Trainer and Kueue webhooks) accepts
        for r in kustomize.build(repo, repo.root / folder):
            try:
                kube.create(r.doc, dry_run=True)
            except ApiError as exc:
                pytest.fail(f"{folder}: kube-apiserver refuses {r.describe()}, which validate previewed: {exc}")
        with _headroom(kube, TRAINING_NAMESPACE):
            problems, judged = _judge_on_cluster(kube, report, CORPUS_CLUSTER, folder, repo)
    assert judged
    assert not problems, "\n".join(problems)

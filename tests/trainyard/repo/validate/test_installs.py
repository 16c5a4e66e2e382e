"""validate on what the clusters install, upstream releases included: every image pinned, kinds
served by the CRDs the cluster installs, providers that say what they install, bindings to roles
that exist, webhooks that reach a Service. Each test breaks one thing in a copy of the repository
and reads the error validate gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import kustomize, upstream
from trainyard.repo.validate import installs

REPO_ROOT = Path(__file__).resolve().parents[4]


pytestmark = pytest.mark.usefixtures("upstream_tools")


def test_an_upstream_floating_image_is_refused_naming_the_release(repo_copy):
    kustomization = repo_copy.root / "base/whereabouts/install/kustomization.yaml"
    doc = yaml.safe_load(kustomization.read_text())
    del doc["images"]
    kustomization.write_text(yaml.safe_dump(doc))
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    floating = [e for e in errors if "whereabouts:latest" in e]
    assert len(floating) == 2, errors  # the CNI DaemonSet and the reconciler
    assert any(
        "raw.githubusercontent.com/k8snetworkplumbingwg/whereabouts/v0.9.4/doc/crds/reconciler-deployment.yaml" in e
        and "Deployment kube-system/whereabouts-reconciler" in e
        and "(upstream: Whereabouts IPAM v0.9.4, Application trainyard-whereabouts)" in e
        for e in floating
    ), floating


def test_a_moving_tag_of_the_repositorys_own_image_is_refused(repo_copy):
    edit(repo_copy, "base/webhook/deployment.yaml", "trainyard-webhook:0.1.0", "trainyard-webhook:main")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("trainyard-webhook:main' uses the tag main, a branch-like tag (main)" in e for e in errors)


def test_a_branch_as_an_upstream_revision_is_refused(repo_copy):
    edit(repo_copy, "base/training-operator/application.yaml", "targetRevision: v1.9.4", "targetRevision: master")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("targetRevision 'master'" in e and "use a release tag or a commit SHA" in e for e in errors), errors
    assert any("trainer.git at master is not a pinned release" in e for e in errors), errors


def test_a_provider_must_say_what_it_installs(repo_copy):
    edit(repo_copy, "base/kueue/application.yaml", "provides: kueue.x-k8s.io", "provides: kueue.x-k8s.io,x.example")
    edit(repo_copy, "base/trainer/application.yaml", "trainer.kubeflow.org,jobset.x-k8s.io", "trainer.kubeflow.org")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("trainyard-kueue: trainyard.dev/provides names x.example but installs no CRD of it" in e for e in errors)
    assert any(
        "trainyard-trainer: trainyard.dev/provides installs CRDs of jobset.x-k8s.io without" in e for e in errors
    )


def test_a_binding_to_a_role_nobody_installs_is_refused(repo_copy):
    ref = "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: trainyard:"
    edit(repo_copy, "base/webhook/opt-out-rbac.yaml", ref + "fabric-opt-out", ref + "typo")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("roleRef ClusterRole 'trainyard:typo' is not installed by this cluster" in e for e in errors), errors


def test_a_webhook_whose_service_is_missing_or_on_another_port_is_refused(repo_copy):
    edit(repo_copy, "base/webhook/mutating-webhook.yaml", "port: 443", "port: 8443")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("Service trainyard-system/trainyard-webhook has no port 8443 (it serves 443, 8081)" in e for e in errors)
    service = "name: trainyard-webhook\n        namespace: trainyard-system"
    edit(repo_copy, "base/webhook/mutating-webhook.yaml", service, service.replace("-webhook", "-hook"))
    kustomize.clear_cache()  # builds are kept per folder within a process
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("Service trainyard-system/trainyard-hook is not installed by this cluster" in e for e in errors)


def test_a_kind_at_a_version_no_crd_serves_is_refused(repo_copy):
    edit(repo_copy, "overlays/dev/platform/kueue/queues.yaml", "kueue.x-k8s.io/v1beta2\nkind: Topology",
         "kueue.x-k8s.io/v1alpha9\nkind: Topology")  # fmt: skip
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("Topology kueue.x-k8s.io/v1alpha9: the CRD this cluster installs serves kueue.x-k8s.io at" in e
               and "not v1alpha9" in e for e in errors), errors  # fmt: skip


def test_every_kind_of_the_job_bases_is_served(report):
    """new-job scaffolds from base/jobs; those kinds are in a render only once a job uses them."""
    crds = [r.doc for r in report.renders["dev"].resources() if r.kind == "CustomResourceDefinition"]
    served = installs.served_kinds(crds + upstream.bootstrap_crds(False))
    for path in (REPO_ROOT / "base" / "jobs").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and "/" in str(doc.get("apiVersion", "")):
                group, _, version = doc["apiVersion"].rpartition("/")
                if "." in group and not group.endswith(".k8s.io"):
                    assert version in served[(group, doc["kind"])], path


def test_a_runtime_that_lets_jobset_delete_finished_jobsets_is_refused(repo_copy):
    """kubeflow/trainer#3737: Trainer v2.3.0 recreates a failed TrainJob's JobSet once it is gone."""
    path = repo_copy.root / "base/runtimes/tcp/clustertrainingruntime.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = 600
    path.write_text(yaml.safe_dump(doc))
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("spec.template.spec.ttlSecondsAfterFinished" in e and "kubeflow/trainer#3737" in e for e in errors)


def test_an_image_a_controller_is_told_to_start_is_checked_too(repo_copy):
    """cert-manager starts ACME solver pods with the image its --acme-http01-solver-image names."""
    edit(repo_copy, "base/cert-manager/application.yaml", "      valuesObject:\n",
         "      valuesObject:\n        acmesolver:\n          image:\n            tag: canary\n")  # fmt: skip
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any(
        "args[" in e and "cert-manager-acmesolver:canary' uses the tag canary" in e and "cert-manager v1.21.2" in e
        for e in errors
    ), errors

"""trainyard validate: the repository passes, and each broken input fails naming its file."""

from __future__ import annotations

import shutil

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.cli import main
from trainyard.repo import validate
from trainyard.repo.model import kustomize

MNIST = "overlays/dev/jobs/mnist-ddp"
MNIST_PATCH = f"{MNIST}/job.yaml"


def test_the_repository_validates(report):
    assert errors_of(report) == []
    assert {c: [jp.job.name for jp in jobs] for c, jobs in report.previews.items()} == {
        "dev": ["mnist-ddp", "smoke-ddp"],
        "prod-roce": ["llama-finetune"],
        "prod-ib": ["horovod"],
    }


def test_the_repository_has_no_warnings(report):
    assert [str(p) for p in report.warnings()] == []


def test_nad_resource_the_profile_does_not_request_is_warned(repo_copy):
    edit(repo_copy, "policies/ib.yaml", '    nvidia.com/ib_sriov_vf: "1"', "")
    kustomize.clear_cache()
    warnings = [str(p) for p in validate.validate(repo_copy, ["prod-ib"]).warnings()]
    assert any("nvidia.com/ib_sriov_vf" in w and "overlays/prod-ib/platform/networks" in w for w in warnings)


def _validate(repo, cluster="dev") -> list[str]:
    kustomize.clear_cache()
    return errors_of(validate.validate(repo, [cluster]))


def _assert_one(errors: list[str], *fragments: str) -> None:
    assert any(all(f in e for f in fragments) for e in errors), "\n".join(errors) or "no errors"


def test_bad_yaml_names_the_job_folder(repo_copy):
    (repo_copy.root / MNIST_PATCH).write_text("- op: replace\n  path: /metadata/name\n value: x\n  oops: [\n")
    _assert_one(_validate(repo_copy), f"{MNIST_PATCH}:3:", "not valid YAML")


def test_unknown_profile_names_the_webhook_overlay(repo_copy):
    edit(repo_copy, "overlays/dev/platform/webhook/kustomization.yaml", "defaultFabric: tcp", "defaultFabric: tpc")
    _assert_one(_validate(repo_copy), "overlays/dev/platform/webhook", "unknown fabric profile 'tpc'", "known profiles")


def test_unknown_profile_label_on_a_job(repo_copy):
    edit(
        repo_copy,
        MNIST_PATCH,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: add\n  path: /spec/pytorchReplicaSpecs/Worker/template/metadata\n"
        "  value: {labels: {trainyard.dev/fabric: infiniband}}\n- op: replace\n  path: /spec/nprocPerNode",
    )
    errors = _validate(repo_copy)
    _assert_one(errors, MNIST, "unknown fabric profile 'infiniband'")
    _assert_one(errors, MNIST, "the webhook denies it")  # a webhook-mode cluster


def test_missing_nad_names_the_networks_overlay(repo_copy):
    edit(
        repo_copy, "overlays/dev/platform/networks/kustomization.yaml", "value: training-network", "value: lab-network"
    )
    _assert_one(
        _validate(repo_copy),
        "overlays/dev/platform/networks",
        "NetworkAttachmentDefinition ml-training/training-network",
        "does not define",
    )


def test_wrong_container_name(repo_copy):
    edit(
        repo_copy,
        MNIST_PATCH,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: replace\n  path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/name\n  value: trainer\n"
        "- op: replace\n  path: /spec/nprocPerNode",
    )
    containers = "Worker.template.spec.containers"
    _assert_one(_validate(repo_copy), MNIST, containers, "at least one container with name pytorch")


def test_two_masters(repo_copy):
    edit(
        repo_copy,
        MNIST_PATCH,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: replace\n  path: /spec/pytorchReplicaSpecs/Master/replicas\n  value: 2\n"
        "- op: replace\n  path: /spec/nprocPerNode",
    )
    _assert_one(_validate(repo_copy), MNIST, "Master.replicas: Forbidden: must be 1")


def test_duplicate_job_names(repo_copy):
    shutil.copytree(repo_copy.root / MNIST, repo_copy.root / "overlays/dev/jobs/mnist-ddp-again")
    errors = _validate(repo_copy)
    _assert_one(errors, "overlays/dev/jobs/mnist-ddp-again", "PyTorchJob 'mnist-ddp' is also defined in", MNIST)


def test_latest_tag(repo_copy):
    edit(
        repo_copy,
        f"{MNIST}/kustomization.yaml",
        "patches:",
        "images:\n  - name: registry.example.com/ml/trainer\n    newTag: latest\npatches:",
    )
    _assert_one(_validate(repo_copy), MNIST, "uses the tag latest")


def test_untagged_image_in_a_base(repo_copy):
    edit(repo_copy, "base/webhook/deployment.yaml", "trainyard-webhook:0.1.0", "trainyard-webhook")
    _assert_one(_validate(repo_copy), "base/webhook/deployment.yaml", "has no tag")


def test_folklore_nccl_variable(repo_copy):
    edit(
        repo_copy,
        MNIST_PATCH,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: add\n  path: /spec/pytorchReplicaSpecs/Master/template/spec/containers/0/env\n"
        "  value: [{name: NCCL_SOCKET_TIMEOUT, value: '600'}]\n- op: replace\n  path: /spec/nprocPerNode",
    )
    _assert_one(_validate(repo_copy), MNIST, "NCCL_SOCKET_TIMEOUT", "does not exist in NCCL")


def test_ib_disable_on_an_ib_cluster(repo_copy):
    path = "overlays/prod-roce/jobs/llama-finetune/job.yaml"
    edit(
        repo_copy,
        path,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: add\n  path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env\n"
        "  value: [{name: NCCL_IB_DISABLE, value: '1'}]\n- op: replace\n  path: /spec/nprocPerNode",
    )
    _assert_one(_validate(repo_copy, "prod-roce"), "overlays/prod-roce/jobs/llama-finetune", "NCCL_IB_DISABLE=1")


def test_ttl_seconds_after_finished_fights_argo(repo_copy):
    edit(
        repo_copy,
        "base/jobs/pytorchjob/pytorchjob.yaml",
        "    backoffLimit: 3\n",
        "    backoffLimit: 3\n    ttlSecondsAfterFinished: 600\n",
    )
    _assert_one(_validate(repo_copy), MNIST, "ttlSecondsAfterFinished", "delete the job folder")


def test_schema_error_in_a_built_in_kind(repo_copy):
    edit(repo_copy, "base/webhook/service.yaml", "targetPort: https", "targetPort: https\n      protocl: TCP")
    _assert_one(_validate(repo_copy), "base/webhook/service.yaml", "unknown field 'protocl'")


def test_cluster_scoped_object_with_a_namespace(repo_copy):
    edit(
        repo_copy,
        "base/webhook/validating-admission-policy.yaml",
        "  name: trainyard-fabric-required\n  labels:",
        "  name: trainyard-fabric-required\n  namespace: trainyard-system\n  labels:",
    )
    _assert_one(_validate(repo_copy), "base/webhook/validating-admission-policy.yaml", "cluster-scoped")


def test_crd_provider_after_its_user(repo_copy):
    edit(repo_copy, "base/multus/application.yaml", 'sync-wave: "-1"', 'sync-wave: "3"')
    _assert_one(
        _validate(repo_copy),
        "overlays/dev/platform/networks",
        "API group 'k8s.cni.cncf.io' is installed in sync wave 3",
    )


def test_unpinned_upstream(repo_copy):
    edit(repo_copy, "base/training-operator/application.yaml", "targetRevision: v1.9.4", "targetRevision: master")
    _assert_one(_validate(repo_copy), "base/training-operator/application.yaml", "is not pinned")


def test_application_without_a_wave(repo_copy):
    edit(
        repo_copy,
        "base/apps/platform.yaml",
        '  name: trainyard-storage\n  namespace: argocd\n  annotations:\n    argocd.argoproj.io/sync-wave: "1"\n',
        "  name: trainyard-storage\n  namespace: argocd\n",
    )
    _assert_one(_validate(repo_copy), "base/apps/platform.yaml", "trainyard-storage", "sync-wave")


def test_job_folder_may_not_create_cluster_objects(repo_copy):
    (repo_copy.root / f"{MNIST}/role.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: sneaky\nrules: []\n"
    )
    edit(
        repo_copy,
        f"{MNIST}/kustomization.yaml",
        "  - ../../../../base/jobs/pytorchjob\n",
        "  - ../../../../base/jobs/pytorchjob\n  - role.yaml\n",
    )
    _assert_one(_validate(repo_copy), f"{MNIST}/role.yaml", "project trainyard-jobs", "ClusterRole")


def test_policy_parameters_agree_with_policies(repo_copy):
    edit(
        repo_copy, "overlays/dev/platform/webhook/kustomization.yaml", "fabric.tcp: training-network", "fabric.tcp: lab"
    )
    _assert_one(_validate(repo_copy), "overlays/dev/platform/webhook", "fabric.tcp is 'lab'", "policies/tcp.yaml")


def test_webhook_match_conditions_must_pass_the_trainer_image(repo_copy):
    edit(repo_copy, "base/webhook/mutating-webhook.yaml", "/ml/trainer|", "/ml/trainr|")
    errors = _validate(repo_copy)
    _assert_one(errors, "base/webhook/mutating-webhook.yaml", "matchConditions do not pass")
    _assert_one(errors, "base/webhook/mutating-webhook.yaml", "[runs-a-trainer-image]: differs from the rule")


def test_an_opt_out_spelt_otherwise_than_the_engine_reads_it(repo_copy):
    # the policy would honour "False" too, where the engine (names.asks_opt_out) reads only "false"
    edit(
        repo_copy,
        "base/webhook/validating-admission-policy.yaml",
        "object.metadata.annotations['trainyard.dev/inject'] == 'false' &&",
        "object.metadata.annotations['trainyard.dev/inject'] in ['false', 'False'] &&",
    )
    _assert_one(
        _validate(repo_copy),
        "base/webhook/validating-admission-policy.yaml",
        "spec.matchConditions[not-opted-out]: differs from the rule",
        "authorizer.group('trainyard.dev')",
    )


def test_admission_policy_that_would_not_catch_a_webhook_outage(repo_copy):
    # a policy whose checks always pass: the pods are admitted even without the webhook
    for old in (
        '    - expression: "!variables.creating || variables.offered"\n',
        '    - expression: "!variables.creating || !variables.offered || variables.attached"\n',
        '    - expression: "!variables.creating || size(variables.withoutShm) == 0"\n',
        '    - expression: "!variables.creating || size(variables.withoutIfname) == 0"\n',
    ):
        edit(repo_copy, "base/webhook/validating-admission-policy.yaml", old, '    - expression: "true"\n')
    _assert_one(_validate(repo_copy), MNIST, "admits it even without the webhook")


def test_validate_cli_exit_status_and_previews(repo_copy, tmp_path, capsys, monkeypatch):
    edit(
        repo_copy,
        MNIST_PATCH,
        "- op: replace\n  path: /spec/nprocPerNode",
        "- op: replace\n  path: /spec/pytorchReplicaSpecs/Master/replicas\n  value: 2\n"
        "- op: replace\n  path: /spec/nprocPerNode",
    )
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    assert main(["validate", "--cluster", "dev"]) == 1
    captured = capsys.readouterr()
    assert "error: [dev] overlays/dev/jobs/mnist-ddp" in captured.err
    assert "validation found" in captured.err and "Traceback" not in captured.err


def test_validate_cli_writes_previews(repo, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(repo.root)
    assert main(["validate", "--cluster", "dev", "--previews", str(tmp_path)]) == 0
    text = (tmp_path / "dev" / "mnist-ddp.txt").read_text()
    assert "NCCL_SOCKET_IFNAME=net1" in text and "+++ mnist-ddp-master-0 (admitted)" in text
    assert "kind: Pod" in (tmp_path / "dev" / "mnist-ddp.pods.yaml").read_text()
    assert "dev: 17 Applications" in capsys.readouterr().out


@pytest.mark.parametrize("cluster", ["dev", "prod-roce", "prod-ib"])
def test_every_rendered_builtin_object_passes_strict_schema(report, cluster):
    from trainyard.repo.model import schema

    checked = 0
    for r in report.renders[cluster].resources():
        if schema.has_schema(r.kind, r.api_version):
            assert schema.validate(r.doc) == [], r.describe()
            checked += 1
    assert checked >= 15


# --- TrainJobs -------------------------------------------------------------------------------------

SMOKE = "overlays/dev/jobs/smoke-ddp"


def test_trainjob_with_reserved_torch_env(repo_copy):
    edit(repo_copy, f"{SMOKE}/job.yaml", "    numProcPerNode: 1\n",
         "    numProcPerNode: 1\n    env:\n      - {name: PET_NNODES, value: '8'}\n")  # fmt: skip
    _assert_one(_validate(repo_copy), SMOKE, "Kubeflow Trainer v2.3.0 would refuse it", "must not have reserved envs")


def test_trainjob_nccl_env_is_linted_with_the_fabrics_transport(repo_copy):
    edit(repo_copy, f"{SMOKE}/job.yaml", "    numProcPerNode: 1\n",
         "    numProcPerNode: 1\n    env:\n      - {name: NCCL_TIMEOUT, value: '60'}\n")  # fmt: skip
    _assert_one(_validate(repo_copy), SMOKE, "spec.trainer.env NCCL_TIMEOUT", "does not exist")


def test_trainjob_in_an_unknown_queue(repo_copy):
    edit(repo_copy, "base/jobs/trainjob/trainjob.yaml", "kueue.x-k8s.io/queue-name: training",
         "kueue.x-k8s.io/queue-name: batch")  # fmt: skip
    _assert_one(_validate(repo_copy), SMOKE, "no LocalQueue 'batch' in namespace ml-training (known: training)")


def test_a_service_named_like_a_trainjob_is_refused(repo_copy):
    (repo_copy.root / SMOKE / "service.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: smoke-ddp\nspec:\n  clusterIP: None\n"
        "  selector:\n    app: other\n"
    )
    edit(repo_copy, f"{SMOKE}/kustomization.yaml", "  - ../../../../base/jobs/trainjob\n",
         "  - ../../../../base/jobs/trainjob\n  - service.yaml\n")  # fmt: skip
    _assert_one(
        _validate(repo_copy),
        f"{SMOKE}/service.yaml",
        "the Service the controllers create for TrainJob",
        "headless Service",
    )


def test_force_replace_on_a_trainjob_is_a_warning(repo_copy):
    edit(repo_copy, "base/jobs/trainjob/trainjob.yaml", "    app.kubernetes.io/part-of: trainyard\n",
         "    app.kubernetes.io/part-of: trainyard\n  annotations:\n"
         "    argocd.argoproj.io/sync-options: Force=true,Replace=true\n")  # fmt: skip
    kustomize.clear_cache()
    report = validate.validate(repo_copy, ["dev"])
    assert errors_of(report) == []
    assert any("delete and re-create this TrainJob" in str(w) for w in report.warnings())


def test_a_profile_colocating_on_a_level_the_cluster_lacks(repo_copy):
    edit(
        repo_copy,
        "policies/tcp.yaml",
        "      key: topology.kubernetes.io/zone",
        "      key: topology.trainyard.dev/rack",
    )
    from trainyard.repo.generate import files

    files.write(repo_copy)
    errors = _validate(repo_copy)
    _assert_one(
        errors, "profile tcp colocates on topology.trainyard.dev/rack", "not a level of the cluster's Kueue Topology"
    )
    _assert_one(errors, SMOKE, "Kueue would never admit it", "is not a level of Topology trainyard")


def test_remote_resources_in_a_job_folder_are_not_treated_as_upstream(repo_copy):
    remote = "https://raw.githubusercontent.com/example/x/v1/job.yaml"
    base = "  - ../../../../base/jobs/trainjob\n"
    edit(repo_copy, f"{SMOKE}/kustomization.yaml", base, f"{base}  - {remote}\n")
    _assert_one(_validate(repo_copy), f"{SMOKE}/kustomization.yaml:9:", "fetched from the network", "remote base")


def test_a_moving_image_pin_on_a_remote_manifest(repo_copy):
    edit(repo_copy, "base/multus/install/kustomization.yaml", "newTag: v4.3.0-thick", "newTag: snapshot-thick")
    _assert_one(_validate(repo_copy), "base/multus/application.yaml", "multus-cni:snapshot-thick", "moving tag")

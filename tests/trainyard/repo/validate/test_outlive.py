"""Annotations that would keep a job after its folder is deleted (or its object removed from the
folder) are refused in job folders; the benign sync options still pass."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import repository
from trainyard.repo.validate.outlive import keeping_options

MNIST = "overlays/dev/jobs/mnist-ddp"
BASE = "  - ../../../../base/jobs/pytorchjob\n"
OPTIONS = "argocd.argoproj.io/sync-options"


def _configmap(name: str, annotations: dict[str, str], extra: str = "") -> str:
    ann = "".join(f"    {k}: {v!r}\n" for k, v in annotations.items())
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations:\n{ann}{extra}data: {{a: b}}\n"


def _with_objects(repo: repository.Repository, objects: dict[str, str]) -> list[str]:
    for name, text in objects.items():
        (repo.root / MNIST / f"{name}.yaml").write_text(text)
    edit(repo, f"{MNIST}/kustomization.yaml", BASE, BASE + "".join(f"  - {n}.yaml\n" for n in objects))
    return errors_of(validate.validate(repo, ["dev"]), "dev")


# (annotations, what the refusal names)
HOSTILE = {
    "delete-false": ({OPTIONS: "Delete=false"}, "Delete=false: Argo CD leaves the object in the cluster"),
    "delete-confirm": ({OPTIONS: "ServerSideApply=true, Delete=confirm"}, "Delete=confirm: Argo CD deletes nothing"),
    "prune-false": ({OPTIONS: " Prune=false "}, "Prune=false: Argo CD never prunes the object"),
    "prune-confirm": ({OPTIONS: "PruneLast=true,Prune=confirm"}, "Prune=confirm: Argo CD prunes the object only"),
    "helm-keep": ({"helm.sh/resource-policy": "keep"}, "helm.sh/resource-policy]: keep makes Argo CD leave"),
}


def test_each_option_that_keeps_a_job_is_refused_naming_file_object_and_option(repo_copy):
    objects = {name: _configmap(name, ann) for name, (ann, _) in HOSTILE.items()}
    objects["finalized"] = _configmap("finalized", {}, "  finalizers: [example.com/keep]\n").replace(
        "  annotations:\n", ""
    )
    errors = _with_objects(repo_copy, objects)
    for name, (_, said) in HOSTILE.items():
        mine = [e for e in errors if f"{MNIST}/{name}.yaml" in e and f"ConfigMap ml-training/{name}" in e]
        assert any(said in e for e in mine), f"{name}: {mine or errors}"
    assert any("metadata.finalizers ['example.com/keep']" in e and "finalized.yaml" in e for e in errors), errors


def test_the_job_object_itself_is_refused_too(repo_copy):
    path = repo_copy.root / MNIST / "job.yaml"
    patch = f"- op: add\n  path: /metadata/annotations\n  value: {{{OPTIONS}: Delete=false}}\n"
    path.write_text(path.read_text() + patch)
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    assert any("PyTorchJob ml-training/mnist-ddp" in e and "Delete=false" in e and MNIST in e for e in errors), errors


def test_benign_options_pass(repo_copy):
    """Positive control: options that change how an object is applied or compared, and a later
    ``Delete=`` item that Argo CD never reads (the first one wins), keep nothing."""
    benign = {
        "first-wins": _configmap("first-wins", {OPTIONS: "Replace=true"}),
        "compare": _configmap("compare", {"argocd.argoproj.io/compare-options": "IgnoreExtraneous"}),
        "helm-other": _configmap("helm-other", {"helm.sh/resource-policy": "delete"}),
    }
    errors = _with_objects(repo_copy, benign)
    assert not [e for e in errors if any(f"{n}.yaml" in e for n in benign)], errors


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("Delete=false", ["Delete=false"]),
        ("Delete=true,Delete=false", []),  # GetAnnotationOptionValue: the first Delete= item wins
        ("Delete=false,Delete=true", ["Delete=false"]),
        ("\tPrune=confirm\n", ["Prune=confirm"]),  # strings.TrimSpace
        ("delete=false", []),  # compared exactly: Argo CD ignores it (refused as unknown elsewhere)
        ("Delete=False", []),
        ("Delete=false,Prune=false", ["Delete=false", "Prune=false"]),
        ("", []),
    ],
)
def test_options_are_read_as_gitops_engine_reads_them(value, kept):
    assert [item for item, _ in keeping_options({OPTIONS: value})] == kept


ITEMS = st.sampled_from(["Delete=false", "Delete=confirm", "Delete=true", "Prune=false", "Prune=confirm",
                         "ServerSideApply=true", "Replace=true", "", " ", "Prune=true"])  # fmt: skip


@given(st.lists(ITEMS, max_size=6), st.sampled_from([",", ", ", " ,"]))
def test_the_first_delete_and_prune_items_decide(items, sep):
    """Whatever the list, the object is kept exactly when the first Delete= (Prune=) item, after
    trimming, is false or confirm."""
    found = [item for item, _ in keeping_options({OPTIONS: sep.join(items)})]
    want = []
    for option in ("Delete", "Prune"):
        first = next((i.strip() for i in items if i.strip().startswith(option + "=")), None)
        if first in (f"{option}=false", f"{option}=confirm"):
            want.append(first)
    assert found == want


def test_options_the_sync_does_not_emulate_are_refused_by_name(repo_copy):
    errors = _with_objects(repo_copy, {"ssa": _configmap("ssa", {OPTIONS: "ServerSideApply=true,PruneLast=true"})})
    mine = [e for e in errors if "ssa.yaml" in e]
    for option in ("ServerSideApply=true", "PruneLast=true"):
        assert any(f"{OPTIONS} {option} is not emulated by trainyard's sync" in e for e in mine), mine

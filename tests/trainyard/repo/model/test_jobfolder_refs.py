"""A job folder's references and keys, checked on its raw files (jobfolder.scan): every field that
names a file or folder refuses what kustomize would fetch, spelled any way kustomize accepts and
with a local folder of the same path beside it; a key written twice, or spelled in a case kustomize
folds, is refused with its lines. Each has the benign form beside it, which passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import jobfolder, kustomize
from trainyard.repo.model.repository import Repository

JOB = "overlays/dev/jobs/j"
HEAD = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n"
PATCH = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  b: '2'\n"
OPS = "- op: add\n  path: /data/c\n  value: '3'\n"
FILES = {
    "cm.yaml": CM,
    "patch.yaml": PATCH,
    "ops.yaml": OPS,
    "app.env": "A=1\n",
    "settings.yaml": "level: info\n",
    "schema.json": "{}\n",
    "repl.yaml": "source: {kind: ConfigMap, name: cfg, fieldPath: data.a}\ntargets: []\n",
    "crd.yaml": "{}\n",
    "config.yaml": "namePrefix: []\n",
    "sub/kustomization.yaml": "resources: [../cm2.yaml]\n",
    "cm2.yaml": CM.replace("cfg", "cfg2"),
}
# one field per line: (the field as a job folder may write it, the field naming a remote as REMOTE)
FIELDS = {
    "resources": ("resources:\n  - cm.yaml\n", "resources:\n  - REMOTE\n"),
    "bases": ("bases:\n  - sub\n", "bases:\n  - REMOTE\n"),
    "components": ("resources: [cm.yaml]\n", "resources: [cm.yaml]\ncomponents:\n  - REMOTE\n"),
    "patches path": ("patches:\n  - path: patch.yaml\n", "patches:\n  - path: REMOTE\n"),
    "patchesStrategicMerge": ("patchesStrategicMerge:\n  - patch.yaml\n", "patchesStrategicMerge:\n  - REMOTE\n"),
    "patchesJson6902 path": (
        "patchesJson6902:\n  - target: {version: v1, kind: ConfigMap, name: cfg}\n    path: ops.yaml\n",
        "patchesJson6902:\n  - target: {version: v1, kind: ConfigMap, name: cfg}\n    path: REMOTE\n",
    ),
    "configMapGenerator files": (
        "configMapGenerator:\n  - name: g\n    files: [settings.yaml]\n",
        "configMapGenerator:\n  - name: g\n    files:\n      - REMOTE\n",
    ),
    "configMapGenerator files key=path": (
        "configMapGenerator:\n  - name: g\n    files: [k=settings.yaml]\n",
        "configMapGenerator:\n  - name: g\n    files:\n      - k=REMOTE\n",
    ),
    "configMapGenerator envs": (
        "configMapGenerator:\n  - name: g\n    envs: [app.env]\n",
        "configMapGenerator:\n  - name: g\n    envs:\n      - REMOTE\n",
    ),
    "secretGenerator env": (
        "secretGenerator:\n  - name: g\n    env: app.env\n",
        "secretGenerator:\n  - name: g\n    env: REMOTE\n",
    ),
    "openapi path": ("openapi:\n  path: schema.json\n", "openapi:\n  path: REMOTE\n"),
    "replacements path": ("replacements:\n  - path: repl.yaml\n", "replacements:\n  - path: REMOTE\n"),
    "crds": ("crds:\n  - crd.yaml\n", "crds:\n  - REMOTE\n"),
    "configurations": ("configurations:\n  - config.yaml\n", "configurations:\n  - REMOTE\n"),
}
REMOTES = [
    "GitHub.com/org/repo//deploy?ref=v1",
    "me@example.com:org/repo",
    "Git::https://example.com/org/repo",
    "SSH://git@example.com:2222/org/repo",
    "HTTPS://example.com/x.yaml",
    "gİthub.com/org/repo",
]


def _repo(tmp_path: Path, kustomization: str, files: dict[str, str] | None = None) -> tuple[Repository, Path]:
    folder = tmp_path / JOB
    for name, text in {**FILES, **(files or {})}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "kustomization.yaml").write_text(HEAD + kustomization, encoding="utf-8")
    return Repository(root=tmp_path, url="https://example.com/gitops.git", revision="main"), folder


def _problems(tmp_path: Path, kustomization: str, files: dict[str, str] | None = None) -> list[str]:
    repo, folder = _repo(tmp_path, kustomization, files)
    return [str(p) for p in jobfolder.scan(repo, folder)]


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_naming_local_files_passes(tmp_path, field):
    assert _problems(tmp_path, FIELDS[field][0]) == []


@pytest.mark.parametrize("remote", REMOTES)
@pytest.mark.parametrize("field", FIELDS)
def test_each_field_refuses_a_remote_even_with_a_local_folder_of_that_path(tmp_path, field, remote):
    text = FIELDS[field][1].replace("REMOTE", remote)
    shadow = f"sub/{remote}/kustomization.yaml"  # kustomize clones all the same (FileLoader.New tries git first)
    problems = _problems(tmp_path, text, {shadow: "resources: []\n", remote + "/kustomization.yaml": "resources: []\n"})
    line = HEAD.count("\n") + FIELDS[field][1].split("REMOTE")[0].count("\n") + 1
    hits = [p for p in problems if f"{JOB}/kustomization.yaml:{line}:" in p and "fetched from the network" in p]
    assert hits, problems


def test_the_message_names_the_repository_kustomize_would_clone(tmp_path):
    (problem,) = _problems(tmp_path, "resources:\n  - GitHub.com/org/repo//deploy?ref=v1\n")
    assert "(a remote base or URL: the git repository https://github.com/org/repo at v1, which it clones)" in problem


KEY_CASES = {
    "Resources": ("Resources:\n  - cm.yaml\n", 3, "'Resources': kustomize reads this key as 'resources'"),
    "a patch's Path": ("patches:\n  - Path: patch.yaml\n", 4, "'Path': kustomize reads this key as 'path'"),
    "long s": ("re\u017fources:\n  - cm.yaml\n", 3, "kustomize reads this key as 'resources'"),
    "HelmCharts": ("HelmCharts:\n  - name: x\n", 3, "kustomize reads this key as 'helmCharts'"),
    "a generator's FILES": (
        "configMapGenerator:\n  - name: g\n    FILES: [settings.yaml]\n",
        5,
        "kustomize reads this key as 'files'",
    ),
    "merged in": ("<<: {PATCHES: [{path: patch.yaml}]}\n", 3, "kustomize reads this key as 'patches'"),
}


@pytest.mark.parametrize("case", KEY_CASES)
def test_a_kustomization_key_in_another_case_is_refused(tmp_path, case):
    text, line, says = KEY_CASES[case]
    problems = _problems(tmp_path, text)
    assert any(f"{JOB}/kustomization.yaml:{line}:" in p and says in p for p in problems), problems


def test_keys_of_labels_and_annotations_are_data_whatever_their_case(tmp_path):
    text = "resources: [cm.yaml]\ncommonLabels:\n  Path: x\n  Resources: y\ncommonAnnotations:\n  Kind: z\n"
    assert _problems(tmp_path, text) == []


TWICE = {
    "in the kustomization": ("resources: [cm.yaml]\nnamePrefix: a-\nnamePrefix: b-\n", {}, "kustomization.yaml", 5, 4),
    "a patch's path": ("patches:\n  - path: patch.yaml\n    path: other.yaml\n", {}, "kustomization.yaml", 5, 4),
    "in a resource": ("resources: [cm.yaml]\n", {"cm.yaml": CM + "  a: '2'\n"}, "cm.yaml", 7, 6),
    "in a patch": ("patches:\n  - path: patch.yaml\n", {"patch.yaml": PATCH + "  b: '3'\n"}, "patch.yaml", 7, 6),
    "in a JSON patch": (
        "patchesJson6902:\n  - target: {version: v1, kind: ConfigMap, name: cfg}\n    path: ops.yaml\n",
        {"ops.yaml": OPS + "  path: /data/d\n"}, "ops.yaml", 4, 2,
    ),
    "in a generator's YAML file": (
        "configMapGenerator:\n  - name: g\n    files: [settings.yaml]\n",
        {"settings.yaml": "level: info\nlevel: debug\n"}, "settings.yaml", 2, 1,
    ),
    "in a replacement file": (
        "replacements:\n  - path: repl.yaml\n", {"repl.yaml": FILES["repl.yaml"] + "source: {}\n"}, "repl.yaml", 3, 1,
    ),
    "merged into the kustomization after its own key": (
        "namePrefix: a-\n<<: {namePrefix: b-}\nresources: [cm.yaml]\n", {}, "kustomization.yaml", 4, 3,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", TWICE)
def test_a_key_given_twice_is_refused_naming_the_file_and_both_lines(tmp_path, case):
    text, files, where, line, other = TWICE[case]
    problems = _problems(tmp_path, text, files)
    hits = [p for p in problems if f"{JOB}/{where}:{line}:" in p and re.search(rf"\b{other}\b", p)]
    assert hits, problems


def test_anchors_aliases_and_merges_that_override_nothing_pass(tmp_path):
    cm = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels: &l {app: x}\n"
        "  annotations: {<<: *l, note: y}\ndata: {a: '1'}\n"
    )
    kustomization = "resources: [cm.yaml]\nlabels:\n  - pairs: &p {team: ml}\ncommonAnnotations: *p\n"
    assert _problems(tmp_path, kustomization, {"cm.yaml": cm}) == []


def test_a_generator_file_that_is_not_yaml_is_data(tmp_path):
    text = "configMapGenerator:\n  - name: g\n    files: [settings.yaml]\n"
    assert _problems(tmp_path, text, {"settings.yaml": "{{ .Values.x }}: [\n"}) == []


SMOKE = "overlays/dev/jobs/smoke-ddp"


@pytest.mark.parametrize(
    ("old", "new", "line", "says"),
    [
        ("  - ../../../../base/jobs/trainjob\n", "  - ../../../../base/jobs/trainjob\n  - me@example.com:org/repo\n",
         9, "fetched from the network by kustomize"),
        ("  - path: job.yaml\n", "  - Path: job.yaml\n", 10, "kustomize reads this key as 'path'"),
        ("  - path: job.yaml\n", "  - path: job.yaml\n    path: job.yaml\n", 11, "written twice"),
    ],
)  # fmt: skip
def test_validate_refuses_them_in_a_real_job_folder_before_kustomize_runs(repo_copy, old, new, line, says):
    shadow = repo_copy.root / SMOKE / "me@example.com:org" / "repo"
    shadow.mkdir(parents=True)
    (shadow / "kustomization.yaml").write_text("resources: []\n", encoding="utf-8")
    edit(repo_copy, f"{SMOKE}/kustomization.yaml", old, new)
    kustomize.clear_cache()
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any(f"{SMOKE}/kustomization.yaml:{line}:" in e and says in e for e in errors), "\n".join(errors)

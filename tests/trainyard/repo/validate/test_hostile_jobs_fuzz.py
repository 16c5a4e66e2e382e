"""Whatever a job folder holds, `trainyard validate` answers with problems (or none), never with an
exception: random bytes, byte order marks, UTF-16, huge and deep files, binary, odd names, symbolic
links, pipes, YAML that is no manifest, List kinds, repeated objects, and all of them listed in the
folder's kustomization or overwriting it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import COPIED, REPO_ROOT
from trainyard.contract.errors import UserError
from trainyard.repo import validate
from trainyard.repo.model import jobfolder, kustomize, repository

JOB = "overlays/dev/jobs/mnist-ddp"
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: ml-training\ndata:\n  k: v\n"


def _bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 7)]
    return "\n".join(lines) + "\n"


TEXTS = {
    "configmap": CM,
    "configmap twice": CM + "---\n" + CM,
    "list": "apiVersion: v1\nkind: List\nitems:\n- " + CM.replace("\n", "\n  ").rstrip() + "\n- {kind: Secret}\n",
    "list of scalars": "apiVersion: v1\nkind: List\nitems: [1, two, null]\n",
    "not a manifest": "some: [irrelevant, yaml]\nname: 5\n",
    "a scalar": "just text\n",
    "a sequence": "- a\n- b\n",
    "metadata not a mapping": "apiVersion: v1\nkind: ConfigMap\nmetadata: [x]\n",
    "name not a string": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 5, labels: {a: {b: c}}}\n",
    "kind not a string": "apiVersion: v1\nkind: [ConfigMap]\nmetadata: {name: k}\n",
    "deep": "a: " + "[" * 3000 + "]" * 3000 + "\n",
    "alias bomb": _bomb(),
    "tags": "apiVersion: v1\nkind: ConfigMap\nmetadata: !!python/object:os.system {name: t}\ndata: !!binary aGk=\n",
    "NaN and huge numbers": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\ndata: {a: .nan, b: "
    + "9" * 5000
    + "}\n",
    "JSON patch with bad ops": "- op: nope\n- {op: add, path: x}\n- 5\n",
    "a kustomization": "resources: [../../../../base/jobs/pytorchjob, ../../../../../etc, 'https://x/y', extra.yaml]\n"
    "helmCharts: [{name: x}]\nnamePrefix: " + "p" * 70 + "\n",
    "duplicate keys": "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata: {name: d}\nmetadata: {name: e}\n",
    "NUL": "apiVersion: v1\x00kind: ConfigMap\n",
}
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "latin-1"]
NAMES = ["extra.yaml", "more.yml", "obj.json", "sub/nested.yaml", ".hidden.yaml", "with space.yaml", "caf\u00e9.yaml",
         "line\nbreak.yaml", os.fsdecode(b"bad\xff.yaml"), "kustomization.yaml", "job.yaml", "Chart.yaml", "x.jsonnet",
         ".argocd-source.yaml"]  # fmt: skip


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, str, bytes | str, bool]:
    """(file name, what it is, its content, listed in the kustomization); "huge" stands for a file over
    the cap (written only when the example runs, so that a failing example prints short)."""
    name = draw(st.sampled_from(NAMES))
    what = draw(st.sampled_from(["file"] * 6 + ["link-in", "link-out", "link-dangling", "link-loop", "fifo", "folder"]))
    if draw(st.integers(0, 30)) == 0:
        data: bytes | str = "huge"
    elif draw(st.booleans()):
        data = TEXTS[draw(st.sampled_from(sorted(TEXTS)))].encode(draw(st.sampled_from(ENCODINGS)), "replace")
    else:
        data = draw(st.binary(max_size=300))
    return name, what, data, draw(st.booleans())


@pytest.fixture(scope="module")
def fuzz_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    for name in COPIED:
        shutil.copytree(REPO_ROOT / name, root / name)
    shutil.copytree(root / JOB, root.parent / "original-job")
    return root


def _write(folder: Path, name: str, what: str, data: bytes | str) -> None:
    if data == "huge":
        data = b"a: '" + b"x" * (jobfolder.MAX_FILE_BYTES + 10) + b"'\n"
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():  # a file, link or pipe an earlier entry made
        path.unlink()
    if what == "file":
        path.write_bytes(data)
    elif what == "folder":
        path.mkdir()
        (path / "inner.yaml").write_bytes(data)
    elif what == "fifo":
        os.mkfifo(path)
    else:
        target = {"link-in": folder / "job.yaml", "link-out": Path("/etc/passwd"),
                  "link-dangling": folder / "nowhere.yaml", "link-loop": path}[what]  # fmt: skip
        os.symlink(os.path.relpath(target, path.parent) if what == "link-in" else target, path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(entries(), min_size=1, max_size=4))
def test_validate_never_raises_whatever_a_job_folder_holds(fuzz_repo, files):
    folder = fuzz_repo / JOB
    shutil.rmtree(folder)
    shutil.copytree(fuzz_repo.parent / "original-job", folder)
    listed = []
    for name, what, data, listed_too in files:
        _write(folder, name, what, data)
        if listed_too and name not in ("kustomization.yaml", "job.yaml"):
            listed.append(name)
    kustomization = folder / "kustomization.yaml"
    if listed and kustomization.is_file() and not kustomization.is_symlink():
        with open(kustomization, "ab") as f:  # appended as a second resources list (the last one wins in YAML)
            f.write(("\nresources:\n" + "".join(f"  - {n!r}\n" for n in listed)).encode("utf-8", "surrogateescape"))
    kustomize.clear_cache()
    try:
        report = validate.validate(repository.load(fuzz_repo), ["dev"])
    except UserError as exc:  # handled: the CLI prints it
        str(exc).encode("utf-8")
        return
    for problem in report.problems:
        assert "Traceback" not in problem.message
        str(problem).encode("utf-8")  # printable as it is

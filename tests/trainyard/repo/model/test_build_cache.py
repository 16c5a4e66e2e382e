"""The on-disk cache of ``kustomize build`` (trainyard/repo/model/build_cache.py), with the real kustomize:
an unchanged folder is not rebuilt; an edit to the job folder or to a base it references is; a
corrupt, partial or misplaced entry is rebuilt, never trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import edit
from trainyard.repo.model import build_cache, kustomize, repository
from trainyard.repo.model.rendered import Resource

JOB = "overlays/dev/jobs/smoke-ddp"
BASE = "base/jobs/trainjob/trainjob.yaml"


@pytest.fixture
def cached(repo_copy: repository.Repository, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The repository copy with a disk cache; ``runs`` lists each folder kustomize really built."""
    runs: list[str] = []
    real = kustomize._build

    def counting(repo, path, rel):
        runs.append(rel)
        return real(repo, path, rel)

    monkeypatch.setattr(kustomize, "_build", counting)
    monkeypatch.setattr(kustomize, "_disk", kustomize.disk_cache())  # the suite's, back after the test
    disk = kustomize.use_disk_cache(tmp_path / "cache")
    kustomize.clear_cache()
    yield repo_copy, disk, runs
    kustomize.clear_cache()


def build(repo: repository.Repository) -> list[Resource]:
    kustomize.clear_cache()  # a new process: only the disk cache is left
    return kustomize.build(repo, JOB)


def trainjob(resources: list[Resource]) -> dict:
    return next(r.doc for r in resources if r.kind == "TrainJob")


def entries(disk: build_cache.BuildCache) -> list[Path]:
    return sorted((disk.directory / "kustomize").rglob("*.json"))


def test_an_unchanged_folder_is_read_from_the_cache(cached):
    repo, disk, runs = cached
    first = build(repo)
    assert runs == [JOB] and disk.misses == 1 and len(entries(disk)) == 1
    second = build(repo)
    assert runs == [JOB], "the second build ran kustomize again"
    assert disk.hits == 1
    assert [(r.doc, r.origin, r.source) for r in second] == [(r.doc, r.origin, r.source) for r in first]
    assert trainjob(second)["metadata"]["name"] == "smoke-ddp"


def test_an_edit_to_the_job_folder_rebuilds_it(cached):
    repo, disk, runs = cached
    build(repo)
    edit(repo, f"{JOB}/job.yaml", "numNodes: 2", "numNodes: 3")
    after = build(repo)
    assert runs == [JOB, JOB]
    assert trainjob(after)["spec"]["trainer"]["numNodes"] == 3
    assert len(entries(disk)) == 2  # the old content keeps its own entry


def test_an_edit_to_a_referenced_base_rebuilds_the_job(cached):
    repo, _disk, runs = cached
    build(repo)
    edit(repo, BASE, "kueue.x-k8s.io/queue-name: training", "kueue.x-k8s.io/queue-name: other")
    after = build(repo)
    assert runs == [JOB, JOB]
    assert trainjob(after)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "other"


def test_a_new_file_in_the_job_folder_rebuilds_it(cached):
    repo, _disk, runs = cached
    build(repo)
    (repo.root / JOB / "notes.txt").write_text("read by nothing, but in the folder\n", encoding="utf-8")
    build(repo)
    assert runs == [JOB, JOB]


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # partial: a write cut short
        lambda raw: raw.replace(b"smoke-ddp", b"other-job", 1),  # the objects changed under it
        lambda raw: b"",  # empty
        lambda raw: b"\x00\xff not json",
    ],
    ids=["truncated", "tampered", "empty", "garbage"],
)
def test_a_corrupt_entry_is_rebuilt_not_trusted(cached, damage):
    repo, disk, runs = cached
    good = build(repo)
    [entry] = entries(disk)
    entry.write_bytes(damage(entry.read_bytes()))
    again = build(repo)
    assert runs == [JOB, JOB] and disk.rejected == 1
    assert trainjob(again) == trainjob(good)
    # the rebuild replaced the entry with a sound one
    build(repo)
    assert runs == [JOB, JOB] and disk.hits == 1


def test_an_entry_stored_under_another_key_is_not_used(cached):
    repo, disk, runs = cached
    build(repo)
    [entry] = entries(disk)
    edit(repo, f"{JOB}/job.yaml", "numNodes: 2", "numNodes: 3")
    key = build_cache.key(repo.root / JOB, repo.root, JOB, kustomize._tool_version(), disk.digest)
    disk.path(key).parent.mkdir(parents=True, exist_ok=True)
    disk.path(key).write_bytes(entry.read_bytes())  # the old build, filed under the new content's key
    after = build(repo)
    assert runs == [JOB, JOB] and disk.rejected == 1
    assert trainjob(after)["spec"]["trainer"]["numNodes"] == 3


def test_a_copy_of_the_repository_elsewhere_reads_the_same_entries(cached, tmp_path_factory: pytest.TempPathFactory):
    repo, disk, runs = cached
    first = build(repo)
    elsewhere = tmp_path_factory.mktemp("another") / "clone"
    shutil.copytree(repo.root, elsewhere, ignore=shutil.ignore_patterns("cache"))
    other = repository.load(elsewhere)
    second = build(other)
    assert runs == [JOB] and disk.hits == 1, "a copy at another path built again"
    assert [(r.doc, r.origin, r.source) for r in second] == [(r.doc, r.origin, r.source) for r in first]
    edit(other, f"{JOB}/job.yaml", "numNodes: 2", "numNodes: 3")
    assert trainjob(build(other))["spec"]["trainer"]["numNodes"] == 3 and runs == [JOB, JOB]


def test_the_key_covers_the_files_the_build_reads(repo_copy: repository.Repository):
    files = {repo_copy.rel(f) for f in build_cache.inputs(repo_copy.root / JOB, repo_copy.root)}
    assert {f"{JOB}/kustomization.yaml", f"{JOB}/job.yaml", BASE, "base/jobs/trainjob/kustomization.yaml"} <= files
    assert not any(f.startswith("overlays/dev/jobs/mnist-ddp") for f in files)


def test_a_remote_resource_is_not_cached(tmp_path: Path):
    folder = tmp_path / "remote"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(
        "resources:\n  - https://github.com/kubeflow/trainer//manifests/base?ref=v2.0.0\n", encoding="utf-8"
    )
    with pytest.raises(build_cache.Uncacheable):
        build_cache.inputs(folder, tmp_path)


def test_without_the_disk_cache_nothing_is_written(
    repo_copy: repository.Repository, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(kustomize, "_disk", None)
    kustomize.clear_cache()
    kustomize.build(repo_copy, JOB)
    assert not (repo_copy.root / build_cache.DEFAULT_DIR).exists()
    assert not any(tmp_path.rglob("kustomize/*/*.json"))


def test_the_listings_kept_between_builds_see_a_new_file_and_an_edited_kustomization(repo_copy: repository.Repository):
    """One run keeps what each kustomization folder says (the shared bases are read once); an entry
    counts only while the folder and its kustomization are unchanged."""
    listings: dict = {}
    root, job = repo_copy.root, repo_copy.root / JOB
    first = build_cache.inputs(job, root, listings)
    assert first == build_cache.inputs(job, root) and str(root / "base/jobs/trainjob") in listings
    again = build_cache.inputs(job, root, listings)
    assert again == first
    (root / "base/jobs/trainjob/notes.txt").write_text("kustomize can read this\n", encoding="utf-8")
    added = build_cache.inputs(job, root, listings)
    assert set(map(str, added)) - set(map(str, first)) == {str(root / "base/jobs/trainjob/notes.txt")}
    (root / JOB / "more").mkdir()
    (root / JOB / "more" / "extra.yaml").write_text("{}\n", encoding="utf-8")
    before = build_cache.inputs(job, root, listings)  # the folder changed: listed again, without more/
    assert root / JOB / "more" / "extra.yaml" not in before
    kustomization = root / JOB / "kustomization.yaml"  # edited in place: the folder's own time stays
    text = kustomization.read_text(encoding="utf-8").replace("resources:\n", "resources:\n  - more/extra.yaml\n", 1)
    kustomization.write_text(text, encoding="utf-8")
    assert root / JOB / "more" / "extra.yaml" in build_cache.inputs(job, root, listings)
    assert build_cache.inputs(job, root, listings) == build_cache.inputs(job, root)


SHADOWED = {
    "scp form with a user": "resources:\n  - me@example.com:org/repo\n",
    "host in upper case": "resources:\n  - GitHub.com/org/repo//deploy\n",
    "git:: in another case": "components:\n  - GIT::https://example.com/org/repo\n",
    "a URL in another case, as a patch": "patches:\n  - path: HTTPS://example.com/p.yaml\n",
    "the key in another case": "Resources:\n  - me@example.com:org/repo\n",
    "merged in after the own key": "resources: [local]\n<<: {resources: [me@example.com:org/repo]}\n",
}


@pytest.mark.parametrize("case", SHADOWED)
def test_a_build_that_could_reach_a_remote_is_never_cached_even_with_a_local_folder_there(tmp_path: Path, case):
    folder = tmp_path / "job"
    text = SHADOWED[case]
    (folder / "local").mkdir(parents=True)
    for shadow in ("me@example.com:org/repo", "GitHub.com/org/repo/deploy", "GIT::https:/example.com/org/repo"):
        (folder / shadow).mkdir(parents=True)  # kustomize clones all the same (FileLoader.New tries git first)
        (folder / shadow / "kustomization.yaml").write_text("resources: []\n", encoding="utf-8")
    (folder / "kustomization.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(build_cache.Uncacheable):
        build_cache.inputs(folder, tmp_path)
    # positive control: the same folder naming its local folder is cached, keyed by that folder's files
    (folder / "kustomization.yaml").write_text("resources:\n  - local\n", encoding="utf-8")
    (folder / "local" / "kustomization.yaml").write_text("resources: []\n", encoding="utf-8")
    assert folder / "local" / "kustomization.yaml" in build_cache.inputs(folder, tmp_path)

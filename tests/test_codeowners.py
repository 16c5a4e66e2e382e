"""CODEOWNERS: a job folder is the ML engineers' to approve; what every job relies on is the
platform team's (GitHub reads the file bottom up: the last matching pattern wins)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = "@trainyard/platform"


def _rules() -> list[tuple[str, list[str]]]:
    rules = []
    for line in (ROOT / ".github/CODEOWNERS").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            pattern, *owners = line.split()
            rules.append((pattern, owners))
    return rules


def _matches(pattern: str, path: str) -> bool:
    """The gitignore-style patterns this file uses: '*' (everything), '/dir/' (a folder under the
    root, '*' within one segment), '/file' (one file)."""
    if pattern == "*":
        return True
    parts = pattern.strip("/").split("/")
    segments = path.split("/")
    if len(segments) < len(parts):
        return False
    if not all(fnmatch.fnmatchcase(s, p) for s, p in zip(segments[: len(parts)], parts, strict=True)):
        return False
    return len(segments) > len(parts) if pattern.endswith("/") else len(segments) == len(parts)


def owners(path: str) -> list[str]:
    found: list[str] = []
    for pattern, who in _rules():
        if _matches(pattern, path):
            found = who
    return found


@pytest.mark.parametrize(
    "path",
    [
        "base/pod-security/validating-admission-policy.yaml",
        "base/jobs/trainjob/trainjob.yaml",
        "clusters/dev/cluster.yaml",
        "policies/tcp.yaml",
        "overlays/dev/platform/kueue/kustomization.yaml",
        "overlays/prod-ib/platform/networks/nad.yaml",
        ".github/workflows/validate.yaml",
        ".github/CODEOWNERS",
        "Makefile",
        "trainyard/repo/validate/security.py",
    ],
)
def test_what_every_job_relies_on_needs_the_platform_team(path):
    assert owners(path) == [PLATFORM]


def test_a_job_folder_is_the_ml_engineers_own():
    assert owners("overlays/dev/jobs/mnist-ddp/job.yaml") == ["@trainyard/ml-training"]
    assert owners("overlays/prod-roce/jobs/llama-finetune/kustomization.yaml") == ["@trainyard/ml-training"]

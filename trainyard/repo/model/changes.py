"""What a pull request changed, and so what ``trainyard validate --changed-since REF`` checks.

The changed files are those of ``git diff --name-only REF...HEAD`` (what the branch changed since
it left REF, as a pull request shows it), plus the uncommitted ones: staged, unstaged and
untracked (not ignored). A job folder that changed is checked (its pods previewed through the
webhook engine and the admission policies), in its cluster; a folder the change deleted needs no
check of its own. Anything the whole repository's checks read makes every cluster and every job
checked: ``base/``, ``policies/``, ``clusters/``, the rest of ``overlays/<cluster>/`` (its
``platform/``), and the tooling (any other file, except the documentation, ``bench/`` and
``tests/``, which ``trainyard validate`` does not read).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.repo.model.repository import Repository

JOB = re.compile(r"overlays/(?P<cluster>[^/]+)/jobs/(?P<job>[^/]+)/")
NOT_READ = ("bench/", "tests/")  # and *.md anywhere
GIT_TIMEOUT_S = 60


@dataclass
class Scope:
    """The clusters and job folders to check; ``everything`` when a shared file changed."""

    everything: bool = False
    reasons: list[str] = field(default_factory=list)  # why everything is checked
    jobs: dict[str, set[str]] = field(default_factory=dict)  # cluster -> changed job folders (present)
    deleted: list[str] = field(default_factory=list)  # job folders the change removed
    ignored: list[str] = field(default_factory=list)  # changed files validate does not read

    def describe(self, ref: str) -> list[str]:
        """What is checked and why, one line each."""
        if self.everything:
            shown = self.reasons[:10] + ([f"... and {len(self.reasons) - 10} more"] if len(self.reasons) > 10 else [])
            return [f"checking every cluster and job: changed since {ref}:", *(f"  {r}" for r in shown)]
        lines = []
        for cluster in sorted(self.jobs):
            for folder in sorted(self.jobs[cluster]):
                lines.append(f"checking {folder} (changed since {ref}), in cluster {cluster}")
            if not self.jobs[cluster]:
                lines.append(f"checking cluster {cluster} without job previews")
        lines += [f"not checking {folder}: deleted since {ref}" for folder in sorted(self.deleted)]
        if not lines:
            lines.append(f"nothing to check: no job folder or shared file changed since {ref}")
        return lines


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise UserError("--changed-since needs git on PATH") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git {' '.join(args)} did not finish within {GIT_TIMEOUT_S} s") from None


def changed_files(root: Path, ref: str) -> list[str]:
    """Paths (relative to ``root``) changed since ``ref``: committed on this branch since it left
    ``ref``, and uncommitted. Raises UserError (exit 2) for a ref git does not know."""
    if ref.startswith("-"):
        raise UserError(f"--changed-since {ref!r}: not a git ref")
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise UserError(f"--changed-since: {root} is not in a git work tree")
    known = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if known.returncode != 0:
        raise UserError(
            f"--changed-since {ref!r}: git knows no such commit here; fetch it first (a shallow clone needs "
            "the full history: actions/checkout with fetch-depth: 0)"
        )
    outputs = []
    for args in (
        ("diff", "--name-only", "--no-renames", "--relative", f"{ref}...HEAD", "--"),
        ("diff", "--name-only", "--no-renames", "--relative", "HEAD", "--"),
        ("ls-files", "--others", "--exclude-standard"),
    ):
        proc = _git(root, *args)
        if proc.returncode != 0:
            raise UserError(f"--changed-since {ref!r}: git {' '.join(args[:2])} failed: {proc.stderr.strip()}")
        outputs += proc.stdout.splitlines()
    return sorted({line.strip() for line in outputs if line.strip()})


def scope(repo: Repository, paths: list[str]) -> Scope:
    """What to check for changes to ``paths`` (relative to the repository root)."""
    out = Scope()
    clusters = set(repo.clusters())
    for path in paths:
        m = JOB.match(path)
        if m and m["cluster"] in clusters:
            folder = f"overlays/{m['cluster']}/jobs/{m['job']}"
            if (repo.root / folder).is_dir():
                out.jobs.setdefault(m["cluster"], set()).add(folder)
            else:  # nothing of its own to check; its cluster is checked without it
                out.jobs.setdefault(m["cluster"], set())
                if folder not in out.deleted:
                    out.deleted.append(folder)
            continue
        if path.endswith(".md") or path.startswith(NOT_READ):
            out.ignored.append(path)
            continue
        out.everything = True
        out.reasons.append(f"{path} ({_what(path)})")
    return out


def _what(path: str) -> str:
    first = path.split("/", 1)[0]
    if first in ("base", "policies", "clusters"):
        return f"{first}/ is shared by every cluster"
    if first == "overlays":
        return "a cluster's platform"
    return "the tooling"

"""The repository a local cluster's Argo CD reads: ``DIR/repo.git``, a bare git repository a user
clones, commits to and pushes to, as they would push to the Git host of a real cluster.

``serve`` commits the repository's manifests (the folders a render reads) as branch ``main``,
with ``base/repo/repo.env`` naming ``file://DIR/repo.git``, so every Application of the render
points there; ``DIR/repo`` is a clone of it (``origin``), the working copy the cluster was
rendered from. A push to ``main`` runs the bare repository's ``post-receive`` hook, which does what
a Git host's push webhook does for Argo CD: it asks the ApplicationSet controller to list the job
folders again (``argocd.argoproj.io/application-set-refresh``, argo-cd@v3.6.2:common/common.go
AnnotationApplicationSetRefresh) and the application controller to compare every Application with
the new commit (``argocd.argoproj.io/refresh``, pkg/apis/application/v1alpha1 AnnotationKeyRefresh).
Argo CD's push webhooks match a repository by host and path (argo-cd@v3.6.2:util/webhook/webhook.go
GetWebURLRegex), which a file:// URL has no host for, hence the hook.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.repo.model.repository import REPO_ENV

MANIFESTS = ("base", "clusters", "overlays", "policies")  # what a render reads
BRANCH = "main"
IDENTITY = ("-c", "user.name=trainyard", "-c", "user.email=trainyard@localhost")
REFRESH = (
    ("applicationsets", "argocd.argoproj.io/application-set-refresh=true"),
    ("applications", "argocd.argoproj.io/refresh=normal"),
)


@dataclass(frozen=True)
class Served:
    bare: Path  # DIR/repo.git
    checkout: Path  # DIR/repo, a clone of it

    @property
    def url(self) -> str:
        return f"file://{self.bare}"


def _git(*args: str, cwd: Path | None = None) -> str:
    git = shutil.which("git")
    if git is None:
        raise UserError("git is missing: install Debian's git package (apt-get install git)")
    done = subprocess.run([git, *IDENTITY, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def serve(source: Path, folder: Path, leave_out: Iterable[str] = ()) -> Served:
    """Commit ``source``'s manifests, less the paths ``leave_out`` names (relative to the
    repository), as branch ``main`` of ``folder/repo.git``; its clone at ``folder/repo``."""
    served = Served(folder.resolve() / "repo.git", folder.resolve() / "repo")
    checkout = served.checkout
    for kept in (served.bare, checkout):
        if kept.exists():
            raise UserError(f"{kept} holds the repository of an earlier cluster, with any commits pushed to it; "
                            "move it away or choose another --dir")  # fmt: skip
    for name in MANIFESTS:
        shutil.copytree(source / name, checkout / name, symlinks=True)
    for rel in leave_out:
        shutil.rmtree(checkout / rel)
    env_file = checkout / REPO_ENV
    lines = env_file.read_text(encoding="utf-8").splitlines()
    env_file.write_text(
        "\n".join(f"repoURL={served.url}" if line.startswith("repoURL=") else line for line in lines) + "\n",
        encoding="utf-8",
    )
    _git("init", "-q", f"--initial-branch={BRANCH}", cwd=checkout)
    _git("add", "-A", cwd=checkout)
    _git("commit", "-q", "-m", "the repository, as the cluster's Argo CD reads it", cwd=checkout)
    _git("clone", "-q", "--bare", str(checkout), str(served.bare))
    _git("remote", "add", "origin", str(served.bare), cwd=checkout)
    _git("fetch", "-q", "origin", cwd=checkout)
    _git("branch", "-q", f"--set-upstream-to=origin/{BRANCH}", cwd=checkout)
    return served


def remove(served: Served) -> None:
    """Remove a repository ``serve`` made, for a ``cluster up`` that failed before anyone could push."""
    shutil.rmtree(served.bare, ignore_errors=True)
    shutil.rmtree(served.checkout, ignore_errors=True)


def install_push_hook(served: Served, kubectl: Path, kubeconfig: Path) -> None:
    """The ``post-receive`` hook that asks Argo CD to read the repository again after a push."""
    lines = ["#!/bin/sh", "# what a Git host's push webhook does for Argo CD (trainyard/cluster/gitrepo.py)"]
    for resource, annotation in REFRESH:
        argv = [str(kubectl), f"--kubeconfig={kubeconfig}", "annotate", "-n", "argocd", resource, "--all",
                annotation, "--overwrite"]  # fmt: skip
        lines.append(f"{shlex.join(argv)} >/dev/null")
    hook = served.bare / "hooks" / "post-receive"
    hook.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hook.chmod(0o755)


def commit_and_push(served: Served, message: str) -> str:
    """Commit everything in the checkout and push it to ``main``; the new revision."""
    _git("add", "-A", cwd=served.checkout)
    _git("commit", "-q", "-m", message, cwd=served.checkout)
    _git("push", "-q", "origin", f"HEAD:{BRANCH}", cwd=served.checkout)
    return _git("rev-parse", "HEAD", cwd=served.checkout)

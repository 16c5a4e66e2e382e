"""Where the repository is, and the one place that says where it lives for Argo CD.

``base/repo/repo.env`` declares the repository URL and the revision Argo CD follows. The
manifests get both through kustomize replacements (``base/repo/kustomization.yaml``); the
tooling reads the same file here, so the emulated Argo CD knows which Application sources are
"this repository".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.repo.model import giturl

REPO_ENV = Path("base/repo/repo.env")
CLUSTERS = Path("clusters")
OVERLAYS = Path("overlays")
POLICIES = Path("policies")


@dataclass(frozen=True)
class Repository:
    root: Path
    url: str
    revision: str

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the repository root, with '/' separators (as git writes it)."""
        p = Path(path)
        if not p.is_absolute():
            p = (Path.cwd() / p).resolve()
        try:
            return p.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def is_this_repo(self, url: object) -> bool:
        """Whether ``url`` names this repository as Argo CD compares URLs (NormalizeGitURL on both sides)."""
        return isinstance(url, str) and normalize_url(url) != "" and normalize_url(url) == normalize_url(self.url)

    def clusters(self) -> list[str]:
        """Names of the clusters: folders of ``clusters/`` that hold a kustomization."""
        base = self.root / CLUSTERS
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and kustomization_file(p) is not None)

    def require_cluster(self, cluster: str) -> str:
        known = self.clusters()
        if cluster not in known:
            raise UserError(
                f"{CLUSTERS}/{cluster}: no such cluster (known: {', '.join(known) or 'none'}); "
                f"a cluster is a folder {CLUSTERS}/<name>/ with a kustomization.yaml"
            )
        return cluster


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization_file(folder: Path) -> Path | None:
    """The folder's kustomization file (the first of KUSTOMIZATION_FILES there), or None."""
    return next((folder / n for n in KUSTOMIZATION_FILES if (folder / n).is_file()), None)


def normalize_url(url: str) -> str:
    """A git URL as Argo CD compares it (argo-cd@v3.6.2:util/git/git.go NormalizeGitURL, see
    :mod:`trainyard.repo.model.giturl`): lower case, one trailing ``.git`` dropped, ``git@host:path`` and
    ``ssh://git@host/path`` alike; a trailing ``/`` stays. "" for a URL Argo CD cannot parse or whose
    normalisation trainyard does not emulate (non-ASCII, IPv6 literals)."""
    try:
        return giturl.normalize_git_url(url)
    except giturl.UrlNotEmulated:
        return ""


def find_root(start: str | Path | None = None) -> Path:
    """The repository root: the nearest folder at or above ``start`` (default: the current
    folder) that holds ``base/repo/repo.env``; failing that, the folder this package sits in."""
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / REPO_ENV).is_file():
            return candidate
    package_parent = Path(__file__).resolve().parent.parent
    if (package_parent / REPO_ENV).is_file():
        return package_parent
    raise UserError(
        f"{here}: not inside a trainyard repository (no {REPO_ENV} here or above); "
        "run the command from a checkout of the GitOps repository"
    )


def read_env(path: Path) -> dict[str, str]:
    """A kustomize env file: KEY=VALUE lines, '#' comments and blank lines ignored."""
    values: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        values[key.strip()] = value.strip()
    return values


def load(start: str | Path | None = None) -> Repository:
    root = find_root(start)
    env = read_env(root / REPO_ENV)
    missing = [k for k in ("repoURL", "targetRevision") if not env.get(k)]
    if missing:
        raise UserError(f"{REPO_ENV}: {', '.join(missing)} missing; it must set repoURL=... and targetRevision=...")
    return Repository(root=root, url=env["repoURL"], revision=env["targetRevision"])

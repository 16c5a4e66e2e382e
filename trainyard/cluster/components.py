"""The Kubernetes components and the upstream controllers, built from Go modules and cached.

Nothing is downloaded but Go modules (verified by each module's go.sum): ``kube`` is one binary
holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
(``kube/cmd/kube``); ``kustomize`` (``kube/kustomize``) and ``helm`` (``kube/helm``) are built on
their own, since ``make validate`` needs them and nothing else; ``controllers`` are the upstream mains of Kueue,
JobSet, Kubeflow Trainer and the v1 training operator, built from ``kube/controllers`` (one build, four binaries).

A build is cached under ``$TRAINYARD_CACHE`` (default ``~/.cache/trainyard``) in a folder named
by the hash of what decides the binary (go.mod, go.sum, the mains, the Go version), so a fresh
clone on a machine that built once only links symlinks; builds by concurrent processes wait on
one lock. Go's own caches (modules, compiled packages) make a rebuild after a pin change quick.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.repo.model import gomodules

KUBE_MODULE = gomodules.KUBE_MODULE
# The Kubernetes release kube/go.mod pins; --version and the API server's /version say it because
# the build stamps it (an unstamped build reports v0.0.0-master, which Kueue refuses to parse:
# kueue@v0.19.2:cmd/kueue/main.go setupServerVersionFetcher).
KUBERNETES_VERSION = "v1.36.5"


@dataclass(frozen=True)
class Target:
    module: Path  # the Go module it is built in
    packages: tuple[str, ...]  # main packages; one binary each, named as `go build -o DIR/` names them
    names: tuple[str, ...]  # what it answers to: binaries, or names the multi-call binary dispatches on
    cold_minutes: int  # the first build on 2 cores with empty Go caches (README)
    output: str = ""  # the binary's name, where `go build` would name it after the package folder
    toolchain: str = "local"  # GOTOOLCHAIN: a module that needs a newer Go names the release to fetch


TARGETS: dict[str, Target] = {
    "kube": Target(
        KUBE_MODULE,
        ("./cmd/kube",),
        ("kube", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
        5,
    ),
    # the kustomize and Helm Argo CD v3.6.2 bundles (kube/kustomize/go.mod, kube/helm/go.mod), for
    # every folder and the upstream charts `render` and `validate` build; kustomize v5.8.3 asks for Go 1.27
    "kustomize": Target(
        KUBE_MODULE / "kustomize",
        ("sigs.k8s.io/kustomize/kustomize/v5",),
        ("kustomize",),
        1,
        toolchain=gomodules.NEWER_GO,
    ),
    "helm": Target(KUBE_MODULE / "helm", ("helm.sh/helm/v4/cmd/helm",), ("helm",), 2),
    # kube/controllers/go.mod pins each (and says why Kueue is built against Trainer v2.3.0)
    "controllers": Target(
        KUBE_MODULE / "controllers",
        (
            "sigs.k8s.io/kueue/cmd/kueue",
            "sigs.k8s.io/jobset",
            "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
            "github.com/kubeflow/training-operator/cmd/training-operator.v1",
        ),
        ("kueue", "jobset", "trainer-controller-manager", "training-operator.v1"),
        4,
    ),
    # Argo CD v3.6.2, the release production runs (kube/argocd/go.mod): one binary, picked by its
    # name (argo-cd@v3.6.2:cmd/main.go); its go.mod asks for Go 1.27, which the go command fetches
    # from the module proxy as it fetches modules
    "argocd": Target(
        KUBE_MODULE / "argocd",
        ("github.com/argoproj/argo-cd/v3/cmd",),
        ("argocd", "argocd-application-controller", "argocd-repo-server", "argocd-applicationset-controller"),
        5,
        output="argocd",
        toolchain=gomodules.NEWER_GO,
    ),
}

Progress = Callable[[str], None]


class BuildFailed(UserError):
    exit_code = 1


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _go() -> tuple[str, str]:
    return gomodules.go()


def go_binary() -> str:
    return gomodules.go_binary()


def cache_root() -> Path:
    base = os.environ.get("TRAINYARD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trainyard"
    )
    return Path(base)


def _key(target: str, go_version: str) -> str:
    t = TARGETS[target]
    digest = hashlib.sha256()
    files = [t.module / "go.mod", t.module / "go.sum", *sorted((t.module / "cmd").rglob("*.go"))]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(KUBE_MODULE)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{target}\0{' '.join(t.packages)}\0{KUBERNETES_VERSION}\0{go_version}".encode())
    return digest.hexdigest()[:16]


def _required(module: Path, path: str) -> str:
    """The version ``module``'s go.mod requires of ``path``."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(path)} (v\S+)", (module / "go.mod").read_text(), re.M)
    if not found:
        raise UserError(f"{module}/go.mod does not require {path}")
    return found[1]


def _ldflags(target: str) -> str:
    if target == "helm":
        # Helm reports the version its release build stamps (helm@v4.3.2:Makefile LDFLAGS sets
        # internal/version.version; unstamped it says "v4.3").
        version = _required(TARGETS["helm"].module, "helm.sh/helm/v4")
        return f"-s -w -X helm.sh/helm/v4/internal/version.version={version}"
    if target == "argocd":
        # what Argo CD's release build stamps (argo-cd@v3.6.2:Makefile LDFLAGS, common/version.go)
        version = _required(TARGETS["argocd"].module, "github.com/argoproj/argo-cd/v3").lstrip("v")
        return f"-s -w -X github.com/argoproj/argo-cd/v3/common.version={version}"
    if target != "kube":
        return "-s -w"
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamp = "k8s.io/component-base/version"
    return f"-s -w -X {stamp}.gitVersion={KUBERNETES_VERSION} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor}"


def _go_env(go: str, toolchain: str = "local") -> dict[str, str]:
    env = dict(os.environ)
    # No toolchain but the one a target names; never touch go.mod/go.sum (a module missing from
    # go.sum is an error, not a silent addition).
    env.update({"CGO_ENABLED": "0", "GOTOOLCHAIN": toolchain, "GOFLAGS": "-mod=readonly"})
    return env


def _run_build(go: str, target: str, out: Path, progress: Progress) -> None:
    """Build ``target``'s binaries into the folder ``out``."""
    t = TARGETS[target]
    module = t.module
    rel = module.relative_to(KUBE_MODULE.parent)
    env = _go_env(go, t.toolchain)
    if t.toolchain != "local":
        progress(f"{target}: {rel}/go.mod needs {t.toolchain}; the go command fetches it from the module proxy once")
    progress(f"{target}: downloading Go modules (verified by {rel}/go.sum)")
    download = subprocess.run([go, "mod", "download"], cwd=module, env=env, capture_output=True, text=True)
    if download.returncode:
        raise BuildFailed(f"go mod download in {module} failed:\n{download.stderr.strip()[-2000:]}")
    listed = subprocess.run([go, "list", "-deps", *t.packages], cwd=module, env=env, capture_output=True, text=True)
    total = max(len(listed.stdout.split()), 1)
    progress(f"{target}: compiling {total} packages (first build about {t.cold_minutes} min on 2 cores; cached after)")
    cmd = [go, "build", "-v", "-trimpath", "-ldflags", _ldflags(target), "-o", f"{out}/{t.output}", *t.packages]
    proc = subprocess.Popen(cmd, cwd=module, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    compiled, last = 0, time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    for line in proc.stderr:
        tail.append(line.rstrip())
        if re.fullmatch(r"[\w./~-]+\n?", line):  # `go build -v` names each package it compiles
            compiled += 1
            if time.monotonic() - last > 10:
                last = time.monotonic()
                progress(f"{target}: compiled {compiled}/{total} packages")
    if proc.wait():
        errors = "\n".join(t for t in tail if not re.fullmatch(r"[\w./~-]+", t))
        raise BuildFailed(f"building {target} from {module} failed:\n{errors}")


def build(target: str, *, progress: Progress = _stderr) -> Path:
    """The folder holding ``target``'s binary and a link per name it answers to; built if needed."""
    if target not in TARGETS:
        raise UserError(f"unknown component {target!r}; choose one of {', '.join(TARGETS)}")
    if not (KUBE_MODULE / "go.mod").is_file():
        raise UserError(f"{KUBE_MODULE}/go.mod is missing: the components are built from a checkout of the repository")
    go, go_version = _go()
    folder = cache_root() / "bin" / f"{target}-{_key(target, go_version)}"
    binary = folder / TARGETS[target].names[0]
    if binary.is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same thing
        if binary.is_file():
            return folder
        started = time.monotonic()
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        _run_build(go, target, staging, progress)
        first = TARGETS[target].names[0]
        for name in TARGETS[target].names:
            if not (staging / name).exists():
                (staging / name).symlink_to(first)  # a name the multi-call binary answers to
        staging.rename(folder)
        progress(f"{target}: built in {time.monotonic() - started:.0f} s, cached in {folder}")
    return folder


def targets_of(names: list[str]) -> list[str]:
    """The build targets that make ``names`` (a target, or a component it builds), in TARGETS' order;
    every target for no names. UserError naming the unknown ones."""
    if not names:
        return list(TARGETS)
    unknown = [n for n in names if n not in TARGETS and not any(n in t.names for t in TARGETS.values())]
    if unknown:
        known = ", ".join(f"{k} ({' '.join(t.names)})" for k, t in TARGETS.items())
        raise UserError(f"no component named {', '.join(map(repr, unknown))}; the targets are {known}")
    return [k for k, t in TARGETS.items() if k in names or any(n in t.names for n in names)]


def command(name: str, *, progress: Progress = _stderr) -> str:
    """The path of component ``name`` (kube-apiserver, kubectl, kustomize, ...), built if needed."""
    for target, t in TARGETS.items():
        if name in t.names:
            return str(build(target, progress=progress) / name)
    raise UserError(f"no component named {name!r}")


def link_into(folder: Path, names: list[str], *, progress: Progress = _stderr) -> list[Path]:
    """Symlink the named components into ``folder`` (a virtual environment's bin/); build first."""
    folder.mkdir(parents=True, exist_ok=True)
    linked = []
    for name in names:
        target = Path(command(name, progress=progress))
        link = folder / name
        if link.is_symlink() or link.exists():
            if link.is_symlink() and os.readlink(link) == str(target):
                linked.append(link)
                continue
            link.unlink()
        link.symlink_to(target)
        linked.append(link)
    return linked

"""Go modules as a source of upstream release trees, verified by go.sum.

A module zip holds a repository's tree at a tag (minus nested modules), and the go command
refuses a download whose hash is not the one go.sum records, so a module at a pinned version is
a checksummed copy of what Argo CD fetches from the same tag. ``kube/releases`` is the module
whose go.mod and go.sum pin every upstream release the repository installs
(:mod:`trainyard.repo.model.releases` says which, and why).

The ``go`` command is found here too, since both the repository tooling (which reads these
modules) and the local cluster (which builds binaries) need it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from trainyard.contract.errors import UserError

KUBE_MODULE = Path(__file__).resolve().parents[3] / "kube"
RELEASES_MODULE = KUBE_MODULE / "releases"
GO_MIN = (1, 26)
GO_FALLBACKS = ("/usr/local/go/bin/go",)  # where the official tarball puts it, often not on PATH
GO_HINT = "install Go >= 1.26 (https://go.dev/dl/, or Debian's golang-1.26) and put its bin/ on PATH"
# The Go release the go command fetches from the module proxy (GOTOOLCHAIN) for what needs Go 1.27:
# Argo CD v3.6.2 and the kustomize it bundles, v5.8.3 (their go.mod files: go 1.27.0). Reading the
# Argo CD module's files needs it too: an older Go will not extract a module whose go line is newer.
NEWER_GO = "go1.27.3"

Progress = Callable[[str], None]


def go() -> tuple[str, str]:
    """The ``go`` command and its version, at least Go 1.26 (kube/go.mod's go line); UserError otherwise."""
    found = shutil.which("go") or next((p for p in GO_FALLBACKS if os.access(p, os.X_OK)), None)
    if not found:
        raise UserError(f"the Go toolchain is not on PATH; upstream releases are read from Go modules: {GO_HINT}")
    out = subprocess.run([found, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < GO_MIN:
        raise UserError(f"{found} is {out or 'an unknown version'}; {GO_HINT}")
    return found, out


def go_binary() -> str:
    return go()[0]


def go_sum() -> dict[tuple[str, str], str]:
    """(module, version) -> h1 hash of the module's files, from kube/releases/go.sum."""
    out = {}
    for line in (RELEASES_MODULE / "go.sum").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3 and not parts[1].endswith("/go.mod"):
            out[(parts[0], parts[1])] = parts[2]
    return out


def cache_dir(go_command: str) -> Path:
    out = subprocess.run([go_command, "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout
    return Path(out.strip())


def escape(module: str) -> str:
    # the module cache's case encoding (golang.org/x/mod/module EscapePath): 'A' -> '!a'
    return re.sub(r"[A-Z]", lambda m: "!" + m[0].lower(), module)


_NEEDS_NEWER_GO = re.compile(r"requires go >= \S+ \(running go")


def _download(command: str, module: str, version: str, env: dict[str, str]) -> tuple[dict, subprocess.CompletedProcess]:
    cmd = [command, "mod", "download", "-json", f"{module}@{version}"]
    try:
        proc = subprocess.run(cmd, cwd=RELEASES_MODULE, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise UserError(f"fetching {module}@{version} took over 15 minutes; check GOPROXY") from None
    try:
        info = json.loads(proc.stdout or "{}")
    except ValueError:
        info = {}
    return info if isinstance(info, dict) else {}, proc


def module_dir(module: str, version: str, *, progress: Progress = print) -> Path:
    """The module's folder in the Go module cache, fetched if needed; its hash is kube/releases/go.sum's.
    UserError for a module go.sum does not pin, a missing Go, or a download that fails or does not match."""
    pinned = go_sum().get((module, version))
    if not pinned:
        # Without a go.sum line the go command would only ask the checksum database.
        raise UserError(
            f"kube/releases/go.sum has no hash for {module} {version}: add the module to kube/releases/go.mod "
            f"and record its hash (`go mod download -json {module}@{version}` prints it as Sum, checked against "
            "sum.golang.org)"
        )
    command = go_binary()
    cached = (cache_dir(command) / f"{escape(module)}@{version}").is_dir()
    if not cached:
        progress(f"fetching {module}@{version} (Go module, checked against kube/releases/go.sum)")
    # GOWORK=off: a go.work above this folder must not choose the main module
    info, proc = _download(command, module, version, dict(os.environ, GOWORK="off"))
    if _NEEDS_NEWER_GO.search(str(info.get("Error") or "")):
        # the module's go line is newer than this Go (Argo CD v3.6.2's: go 1.27.0): the go command
        # runs as NEWER_GO, fetched once from the module proxy, for this module alone
        if not cached:
            progress(f"{module}@{version} needs a newer Go than {command}: reading it with {NEWER_GO}")
        info, proc = _download(command, module, version, dict(os.environ, GOWORK="off", GOTOOLCHAIN=NEWER_GO))
    if proc.returncode or info.get("Error") or not info.get("Dir"):
        said = (info.get("Error") or proc.stderr or f"exit status {proc.returncode}").strip()
        raise UserError(
            f"cannot fetch {module}@{version} (in kube/releases): {said}; the Go module proxy (GOPROXY) must be "
            "reachable, or the module already in the module cache"
        )
    if info.get("Sum") != pinned:  # the go command checks this itself; a second look costs nothing
        raise UserError(f"{module}@{version} has hash {info.get('Sum')}, kube/releases/go.sum {pinned}")
    return Path(info["Dir"])

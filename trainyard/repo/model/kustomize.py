"""The real kustomize, at the version Argo CD v3.6.2 bundles: the one ``make`` builds from
kube/kustomize/go.mod into the virtual environment's bin/ (``trainyard cluster build --into``); else a
``kustomize`` on PATH, else ``kubectl kustomize``.

:func:`build` renders one folder and records, for every object, the file it was defined in:
the folder is built through a throw-away kustomization that lists it as its only resource and
asks for ``buildMetadata: [originAnnotations]``; the annotation is read and removed again, so
the objects are exactly what the folder renders.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from trainyard.contract.errors import UserError
from trainyard.repo.model import build_cache, rawyaml, remote_refs
from trainyard.repo.model.rendered import ORIGIN_ANNOTATION, Resource, tree_copy
from trainyard.repo.model.repository import Repository, kustomization_file

INSTALL_HINT = (
    "run `make tools` (it builds the pinned kustomize from kube/kustomize/go.mod into .venv/bin), or install "
    "kustomize (https://kubectl.docs.kubernetes.io/installation/kustomize/)"
)
TIMEOUT_S = 120


class KustomizeError(UserError):
    """kustomize refused a folder; the message names the folder and quotes kustomize."""

    exit_code = 1


@lru_cache(maxsize=1)
def command() -> tuple[str, ...]:
    """The build command: ``kustomize build`` or ``kubectl kustomize``."""
    pinned = Path(sys.executable).parent / "kustomize"  # sys.executable: the venv's python, not its target
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return (str(pinned), "build")
    found = shutil.which("kustomize")
    if found:
        return (found, "build")
    kubectl = shutil.which("kubectl")
    if kubectl:
        return (kubectl, "kustomize")
    raise UserError(f"neither 'kustomize' nor 'kubectl' is on PATH; {INSTALL_HINT}")


def is_kustomization(folder: Path) -> bool:
    return kustomization_file(folder) is not None


def is_remote(entry: object) -> bool:
    """A kustomization entry kustomize fetches over the network (a git repository it clones or a URL
    it downloads), by kustomize's own rule: :func:`trainyard.repo.model.remote_refs.is_remote`."""
    return remote_refs.is_remote(entry)


@dataclass(frozen=True)
class Remote:
    """What a folder's kustomizations fetch over the network, and the image pins they set."""

    urls: tuple[str, ...]
    images: tuple[str, ...]  # "name:tag" / "name@digest" from the kustomizations' images:


def kustomizations(folder: Path, root: Path) -> dict[Path, dict]:
    """Every folder ``folder``'s kustomization reaches through its local resources, bases and
    components (inside ``root``), with its kustomization parsed: {} where there is none or it is not
    a mapping (kustomize reports that when the folder is built)."""
    found: dict[Path, dict] = {}
    pending = [folder.resolve()]
    while pending:
        current = pending.pop()
        if current in found or root not in (current, *current.parents):
            continue
        found[current] = doc = _kustomization(current)
        for key in ("resources", "bases", "components"):
            entries = doc.get(key)
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, str) and not is_remote(entry) and (current / entry).is_dir():
                    pending.append((current / entry).resolve())
    return found


# kustomization text -> its mapping (never changed by a reader): every render reads the same few
# dozen kustomizations again, and the bounded composer is pure Python
_parsed: dict[str, dict] = {}


def _kustomization(folder: Path) -> dict:
    file = kustomization_file(folder)
    if file is None:
        return {}
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    found = _parsed.get(text)
    if found is None:
        try:  # bounded: a job folder's kustomization is a user's file
            docs = rawyaml.compose(text)
            doc = rawyaml.to_python(docs[0]) if len(docs) == 1 else None
        except yaml.YAMLError:  # YamlRefused is one
            doc = None
        found = doc if isinstance(doc, dict) else {}
        if len(_parsed) >= 4096:
            _parsed.clear()
        _parsed[text] = found
    return found


def remote_parts(repo: Repository, folder: Path) -> Remote:
    """The remote resources ``folder``'s kustomization reaches, through its local bases and
    components, with the ``images`` pins of those kustomizations."""
    urls: list[str] = []
    images: list[str] = []
    for doc in kustomizations(folder, repo.root).values():
        for key in ("resources", "bases", "components"):
            entries = doc.get(key)
            for entry in entries if isinstance(entries, list) else []:
                if is_remote(entry):
                    urls.append(str(entry).strip())
        for image in doc.get("images") or []:
            if isinstance(image, dict) and image.get("name"):
                name = str(image.get("newName") or image["name"])
                pin = f"@{image['digest']}" if image.get("digest") else f":{image.get('newTag', '')}"
                images.append(name + pin)
    return Remote(tuple(urls), tuple(images))


class _DocumentLoader(rawyaml.SafeLoader):  # type: ignore[misc,valid-type]
    """The fast loader, with dates left as the strings go-yaml v2 (Argo CD's reader, sigs.k8s.io/yaml)
    makes of them when decoding into interface{} (go.yaml.in/yaml/v2@v2.4.4 decode.go scalar)."""


_DocumentLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in rawyaml.SafeLoader.yaml_implicit_resolvers.items()
}
_DocumentLoader.add_constructor("tag:yaml.org,2002:timestamp", rawyaml.SafeLoader.construct_yaml_str)


def load_documents(text: str, where: str) -> list[dict]:
    """The objects of a YAML stream that kustomize, Helm or an upstream release wrote (a directory
    source of this repository is read by :mod:`trainyard.repo.upstream.directory` instead): empty
    documents skipped, anything else that is not a mapping refused; UserError naming ``where``, never
    another exception, whatever the text."""
    try:
        docs = list(yaml.load_all(text.removeprefix("\ufeff"), Loader=_DocumentLoader))
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not valid YAML: {exc}") from None
    except (RecursionError, ValueError, OverflowError, MemoryError) as exc:  # deep nesting, huge numbers
        raise UserError(f"{where}: cannot be read as YAML ({type(exc).__name__}: {str(exc)[:200]})") from None
    out = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise UserError(f"{where}: expected Kubernetes objects (mappings), found {type(doc).__name__}")
        out.append(doc)
    return out


_cache: dict[Path, list[Resource]] = {}
_cache_lock = threading.Lock()


_disk: build_cache.BuildCache | None = None


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def disk_cache() -> build_cache.BuildCache | None:
    """The disk cache this process keeps builds in (None: none), upstream renders too."""
    return _disk


def use_disk_cache(directory: Path | None) -> build_cache.BuildCache | None:
    """Keep builds on disk under ``directory`` (None: no disk cache) from now on in this process;
    see :mod:`trainyard.repo.model.build_cache`."""
    global _disk
    _disk = build_cache.BuildCache(directory) if directory is not None else None
    return _disk


@lru_cache(maxsize=1)
def _tool_version() -> str:
    return build_cache.tool_version(command())


def _cached_build(repo: Repository, path: Path, rel: str) -> list[Resource]:
    disk = _disk
    if disk is None:
        return _build(repo, path, rel)
    try:
        key = build_cache.key(path, repo.root, rel, _tool_version(), disk.digest, disk.listings)
    except (build_cache.Uncacheable, OSError):
        return _build(repo, path, rel)
    stored = disk.get(key)
    if stored is not None:
        return stored
    resources = _build(repo, path, rel)
    disk.put(key, resources)
    return resources


def build(repo: Repository, folder: str | Path, *, cache: bool = True) -> list[Resource]:
    """Render ``folder`` (relative to the repository root, or absolute) with kustomize.

    Returns fresh copies of the objects (callers may change them). Raises KustomizeError naming
    the folder and quoting kustomize's complaint.
    """
    path = Path(folder)
    if not path.is_absolute():
        path = repo.root / path
    path = path.resolve()
    rel = repo.rel(path)
    if not path.is_dir():
        raise UserError(f"{rel}: no such folder")
    if not is_kustomization(path):
        raise UserError(f"{rel}: not a kustomization (no kustomization.yaml in it)")
    if cache:
        with _cache_lock:
            hit = _cache.get(path)
        if hit is not None:
            return [_copy(r) for r in hit]
    resources = _cached_build(repo, path, rel)
    if cache:
        with _cache_lock:
            _cache[path] = resources
        return [_copy(r) for r in resources]
    return resources


def _copy(r: Resource) -> Resource:
    return Resource(doc=tree_copy(r.doc), origin=r.origin, source=r.source, app=r.app)


def _build(repo: Repository, path: Path, rel: str) -> list[Resource]:
    return [
        Resource(doc=doc, origin=repo.rel(origin) if origin else None, source=rel)
        for doc, origin in build_folder(path, rel, strip=(repo.root,))
    ]


def build_folder(path: Path, shown: str, *, strip: tuple[Path, ...] = ()) -> list[tuple[dict, Path | None]]:
    """``kustomize build`` of any folder ``path``, each object with the file that defined it
    (kustomize's origin annotation, taken off the object). KustomizeError naming ``shown``, with
    kustomize's message less the folders in ``strip``."""
    with tempfile.TemporaryDirectory(prefix="trainyard-kustomize-") as tmp:
        wrapper = Path(tmp).resolve()
        target = os.path.relpath(path, wrapper)
        (wrapper / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            f"resources:\n  - {target}\n"
            "buildMetadata:\n  - originAnnotations\n",
            encoding="utf-8",
        )
        try:
            proc = subprocess.run(
                [*command(), str(wrapper)],
                capture_output=True,
                text=True,
                errors="replace",  # a file name that is not UTF-8 in kustomize's message
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise KustomizeError(f"{shown}: kustomize did not finish within {TIMEOUT_S} s") from None
        except OSError as exc:
            raise UserError(f"cannot run {' '.join(command())}: {exc}; {INSTALL_HINT}") from None
        if proc.returncode != 0:
            raise KustomizeError(f"{shown}: kustomize build failed: {_clean(proc.stderr, (wrapper, *strip))}")
        docs = load_documents(proc.stdout, f"{shown} (kustomize output)")
        return [(doc, _origin(doc, wrapper)) for doc in docs]


def _clean(stderr: str, folders: tuple[Path, ...]) -> str:
    """kustomize's message without the given folders' paths and its log prefix."""
    text = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
    for folder in folders:
        text = text.replace(str(folder) + "/", "").replace(str(folder), "")
    for prefix in ('"command failed" err=', "Error: "):
        if prefix in text:
            text = text.split(prefix, 1)[1]
    return text.strip().strip('"') or "(no message)"


def _origin(doc: dict, wrapper: Path) -> Path | None:
    """The file kustomize says defined ``doc``; the annotation is removed."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("annotations"), dict):
        return None
    annotations = meta["annotations"]
    raw = annotations.pop(ORIGIN_ANNOTATION, None)
    if not annotations:
        del meta["annotations"]
    if not isinstance(raw, str):
        return None
    try:
        info = yaml.safe_load(raw) or {}
    except yaml.YAMLError:
        return None
    where = info.get("path") or info.get("configuredIn") if isinstance(info, dict) else None
    return (wrapper / where).resolve() if isinstance(where, str) else None

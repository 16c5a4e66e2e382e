"""``kustomize build`` results kept on disk, keyed by everything the build reads.

The key of a folder's build is a SHA-256 over: the cache format, the kustomize version, the
folder's path in the repository (the objects carry repository-relative origins), and the path and
content of every file the build can read: every file of every kustomization folder it reaches
(its own and the bases and components it references, recursively) and every file or folder
named by a string in those kustomizations (patches, generators' files, replacements, ...). A
folder that reaches a remote resource (a URL or a git repository) is not cached: its content is
not in the repository.

An entry is one JSON file, ``<dir>/kustomize/<key[:2]>/<key>.json``, written to a temporary file
in the same folder and renamed over the entry (atomic on POSIX), holding the key and a SHA-256 of
its objects; an entry that does not parse, names another key or whose objects do not hash to
its checksum is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson
import yaml

from trainyard.repo.rendered import Resource
from trainyard.repo.repository import REMOTE_PREFIXES, kustomization_file

FORMAT = "trainyard-kustomize-cache/1"
DEFAULT_DIR = ".trainyard-cache"
ENV_DIR = "TRAINYARD_CACHE_DIR"


class Uncacheable(Exception):
    """The build reads something outside the repository's files (a remote resource)."""


def tool_version(command: tuple[str, ...]) -> str:
    """The kustomize version string of ``command`` (``kustomize build`` or ``kubectl kustomize``)."""
    # kubectl embeds kustomize; its client version names both
    kubectl = command[-1] != "build"
    probe = [command[0], "version", "--client", "--output=json"] if kubectl else [command[0], "version"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{' '.join(command)}\n{proc.stdout.strip()}"


def _strings(node: object) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def inputs(folder: Path, root: Path) -> list[Path]:
    """Every file a build of ``folder`` can read (sorted, resolved); raises :class:`Uncacheable`
    when it reaches a remote resource or a folder outside ``root`` (the repository)."""
    root = root.resolve()
    files: set[Path] = set()
    seen: set[Path] = set()
    pending = [folder.resolve()]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        if root not in (current, *current.parents):
            raise Uncacheable(str(current))
        seen.add(current)
        files.update(p.resolve() for p in current.iterdir() if p.is_file())
        file = kustomization_file(current)
        if file is None:
            files.update(p.resolve() for p in current.rglob("*") if p.is_file())
            continue
        try:
            doc = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # kustomize refuses it; the build fails and nothing is stored
        for text in _strings(doc):
            entry = text.strip()
            if entry.startswith(REMOTE_PREFIXES):
                raise Uncacheable(entry)
            if not entry or "\n" in entry or len(entry) > 4096:
                continue
            try:  # most strings of a kustomization are not paths: one stat tells, before resolving
                st = os.stat(os.path.join(current, entry))
            except (OSError, ValueError):
                continue
            target = (current / entry).resolve()
            if stat.S_ISREG(st.st_mode):
                files.add(target)
            elif stat.S_ISDIR(st.st_mode) and target not in (current, *current.parents):
                pending.append(target)
    return sorted(files)


def key(folder: Path, root: Path, rel: str, version: str, digest: Callable[[Path], str]) -> str:
    """The cache key of building ``folder`` (``rel``: its path in the repository ``root``)."""
    h = hashlib.sha256()
    for part in (FORMAT, version, rel):
        h.update(part.encode() + b"\0")
    for file in inputs(folder, root):
        h.update(str(file).encode() + b"\0" + digest(file).encode() + b"\0")
    return h.hexdigest()


def _refuse(value: object) -> object:
    raise TypeError(f"not JSON: {type(value).__name__}")


def _payload(resources: list[Resource]) -> bytes:
    objects = [{"doc": r.doc, "origin": r.origin, "source": r.source} for r in resources]
    return orjson.dumps(objects, option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_SORT_KEYS, default=_refuse)


class BuildCache:
    """The entries under ``directory``; :meth:`get` and :meth:`put` by key."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hits = self.misses = self.rejected = 0
        self._digests: dict[tuple[Path, int, int], str] = {}

    def digest(self, file: Path) -> str:
        """SHA-256 of a file's content, computed once per process for an unchanged file."""
        st = file.stat()
        memo = (file, st.st_mtime_ns, st.st_size)
        found = self._digests.get(memo)
        if found is None:
            found = self._digests[memo] = hashlib.sha256(file.read_bytes()).hexdigest()
        return found

    def path(self, key: str) -> Path:
        return self.directory / "kustomize" / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[Resource] | None:
        """The stored objects of ``key``; None when absent or not sound (then counted as rejected)."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        try:
            entry = orjson.loads(raw)
            objects = entry["objects"]
            sound = (
                entry["format"] == FORMAT
                and entry["key"] == key
                and isinstance(objects, list)
                and hashlib.sha256(orjson.dumps(objects, option=orjson.OPT_SORT_KEYS)).hexdigest() == entry["sha256"]
            )
            resources = [Resource(doc=o["doc"], origin=o["origin"], source=o["source"]) for o in objects]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            sound = False
        if not sound:
            self.rejected += 1
            return None
        self.hits += 1
        return resources

    def put(self, key: str, resources: list[Resource]) -> bool:
        """Store ``resources`` under ``key`` (atomically); False when they are not plain JSON or
        the folder cannot be written (the build still counts, it is only not kept)."""
        try:
            payload = _payload(resources)
        except TypeError:
            return False
        checksum = hashlib.sha256(payload).hexdigest()  # what get() recomputes from the parsed objects
        entry = b'{"format":%s,"key":%s,"sha256":%s,"objects":%s}' % (
            orjson.dumps(FORMAT),
            orjson.dumps(key),
            orjson.dumps(checksum),
            payload,
        )
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(entry)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        return True


def default_directory(root: Path) -> Path:
    """``$TRAINYARD_CACHE_DIR``, else ``.trainyard-cache`` at the repository root."""
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else root / DEFAULT_DIR

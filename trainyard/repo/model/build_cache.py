"""``kustomize build`` results kept on disk, keyed by everything the build reads.

The key of a folder's build is a SHA-256 over: the cache format, the kustomize version, the
folder's path in the repository (the objects carry repository-relative origins), and the path
(relative to the repository) and content of every file the build can read: every file of every
kustomization folder it reaches (its own and the bases and components it references,
recursively) and every file or folder named by a string in those kustomizations (patches,
generators' files, replacements, ...), so a clone or copy elsewhere reads the same entries. A
folder that reaches a remote resource (a URL or a git repository) is not cached: its content is
not in the repository. Every string of the kustomization's YAML is looked at, as written (keys,
both sides of a key written twice, merged mappings): whichever reading kustomize makes of it, a
string it could fetch (:func:`trainyard.repo.model.remote_refs.is_remote`, kustomize's own rule)
makes the build uncacheable, even where a local folder of the same path exists.

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

from trainyard.repo.model import rawyaml, remote_refs
from trainyard.repo.model.rendered import Resource
from trainyard.repo.model.repository import kustomization_file

FORMAT = "trainyard-kustomize-cache/4"
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


def _strings(doc: yaml.Node) -> Iterable[str]:
    """Every scalar of ``doc`` (keys too), each distinct node once."""
    seen: set[int] = set()
    stack = [doc]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            yield node.value
        else:
            stack.extend(rawyaml.children(node))


# What one kustomization folder says of itself: its own files and the strings of its
# kustomization that may be paths (stat-ed on every use), or the remote resource it names.
_Listing = tuple[list[str], list[str], str | None]


def _listing(current: str, file: Path) -> _Listing:
    own = []
    with os.scandir(current) as entries:
        for entry in entries:
            if entry.is_file():  # follows a link, as the build does
                own.append(os.path.realpath(entry.path) if entry.is_symlink() else entry.path)
    try:
        docs = rawyaml.compose(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        # what it names is not known: never cached (kustomize may read it all the same)
        return own, [], f"{file} (not read: not YAML trainyard can bound)"
    candidates = []
    for text in (t for doc in docs for t in _strings(doc)):
        entry = text.strip()
        if "\n" not in entry and remote_refs.is_remote(text):
            return own, [], text
        if entry and "\n" not in entry and len(entry) <= 4096:
            candidates.append(entry)
    return own, candidates, None


def inputs(folder: Path, root: Path, listings: dict[str, tuple[tuple, _Listing]] | None = None) -> list[Path]:
    """Every file a build of ``folder`` can read (sorted, resolved); raises :class:`Uncacheable`
    when it reaches a remote resource or a folder outside ``root`` (the repository).

    ``listings``: what each kustomization folder says of itself, kept between calls (a
    :class:`BuildCache` keeps one per run): the bases every job folder shares are read once, and
    a folder's entry is used again only while the folder's and its kustomization's modification
    times and size are unchanged.
    """
    root_text = str(root.resolve())
    files: set[str] = set()
    seen: set[str] = set()
    pending = [str(folder.resolve())]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        if current != root_text and not current.startswith(root_text + os.sep):
            raise Uncacheable(current)
        seen.add(current)
        file = kustomization_file(Path(current))
        if file is None:
            files.update(str(p.resolve()) for p in Path(current).rglob("*") if p.is_file())
            continue
        try:
            dir_stat, file_stat = os.stat(current), file.stat()
        except OSError:
            continue  # gone while read: the build fails and nothing is stored
        stamp = (dir_stat.st_mtime_ns, file.name, file_stat.st_mtime_ns, file_stat.st_size)
        known = listings.get(current) if listings is not None else None
        if known is not None and known[0] == stamp:
            own, candidates, remote = known[1]
        else:
            own, candidates, remote = _listing(current, file)
            if listings is not None:
                listings[current] = (stamp, (own, candidates, remote))
        if remote is not None:
            raise Uncacheable(remote)
        files.update(own)
        for entry in candidates:
            try:  # most strings of a kustomization are not paths: one stat tells, before resolving
                st = os.stat(os.path.join(current, entry))
            except (OSError, ValueError):
                continue
            target = os.path.realpath(os.path.join(current, entry))
            if stat.S_ISREG(st.st_mode):
                files.add(target)
            elif stat.S_ISDIR(st.st_mode) and not (current + os.sep).startswith(target.rstrip(os.sep) + os.sep):
                pending.append(target)  # a folder above this one (or itself) holds it: not walked again
    return sorted(Path(f) for f in files)


def key(
    folder: Path,
    root: Path,
    rel: str,
    version: str,
    digest: Callable[[Path], str],
    listings: dict[str, tuple[tuple, _Listing]] | None = None,
) -> str:
    """The cache key of building ``folder`` (``rel``: its path in the repository ``root``)."""
    h = hashlib.sha256()
    for part in (FORMAT, version, rel):
        h.update(part.encode() + b"\0")
    # relative paths: the same files in another clone or copy of the repository build the same
    root_text = str(root.resolve())
    for file in inputs(folder, root, listings):
        h.update(os.path.relpath(file, root_text).encode() + b"\0" + digest(file).encode() + b"\0")
    return h.hexdigest()


def _refuse(value: object) -> object:
    raise TypeError(f"not JSON: {type(value).__name__}")


def _payload(resources: list[Resource]) -> bytes:
    """The objects as stored, their keys in the order kustomize wrote them (which `trainyard render`
    prints); orjson keeps that order both ways, so get() serialises what it parsed to the same bytes."""
    objects = [{"doc": r.doc, "origin": r.origin, "source": r.source} for r in resources]
    return orjson.dumps(objects, option=orjson.OPT_PASSTHROUGH_DATETIME, default=_refuse)


class BuildCache:
    """The entries under ``directory``; :meth:`get` and :meth:`put` by key."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hits = self.misses = self.rejected = 0
        self._digests: dict[tuple[Path, int, int], str] = {}
        self.listings: dict[str, tuple[tuple, _Listing]] = {}  # for inputs()

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
                and hashlib.sha256(orjson.dumps(objects)).hexdigest() == entry["sha256"]
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

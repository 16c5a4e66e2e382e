"""A directory source read as Argo CD's repo server reads one (argo-cd@v3.5.1:reposerver/repository/
repository.go findManifests, getPotentiallyValidManifests, getObjsFromYAMLOrJSON and the List
expansion of GenerateManifests), and the repository-wide symbolic-link check it runs first.

Which files (getPotentiallyValidManifestFile): the folder is walked in lexical order, its sub-folders
(dot-folders too) only with ``directory.recurse``; a file is a candidate when its name matches
``^.*\\.(yaml|yml|json|jsonnet)$``. A symbolic link is followed: one that leads nowhere is skipped,
one that leads out of the repository fails the render ("illegal filepath in symlink"), one to a
folder or other non-regular file is skipped. ``directory.exclude`` and then ``directory.include``
are gobwas globs (:mod:`trainyard.repo.upstream.globmatch`, no separators: ``*`` crosses ``/``)
matched against the path relative to the application's folder, nothing else. A file holding
``+argocd:skip-file-rendering`` is skipped. The YAML and JSON files may hold 10,000,000 bytes in all
(``--max-combined-directory-manifests-size`` "10M").

How a file is read (utfutil.OpenFile with the UTF8 hint): a UTF-8 byte order mark is dropped, one
for UTF-16 (either order) switches to UTF-16. Invalid UTF-8 or UTF-16, which Argo CD turns into
U+FFFD, is refused. A ``.json`` file is one JSON value: an object with a ``kind`` (what follows it may
only be white space, ``]`` or ``}``: "Found multiple objects"). Any other file is a stream as
k8s.io/apimachinery@v0.36.1 util/yaml NewYAMLOrJSONDecoder reads it: JSON values one after the
other when its first non-space character is ``{``, else documents split at lines starting with
``---``, each read by go-yaml v2.4.3 (YAML 1.1: ``yes``/``y``/``on`` are true, ``08`` is 8, ``1:20``
and dates stay strings; ``<<`` merges, later keys win; tags other than the core ones leave the
value a string; excessive aliasing refused as go-yaml refuses it) and converted to JSON by
sigs.k8s.io/yaml@v1.6.0 (non-string keys become strings, NaN and infinities fail) and read back by
sigs.k8s.io/json (integral numbers that fit 64 bits become integers). Empty documents and ``null``
are skipped; every other document must be an object with a ``kind``. A file that fails to read
without having yielded an object, and that does not contain all of ``apiVersion:``, ``kind:`` and
``metadata:``, is ignored, as Argo CD ignores it. An object whose ``items`` is a list is replaced by
its items (any kind, ``v1/List`` included; items keep no kind from the list), one whose ``items`` is
null (and has no spec or status) is dropped.

What is not emulated is refused with :class:`DirectoryError`, naming the file: map keys that are
floating-point numbers, keys of different types that become the same string, ``!!timestamp`` and
``!!binary`` values that are not UTF-8 text, nesting deeper than :data:`MAX_DEPTH`, documents over
:data:`MAX_NODES` nodes, a ``.json`` file without a kind (Argo CD reads it as an OCI image manifest).
"""

from __future__ import annotations

import base64
import codecs
import fnmatch
import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from trainyard.contract.errors import UserError
from trainyard.repo.model.jobfolder import printable
from trainyard.repo.upstream.globmatch import GlobPanic, glob_match

try:  # the C parser (libyaml); its events are read one by one, never composed recursively
    _Loader: type = yaml.CSafeLoader  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

SKIP_MARKER = "+argocd:skip-file-rendering"  # repository.go skipFileRenderingMarker
MAX_COMBINED_BYTES = 10_000_000  # cmd/argocd-repo-server --max-combined-directory-manifests-size "10M"
MANIFEST_FILE = re.compile(r".*\.(yaml|yml|json|jsonnet)")  # repository.go manifestFile (fullmatch)
MAX_DEPTH = 200  # nesting trainyard reads (Argo CD's YAML and JSON readers stop at 10,000)
MAX_NODES = 1_000_000  # YAML nodes of one document trainyard reads
_JSON_SPACE = " \t\r\n"
# unicode.IsSpace
_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
_INT64 = 1 << 63

STR = "tag:yaml.org,2002:str"
BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
NULL = "tag:yaml.org,2002:null"
TIMESTAMP = "tag:yaml.org,2002:timestamp"
BINARY = "tag:yaml.org,2002:binary"
MERGE = "tag:yaml.org,2002:merge"
_RESOLVABLE = frozenset({"", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP})


class DirectoryError(UserError):
    """The directory source cannot be rendered: Argo CD fails on it, or trainyard does not emulate it.
    The message starts with the file (or folder)."""

    exit_code = 1


class _Fails(Exception):
    """Argo CD's own reader fails here (the message is Argo CD's, roughly)."""


class _Refused(Exception):
    """What Argo CD does here is not emulated."""


# ---------------------------------------------------------------------------------------------
# Files


@dataclass
class Manifest:
    """A candidate file of a directory source, as getPotentiallyValidManifests returns it."""

    path: Path  # the file in the folder (a symbolic link stays one)
    rel: str  # relative to the application's folder, '/'-separated: what include/exclude match
    text: str  # the file decoded as utfutil decodes it


def manifest_files(folder: Path, directory: object, root: Path, shown: str = "") -> list[Manifest]:
    """The files of ``folder`` Argo CD reads for a directory source with settings ``directory``
    (``spec.source.directory``), ``root`` the repository (symbolic links may not leave it). ``shown``
    is how the folder is named in messages. Raises DirectoryError."""
    where = shown or folder.name
    recurse, include, exclude = _settings(directory, where)
    root = Path(os.path.realpath(root))
    out: list[Manifest] = []
    total = 0
    # filepath.Walk: lexical order (by bytes), a folder's entries visited where its name sorts
    stack: list[list[tuple[Path, str]]] = [_listing(folder, "", where)]
    while stack:
        if not stack[-1]:
            stack.pop()
            continue
        path, rel = stack[-1].pop()
        shown_rel = printable(f"{where}/{rel}")
        try:
            info = os.lstat(path)
        except OSError as exc:
            raise DirectoryError(f"{shown_rel}: cannot be read ({exc.strerror})") from None
        if stat.S_ISDIR(info.st_mode):
            if recurse:
                stack.append(_listing(path, rel + "/", where))
            continue
        if not MANIFEST_FILE.fullmatch(path.name):
            continue
        real = path
        if stat.S_ISLNK(info.st_mode):
            try:
                target = os.path.realpath(path, strict=True)
            except FileNotFoundError:
                continue  # "destination of symlink is missing": skipped
            except OSError as exc:
                raise DirectoryError(
                    f"{shown_rel}: Argo CD fails on this symbolic link: failed to evaluate symlink ({exc.strerror})"
                ) from None
            if not target.startswith(str(root) + os.sep):
                raise DirectoryError(
                    f"{shown_rel}: a symbolic link out of the repository: Argo CD fails the render "
                    "(illegal filepath in symlink); put the file itself in the folder"
                )
            real = Path(target)
        try:
            real_info = os.stat(real)
        except OSError as exc:
            raise DirectoryError(f"{shown_rel}: cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(real_info.st_mode):
            continue  # not a regular file: skipped
        if exclude and _glob(exclude, rel, where, "exclude"):
            continue
        if include and not _glob(include, rel, where, "include"):
            continue
        jsonnet = path.name.endswith(".jsonnet")
        size = real_info.st_size
        over = not jsonnet and total + size > MAX_COMBINED_BYTES
        if over or size > MAX_COMBINED_BYTES:  # read only as far as the marker decides
            if _has_marker(path, shown_rel):
                continue
            if jsonnet:
                raise DirectoryError(f"{shown_rel}: {size:,} bytes of Jsonnet: trainyard does not read it")
            raise DirectoryError(
                f"{shown_rel}: the folder's YAML and JSON files hold more than {MAX_COMBINED_BYTES:,} bytes: Argo CD "
                "fails the render (exceeded max combined manifest file size)"
            )
        data = _read_bytes(path, shown_rel)
        if SKIP_MARKER in _decode_lossy(data):
            continue
        if not jsonnet:
            total += size
        out.append(Manifest(path=path, rel=rel, text="" if jsonnet else decode(data, shown_rel)))
    return out


def _settings(directory: object, where: str) -> tuple[bool, str, str]:
    if directory is None:
        return False, "", ""
    if not isinstance(directory, dict):
        raise DirectoryError(f"{where}: spec.source.directory must be a mapping")
    recurse = directory.get("recurse", False)
    if not isinstance(recurse, bool):
        raise DirectoryError(f"{where}: spec.source.directory.recurse must be true or false, not {recurse!r}")
    values = []
    for key in ("include", "exclude"):
        value = directory.get(key)
        if value is not None and not isinstance(value, str):
            raise DirectoryError(f"{where}: spec.source.directory.{key} must be a string (a glob)")
        values.append(value or "")
    return recurse, values[0], values[1]


def _listing(folder: Path, prefix: str, where: str) -> list[tuple[Path, str]]:
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise DirectoryError(printable(f"{where}/{prefix or '.'}") + f": cannot be listed ({exc.strerror})") from None
    names.sort(key=lambda n: n.encode("utf-8", "surrogateescape"), reverse=True)  # popped from the end
    return [(folder / n, prefix + n) for n in names]


def _glob(pattern: str, rel: str, where: str, key: str) -> bool:
    try:
        return glob_match(pattern, rel)
    except GlobPanic:
        raise DirectoryError(
            f"{where}: spec.source.directory.{key} {pattern!r}: Argo CD's glob library (gobwas/glob) panics "
            f"matching it against {rel!r}; write it without empty or unclosed braces"
        ) from None


def _read_bytes(path: Path, shown: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_COMBINED_BYTES + 1)
    except OSError as exc:
        raise DirectoryError(f"{shown}: cannot be read ({exc.strerror}): Argo CD fails the render") from None


def _codec(head: bytes) -> tuple[str, int]:
    """unicode.BOMOverride: the encoding a byte order mark names, and its length."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", 2
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", 2
    return "utf-8", 0


def _decode_lossy(data: bytes) -> str:
    codec, skip = _codec(data[:3])
    return data[skip:].decode(codec, errors="replace")


def decode(data: bytes, shown: str) -> str:
    """The text utfutil.OpenFile(path, utfutil.UTF8) reads, where it is valid (DirectoryError otherwise)."""
    codec, skip = _codec(data[:3])
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        what = "UTF-8" if codec == "utf-8" else f"{codec.upper()} (as its byte order mark says)"
        raise DirectoryError(
            f"{shown}: not valid {what} at byte {exc.start + skip}: Argo CD would read the bad bytes as U+FFFD "
            "replacement characters; trainyard does not render such a file: save it as UTF-8"
        ) from None


def _has_marker(path: Path, shown: str) -> bool:
    """Whether the decoded file holds the skip marker, read in chunks (the file may be huge)."""
    try:
        with open(path, "rb") as f:
            head = f.read(3)
            codec, skip = _codec(head)
            decoder = codecs.getincrementaldecoder(codec)(errors="replace")
            tail = decoder.decode(head[skip:])
            while True:
                chunk = f.read(1 << 20)
                tail += decoder.decode(chunk, final=not chunk)
                if SKIP_MARKER in tail:
                    return True
                if not chunk:
                    return False
                tail = tail[-len(SKIP_MARKER) :]
    except OSError as exc:
        raise DirectoryError(f"{shown}: cannot be read ({exc.strerror}): Argo CD fails the render") from None


def read(folder: Path, directory: object, root: Path, shown: str) -> list[tuple[str, dict]]:
    """Every object Argo CD renders from the directory source ``folder`` (``shown``: the folder relative
    to the repository ``root``), with the file it came from, in the order the repo server reads them.
    Raises DirectoryError."""
    out: list[tuple[str, dict]] = []
    for manifest in manifest_files(folder, directory if directory is not None else {}, root, shown):
        origin = printable(manifest.rel if shown in ("", ".") else f"{shown}/{manifest.rel}")
        if manifest.path.name.endswith(".jsonnet"):
            raise DirectoryError(f"{origin}: Jsonnet: Argo CD evaluates *.jsonnet files of a directory source, which "
                                 "trainyard does not emulate; write the objects as YAML")  # fmt: skip
        out += [(origin, doc) for doc in objects(manifest, origin)]
    return out


# ---------------------------------------------------------------------------------------------
# The repository-wide symbolic link check


def out_of_bounds_symlink(root: Path) -> str | None:
    """The first symbolic link (lexical walk) that argo-cd@v3.5.1:util/app/path/path.go
    CheckOutOfBoundsSymlinks refuses: an absolute target, or a relative one that steps out of the
    repository at any point. The repo server runs it over the whole checkout (``.git`` skipped)
    before rendering any Application of the repository. What the root ``.gitignore`` names (build
    outputs, the virtual environment) is not part of a checkout and is not looked at."""
    root = Path(os.path.realpath(root))
    ignored = _gitignore(root)
    stack = [_sorted_entries(root)]
    while stack:
        if not stack[-1]:
            stack.pop()
            continue
        path = stack[-1].pop()
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or _is_ignored(ignored, rel, path.name):
            continue
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            if os.path.isabs(target):
                return printable(rel)
            here = str(path.parent)
            for part in target.split("/"):
                here = os.path.normpath(os.path.join(here, part))
                inside = os.path.relpath(here, root)
                if inside == ".." or inside.startswith(".." + os.sep):
                    return printable(rel)
        elif stat.S_ISDIR(info.st_mode):
            stack.append(_sorted_entries(path))
    return None


def _sorted_entries(folder: Path) -> list[Path]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / n for n in sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape"), reverse=True)]


def _gitignore(root: Path) -> list[tuple[str, bool, bool]]:
    """Simple patterns of the root .gitignore: (pattern, anchored, folders only)."""
    try:
        lines = (root / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        folders_only = text.endswith("/")
        text = text.strip("/")
        out.append((text, "/" in line.strip().rstrip("/"), folders_only))
    return out


def _is_ignored(patterns: list[tuple[str, bool, bool]], rel: str, name: str) -> bool:
    return any(fnmatch.fnmatchcase(rel if anchored else name, p) for p, anchored, _ in patterns)


# ---------------------------------------------------------------------------------------------
# Objects of a file


def objects(manifest: Manifest, shown: str) -> list[dict]:
    """The objects Argo CD takes from ``manifest`` (``shown`` names the file in messages), List items
    expanded. Raises DirectoryError."""
    name = manifest.path.name
    try:
        if name.endswith(".json"):
            found: list[dict] | None = [_json_file(manifest.text, name)]
        else:
            found = _yaml_file(manifest.text, name)
        return _expand_lists(found or [])
    except _Fails as exc:
        raise DirectoryError(f"{shown}: Argo CD fails to read it: {exc}") from None
    except _Refused as exc:
        raise DirectoryError(f"{shown}: {exc}") from None


def _yaml_file(text: str, name: str) -> list[dict] | None:
    """getObjsFromYAMLOrJSON for a file that is not ``*.json``; None: Argo CD ignores the file."""
    objs, err = _stream(text)
    if err is None:
        return objs
    if objs or all(m in text for m in ("apiVersion:", "kind:", "metadata:")):
        raise _Fails(f'Failed to unmarshal "{name}": failed to unmarshal manifest: {err}')
    return None  # "it might be an unrelated YAML file which we will ignore"


def _json_file(text: str, name: str) -> dict:
    pos = _skip(text, 0, _JSON_SPACE)
    if pos == len(text):
        raise _Fails(f'Failed to unmarshal "{name}": EOF')
    try:
        value, end = _json_value(text, pos)
    except _JsonSyntax as exc:
        raise _Fails(f'Failed to unmarshal "{name}": {exc}') from None
    if not isinstance(value, dict):
        raise _Fails(f'Failed to unmarshal "{name}": json: cannot unmarshal {_json_type(value)} into an object')
    if not isinstance(value.get("kind"), str) or not value["kind"]:
        raise _Refused(
            "a JSON object without a kind: Argo CD then reads the file as an OCI image manifest, which "
            "trainyard does not emulate; give the object its apiVersion and kind"
        )
    rest = _skip(text, end, _JSON_SPACE)
    if rest < len(text) and text[rest] not in "]}":  # json.Decoder.More
        raise _Fails(f'Found multiple objects in "{name}". Only single objects are allowed in JSON files.')
    return value


def _expand_lists(objs: list[dict]) -> list[dict]:
    """GenerateManifests: obj.IsList() (``items`` is a list) expands, isNullList drops."""
    out: list[dict] = []
    for obj in objs:
        items = obj.get("items")
        if isinstance(items, list):
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise _Fails(
                        f"items member is not an object: item {i} of {obj.get('kind')} is a {_json_type(item)}"
                    )
                kind = item.get("kind")
                if not isinstance(kind, str) or not kind:
                    raise _Fails(
                        f"item {i} of {obj.get('kind')} has no kind: Argo CD takes the items as they are (they "
                        "inherit nothing from the list) and its application controller then fails on it "
                        "(Object 'Kind' is missing)"
                    )
                out.append(item)
        elif "items" in obj and items is None and "spec" not in obj and "status" not in obj:
            continue
        else:
            out.append(obj)
    return out


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if value is None:
        return "null"
    return "number"


def _skip(text: str, pos: int, chars: str | frozenset[str]) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _unstructured(value: object) -> dict | None:
    """unstructured.Unstructured's UnmarshalJSON: an object with a kind (null: no object)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Decode(f"json: cannot unmarshal {_json_type(value)} into Go value of type map[string]interface {{}}")
    kind = value.get("kind")
    if not isinstance(kind, str) or not kind:
        shown = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        raise _Decode(f"Object 'Kind' is missing in '{shown[:200]}{'...' if len(shown) > 200 else ''}'")
    return value


class _Decode(Exception):
    """One value of the stream is not an object Argo CD takes."""


# ---------------------------------------------------------------------------------------------
# NewYAMLOrJSONDecoder


def _stream(text: str) -> tuple[list[dict], str | None]:
    """splitYAMLOrJSON: the objects read before the first error, and the error (None: none)."""
    head, size = 0, 0
    for ch in text:  # GuessJSONStream: the first 4096 bytes, white space trimmed, start with '{'
        size += len(ch.encode("utf-8", "surrogatepass"))
        if size > 4096 or ch not in _GO_SPACE:
            break
        head += 1
    if not (head < len(text) and text[head] == "{" and size <= 4096):
        objs, err, _ = _yaml_stream(text)
        return objs, err
    objs: list[dict] = []
    pos = count = 0
    while True:
        start = _skip(text, pos, _JSON_SPACE)
        if start == len(text):
            return objs, None
        try:
            value, end = _json_value(text, start)
            obj = _unstructured(value)
        except (_JsonSyntax, _Decode) as exc:
            if count > 1:
                return objs, str(exc)
            # the stream is still ambiguous: rewind to the end of the last object, eat white space up to
            # and including the first newline, and read the rest as YAML
            q = pos
            while q < len(text) and text[q] in _GO_SPACE:
                q += 1
                if text[q - 1] == "\n":
                    break
            if q == len(text):
                return objs, str(exc)
            more, err, first_failed = _yaml_stream(text[q:])
            return objs + more, (str(exc) if first_failed else err)
        count += 1
        pos = end
        if obj is not None:
            objs.append(obj)


def _chunks(text: str) -> tuple[list[str], str | None]:
    """util/yaml YAMLReader and LineReader: the documents, split at lines that start with ``---`` (a
    separator line that starts a document stays in it, one that ends a document is dropped; "\\r\\n"
    reads as "\\n"), and the error where a separator line holds anything but a comment."""
    lines = text.split("\n")
    ended = text.endswith("\n")
    if ended or lines[-1] == "":
        lines.pop()
    chunks: list[str] = []
    buffer: list[str] = []
    for i, line in enumerate(lines):
        if (ended or i < len(lines) - 1) and line.endswith("\r"):
            line = line[:-1]  # bufio.Reader.ReadLine drops the "\r" of "\r\n"
        line += "\n"
        if line.startswith("---"):
            after = line[3:]
            trimmed = after[_skip(after, 0, _GO_SPACE) :].rstrip("".join(_GO_SPACE))
            if trimmed and trimmed[0] != "#":
                return chunks, f"invalid Yaml document separator: {trimmed}"
            if buffer:
                chunks.append("".join(buffer))
                buffer = []
                continue
        buffer.append(line)
    if buffer:
        chunks.append("".join(buffer))
    return chunks, None


def _yaml_stream(text: str) -> tuple[list[dict], str | None, bool]:
    """YAMLToJSONDecoder over ``text``: objects, the error, whether the very first document failed."""
    objs: list[dict] = []
    chunks, separator_error = _chunks(text)
    for i, chunk in enumerate(chunks):
        if "\ufeff" in chunk[1:]:
            raise _Refused(
                "a U+FEFF (byte order mark) character inside a YAML document: go-yaml and trainyard's reader "
                "take it differently; remove it"
            )
        try:
            obj = _unstructured(_go_yaml_to_json(chunk))
        except (_YamlFails, _Decode) as exc:
            return objs, str(exc), i == 0
        if obj is not None:
            objs.append(obj)
    return objs, separator_error, bool(separator_error) and not chunks


# ---------------------------------------------------------------------------------------------
# JSON values (encoding/json syntax, sigs.k8s.io/json numbers)


class _JsonSyntax(Exception):
    pass


def _reject_constant(name: str) -> Any:
    raise _JsonSyntax(f"invalid character {name[0]!r} looking for beginning of value")


def _json_int(text: str) -> int | float:
    try:
        n = int(text)
    except ValueError:  # more digits than Python converts: far out of int64's range anyway
        return _json_float(text)
    if -_INT64 <= n < _INT64:
        return n
    return _json_float(text)


def _json_float(text: str) -> float:
    f = float(text)
    if math.isinf(f):
        raise _JsonSyntax(f"json: cannot unmarshal number {text} into Go value of type float64")
    return f


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_json_int, parse_float=_json_float)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _depth_check(text: str, pos: int) -> None:
    """Refuse nesting beyond MAX_DEPTH before Python's recursive JSON reader sees it."""
    depth, i, n = 0, pos, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(f"JSON nested more than {MAX_DEPTH} levels deep: trainyard does not read it")
        elif c in "]}":
            depth -= 1
            if depth <= 0:
                return
        elif depth == 0 and c not in _JSON_SPACE:
            return
        i += 1


def _json_value(text: str, pos: int) -> tuple[Any, int]:
    _depth_check(text, pos)
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise _JsonSyntax(f"{exc.msg} (character {exc.pos})") from None
    if "\\u" in text[pos:end]:
        value = _replace_surrogates(value)  # encoding/json reads an unpaired \\uD800 as U+FFFD
    return value, end


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out[_SURROGATE.sub("\ufffd", k)] = _replace_surrogates(v)
        return out
    return value


# ---------------------------------------------------------------------------------------------
# go-yaml v2.4.3 (decode.go, resolve.go) over libyaml's events, then sigs.k8s.io/yaml's JSON


class _YamlFails(Exception):
    pass


@dataclass(eq=False)
class _N:
    """A node as go-yaml's parser builds it."""

    kind: str  # scalar, seq, map, alias
    tag: str = ""
    value: str = ""
    implicit: bool = False
    children: list | None = None  # seq: nodes; map: key, value, key, value...
    target: _N | None = None  # alias
    anchor: str = ""
    line: int = 0


def _go_yaml_to_json(chunk: str) -> Any:
    """sigs.k8s.io/yaml.Unmarshal of one document chunk: the JSON value Argo CD gets (None for an empty
    document). Raises _YamlFails (Argo CD fails) or _Refused."""
    root = _parse_first_document(chunk)
    if root is None:
        return None
    _count_aliases(root)
    value = _decode(root, 0)
    return _to_json(value, 0)


def _parse_first_document(chunk: str) -> _N | None:
    events = yaml.parse(chunk, Loader=_Loader)
    anchors: dict[str, _N] = {}
    open_nodes: list[_N] = []
    root: _N | None = None
    nodes = 0
    try:
        for event in events:
            if isinstance(event, yaml.StreamStartEvent):
                continue
            if isinstance(event, yaml.StreamEndEvent):
                return None  # an empty buffer
            if isinstance(event, yaml.DocumentStartEvent):
                if event.version is not None and tuple(event.version) != (1, 1):
                    raise _YamlFails("yaml: found incompatible YAML document")
                continue
            if isinstance(event, yaml.DocumentEndEvent):
                return root  # go-yaml reads the first document of the chunk only
            line = event.start_mark.line + 1 if event.start_mark else 0
            if isinstance(event, yaml.CollectionEndEvent):
                open_nodes.pop()
                continue
            nodes += 1
            if nodes > MAX_NODES:
                raise _Refused(f"a YAML document of more than {MAX_NODES:,} nodes: trainyard does not read it")
            if isinstance(event, yaml.AliasEvent):
                target = anchors.get(event.anchor)
                if target is None:
                    raise _YamlFails(f"yaml: unknown anchor '{event.anchor}' referenced")
                if any(target is n for n in open_nodes):
                    raise _YamlFails(f"yaml: anchor '{event.anchor}' value contains itself")
                node = _N("alias", target=target, value=event.anchor, line=line)
            elif isinstance(event, yaml.ScalarEvent):
                node = _N("scalar", tag=event.tag or "", value=event.value, implicit=bool(event.implicit[0]), line=line)
            else:
                kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
                node = _N(kind, tag=event.tag or "", children=[], line=line)
            if getattr(event, "anchor", None) and not isinstance(event, yaml.AliasEvent):
                anchors[event.anchor] = node
            if open_nodes:
                open_nodes[-1].children.append(node)  # type: ignore[union-attr]
            else:
                root = node
            if node.kind in ("seq", "map"):
                open_nodes.append(node)
                if len(open_nodes) > MAX_DEPTH:
                    raise _Refused(f"YAML nested more than {MAX_DEPTH} levels deep: trainyard does not read it")
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem) or "level" in str(exc.context):  # libyaml stops at 1,000 levels
            raise _Refused(f"YAML nested more than {MAX_DEPTH} levels deep: trainyard does not read it") from None
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark else ""
        raise _YamlFails(f"yaml: {where}{exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise _YamlFails(f"yaml: {exc}") from None
    finally:
        events.close()
    return root


def _is_merge(n: _N) -> bool:
    return n.kind == "scalar" and n.value == "<<" and (n.implicit or n.tag == MERGE)


def _visits(node: _N, memo: dict[int, int]) -> int:
    """How many times go-yaml's decoder calls unmarshal for ``node`` (aliases expanded)."""
    key = id(node)
    if key in memo:
        return memo[key]
    # iterative post-order: children before parents
    stack: list[tuple[_N, bool]] = [(node, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in memo:
            continue
        kids = _visit_children(n)
        if not done:
            stack.append((n, True))
            stack.extend((k, False) for k, _ in kids if id(k) not in memo)
            continue
        memo[id(n)] = 1 + sum(memo[id(k)] - (0 if counted else 1) for k, counted in kids)
    return memo[key]


def _visit_children(n: _N) -> list[tuple[_N, bool]]:
    """The nodes unmarshal is called on below ``n``; False: the node itself is not visited (a merge's
    sequence), only its items."""
    if n.kind == "alias":
        return [(n.target, True)]  # type: ignore[list-item]
    if n.kind == "seq":
        return [(c, True) for c in n.children or []]
    if n.kind != "map":
        return []
    out: list[tuple[_N, bool]] = []
    kids = n.children or []
    for i in range(0, len(kids) - 1, 2):
        key, value = kids[i], kids[i + 1]
        if _is_merge(key):
            if value.kind == "seq":
                out.append((value, False))
            else:
                out.append((value, True))
        else:
            out += [(key, True), (value, True)]
    return out


def _allowed_alias_ratio(decodes: int) -> float:
    if decodes <= 400_000:
        return 0.99
    if decodes >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * ((decodes - 400_000) / 3_600_000)


def _count_aliases(root: _N) -> None:
    """go-yaml's "document contains excessive aliasing" check, on the counts its decoder reaches: every
    visit counted in order; an alias expansion (whose ratio only grows while it runs) checked at its end."""
    memo: dict[int, int] = {}
    decodes = 1  # the document node
    aliases = 0

    def check() -> None:
        if aliases > 100 and decodes > 1000 and aliases / decodes > _allowed_alias_ratio(decodes):
            raise _YamlFails("yaml: document contains excessive aliasing")

    stack: list[tuple[_N, bool]] = [(root, True)]
    while stack:
        n, counted = stack.pop()
        if counted:
            decodes += 1
            check()
        if n.kind == "alias":
            k = _visits(n.target, memo)  # type: ignore[arg-type]
            decodes += k
            aliases += k
            check()
            continue
        stack.extend(reversed(_visit_children(n)))


def _decode(n: _N, depth: int) -> Any:
    """decode.go unmarshal into interface{}: a mapping is a dict keyed by (type, value) pairs."""
    if depth > MAX_DEPTH:
        raise _Refused(f"YAML nested more than {MAX_DEPTH} levels deep once its aliases are expanded: "
                       "trainyard does not read it")  # fmt: skip
    if n.kind == "alias":
        return _decode(n.target, depth)  # type: ignore[arg-type]
    if n.kind == "scalar":
        return _scalar(n)
    if n.kind == "seq":
        return [_decode(c, depth + 1) for c in n.children or []]
    out: dict[tuple[str, Any], Any] = {}
    _mapping_into(n, out, depth)
    return _Map(out)


class _Map(dict):
    """A decoded YAML mapping (keys are (type, value) pairs), told apart from JSON objects."""


def _mapping_into(n: _N, out: dict, depth: int) -> None:
    kids = n.children or []
    for i in range(0, len(kids) - 1, 2):
        key, value = kids[i], kids[i + 1]
        if _is_merge(key):
            _merge(value, out, depth)
            continue
        k = _decode(key, depth + 1)
        if isinstance(k, (list, dict)):
            raise _YamlFails(f"yaml: line {key.line}: invalid map key")
        out[_typed(k)] = _decode(value, depth + 1)


def _merge(n: _N, out: dict, depth: int) -> None:
    def target(x: _N) -> _N:
        return x.target if x.kind == "alias" else x  # type: ignore[return-value]

    if n.kind in ("map", "alias"):
        if target(n).kind != "map":
            raise _YamlFails("yaml: map merge requires map or sequence of maps as the value")
        _mapping_into(target(n), out, depth)
    elif n.kind == "seq":
        for item in reversed(n.children or []):  # earlier mappings take precedence
            if target(item).kind != "map":
                raise _YamlFails("yaml: map merge requires map or sequence of maps as the value")
            _mapping_into(target(item), out, depth)
    else:
        raise _YamlFails("yaml: map merge requires map or sequence of maps as the value")


def _typed(key: Any) -> tuple[str, Any]:
    if key is None:
        return ("null", None)
    if isinstance(key, bool):
        return ("bool", key)
    if isinstance(key, int):
        return ("uint" if key >= _INT64 else "int", key)
    if isinstance(key, float):
        return ("float", key)
    return ("str", key)


def _scalar(n: _N) -> Any:
    if n.tag == "" and not n.implicit:
        return n.value  # quoted: a string
    tag = n.tag
    if tag not in _RESOLVABLE:
        if tag == BINARY:
            return _binary(n.value)
        return n.value  # an unknown tag leaves the text as it is
    if tag == TIMESTAMP:
        raise _Refused(f"line {n.line}: a !!timestamp value: trainyard does not emulate go-yaml's time parsing; "
                       "write the date as a quoted string")  # fmt: skip
    rtag, value = _resolve(tag, n.value)
    if tag in ("", rtag, STR):
        return value
    if tag == FLOAT and rtag == INT:
        return float(value)
    raise _YamlFails(f"yaml: line {n.line}: cannot decode {_short(rtag)} `{n.value}` as a {_short(tag)}")


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def _binary(text: str) -> str:
    try:
        data = base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
    except ValueError:
        raise _YamlFails("yaml: !!binary value contains invalid base64 data") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("a !!binary value that is not UTF-8 text: Argo CD would put U+FFFD for its bytes; "
                       "trainyard does not emulate that") from None  # fmt: skip


_RESOLVE_MAP: dict[str, tuple[str, Any]] = {}
for _tag, _value, _words in (
    (BOOL, True, ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")),
    (BOOL, False, ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")),
    (NULL, None, ("", "~", "null", "Null", "NULL")),
    (FLOAT, math.nan, (".nan", ".NaN", ".NAN")),
    (FLOAT, math.inf, (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")),
    (FLOAT, -math.inf, ("-.inf", "-.Inf", "-.INF")),
):
    for _word in _words:
        _RESOLVE_MAP[_word] = (_tag, _value)
_HINT = {c: "M" for c in "yYnNtTfFoO~"} | {c: "D" for c in "0123456789"} | {"+": "S", "-": "S", ".": "."}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9_]*[0-9][0-9_]*([eE][-+]?[0-9][0-9_]*)?")


def _resolve(tag: str, text: str) -> tuple[str, Any]:
    """resolve.go resolve for a resolvable tag (the timestamp case excepted)."""
    hint = _HINT.get(text[0], "") if text else "N"
    if hint and tag != STR:
        if text in _RESOLVE_MAP:
            return _RESOLVE_MAP[text]
        if hint == ".":
            f = _dot_float(text)
            if f is not None:
                return FLOAT, f
        elif hint in "DS":
            # a timestamp (go-yaml tries one first) stays its text when decoded into interface{}, and
            # none of them parses as a number below: the result is the same string
            plain = text.replace("_", "")
            i = _parse_int(plain, 0)
            if i is not None:
                return INT, i
            u = _parse_uint(plain, 0)
            if u is not None:
                return INT, u
            if _YAML_FLOAT.fullmatch(plain):
                f = float(plain)
                if not math.isinf(f):  # strconv.ParseFloat: out of range is an error
                    return FLOAT, f
            if plain.startswith("0b"):
                i = _parse_int(plain[2:], 2)
                if i is not None:
                    return INT, i
                u = _parse_uint(plain[2:], 2)
                if u is not None:
                    return INT, u
            elif plain.startswith("-0b"):
                i = _parse_int("-" + plain[3:], 2)
                if i is not None:
                    return INT, i
    return STR, text


def _dot_float(text: str) -> float | None:
    """strconv.ParseFloat for a string starting with '.' (decimal, underscores between digits)."""
    if not _DOT_FLOAT.fullmatch(text):
        return None
    saw = "^"
    for c in text:  # strconv underscoreOK
        if c.isdigit():
            saw = "0"
        elif c == "_":
            if saw != "0":
                return None
            saw = "_"
        else:
            if saw == "_":
                return None
            saw = "!"
    if saw == "_":
        return None
    f = float(text.replace("_", ""))
    return None if math.isinf(f) else f


def _parse_uint(s: str, base: int) -> int | None:
    """strconv.ParseUint(s, base, 64), None on any error."""
    if not s:
        return None
    if base == 0:
        base = 10
        if s[0] == "0":
            if len(s) >= 3 and s[1] in "bB":
                base, s = 2, s[2:]
            elif len(s) >= 3 and s[1] in "oO":
                base, s = 8, s[2:]
            elif len(s) >= 3 and s[1] in "xX":
                base, s = 16, s[2:]
            else:
                base, s = 8, s[1:]
    n = 0
    for c in s:
        if "0" <= c <= "9":
            d = ord(c) - 48
        elif "a" <= c.lower() <= "z" and c.isascii():
            d = ord(c.lower()) - 87
        else:
            return None
        if d >= base:
            return None
        n = n * base + d
        if n >= 1 << 64:
            return None
    return n


def _parse_int(s: str, base: int) -> int | None:
    """strconv.ParseInt(s, base, 64), None on any error."""
    if not s:
        return None
    negative = s[0] == "-"
    if s[0] in "+-":
        s = s[1:]
    u = _parse_uint(s, base)
    if u is None or (not negative and u >= _INT64) or (negative and u > _INT64):
        return None
    return -u if negative else u


def _to_json(value: Any, depth: int) -> Any:
    """sigs.k8s.io/yaml convertToJSONableObject + json.Marshal, read back by sigs.k8s.io/json
    (UnmarshalCaseSensitivePreserveInts): fresh containers, string keys, numbers as Argo CD has them."""
    if depth > MAX_DEPTH:
        raise _Refused(f"YAML nested more than {MAX_DEPTH} levels deep: trainyard does not read it")
    if isinstance(value, _Map):
        out: dict[str, Any] = {}
        origin: dict[str, tuple[str, Any]] = {}
        for (kind, key), v in value.items():
            if kind == "str":
                text = key
            elif kind == "int":
                text = str(key)
            elif kind == "bool":
                text = "true" if key else "false"
            elif kind == "float":
                text = _format_float32(key)
            else:
                shown = "<nil>" if kind == "null" else "uint64"
                raise _YamlFails(f"error converting YAML to JSON: unsupported map key of type: {shown}")
            if text in origin and origin[text][0] != kind:
                raise _Refused(
                    f"the keys {origin[text][1]!r} and {key!r} both become the JSON key {text!r}: Argo CD keeps "
                    "one of them at random; quote the keys or remove one"
                )
            origin[text] = (kind, key)
            out[text] = _to_json(v, depth + 1)
        return out
    if isinstance(value, list):
        return [_to_json(v, depth + 1) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else float(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _YamlFails(f"error converting YAML to JSON: json: unsupported value: {_go_float(value)}")
        if value.is_integer() and abs(value) < 1e21:
            # json.Marshal writes the shortest digits, padded with zeros and without a '.': read back
            # as an int64 where that integer fits
            n = int(Decimal(repr(value)))
            if -_INT64 <= n < _INT64:
                return n
        return value
    raise _Refused(f"a YAML value of type {type(value).__name__}")  # pragma: no cover - not produced


def _format_float32(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32) as sigs.k8s.io/yaml writes a float map key (then +Inf,
    -Inf and NaN become .inf, -.inf and .nan): the shortest digits that read back as the same float32."""
    if math.isnan(value):
        return ".nan"
    single = _float32(value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    negative = math.copysign(1.0, single) < 0
    magnitude = abs(single)
    if magnitude == 0:
        return "-0" if negative else "0"
    digits, exp = "", 0
    for precision in range(1, 18):
        candidates = []
        mantissa, _, e = f"{magnitude:.{precision - 1}e}".partition("e")
        base = int(mantissa.replace(".", ""))
        for m in (base - 1, base, base + 1):  # the nearest that reads back (a power of two rounds unevenly)
            if m <= 0 or len(str(m)) != precision:
                continue
            candidate = float(f"{m}e{int(e) - precision + 1}")
            if _float32(candidate) == magnitude:
                candidates.append((abs(candidate - magnitude), m != base, m))  # a tie: the rounded one
        if candidates:
            m = min(candidates)[2]
            digits, exp = str(m).rstrip("0"), int(e)
            break
    dp = exp + 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    elif dp <= 0:
        text = "0." + "0" * -dp + digits
    elif dp >= len(digits):
        text = digits + "0" * (dp - len(digits))
    else:
        text = digits[:dp] + "." + digits[dp:]
    return ("-" if negative else "") + text


def _float32(value: float) -> float:
    """float32(value) in Go: rounded to single precision, infinite beyond its range."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _go_float(value: float) -> str:
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"

"""Which kustomization entries kustomize fetches over the network, decided by kustomize's own rule.

The rule is that of sigs.k8s.io/kustomize/api@v0.21.3 (what kustomize 5.8.3, pinned in
kube/kustomize/go.mod, builds with), ported here line by line:

- A folder entry (``resources``, ``bases``, ``components``) goes to the loader's ``New``
  (api@v0.21.3 internal/loader/fileloader.go ``FileLoader.New``), which tries
  ``git.NewRepoSpecFromURL`` FIRST and clones the repository whenever that parses; only an entry it
  does not parse is looked for as a local folder. A local folder of the same path therefore never
  stops the clone. (``resources`` are first tried as a file, internal/target/kusttarget.go
  ``accumulateResources``: a regular file of that path is read instead; a job folder refuses the
  entry all the same.)
- Every file a kustomization names (resources, patches, generators' files and env files,
  replacements, openapi, crds, configurations) goes to the loader's ``Load``, which downloads it
  when ``IsRemoteFile``: ``url.Parse`` succeeds with the scheme ``http`` or ``https`` (Go lowers the
  scheme's case).

:func:`repo_spec` is ``NewRepoSpecFromURL`` (api@v0.21.3 internal/git/repospec.go): ``git::`` and the
schemes ``ssh://``, ``https://``, ``http://``, ``file://`` in any case, a user name (``user@``,
which makes the scp-like ``host:path`` form acceptable), ``github.com`` hosts (in any case, Go's
``strings.ToLower`` also turning ``İ`` into ``i``), ``_git/``, ``//`` and ``.git`` markers, the query.
:func:`is_remote_file` is a superset of ``IsRemoteFile``: it looks at the scheme only, and does not
repeat the other checks of Go's ``url.Parse`` (which, failing, would make kustomize read a local
file instead): an entry that may be fetched is called remote.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

# api@v0.21.3 internal/git/repospec.go
FILE_SCHEME, HTTP_SCHEME, HTTPS_SCHEME, SSH_SCHEME = "file://", "http://", "https://", "ssh://"
_SCHEMES = (SSH_SCHEME, HTTPS_SCHEME, HTTP_SCHEME, FILE_SCHEME)  # extractScheme's order
_USER = re.compile(r"^([a-zA-Z][a-zA-Z0-9-]*)@")  # extractUsername
_ALL_SEGMENTS = -999999
_ORG_REPO_SEGMENTS = 2


@dataclass(frozen=True)
class RepoSpec:
    """What kustomize makes of a git reference: it runs ``git fetch --depth=1 <clone_spec> <ref>``."""

    host: str
    repo_path: str
    kust_root: str  # the folder inside the repository
    ref: str  # "" : HEAD

    @property
    def clone_spec(self) -> str:
        return self.host + self.repo_path


def _go_lower(text: str) -> str:
    """Go's ``strings.ToLower`` as far as it can yield ASCII: A-Z, and the two other characters whose
    lower case is ASCII (U+0130 -> i, U+212A KELVIN SIGN -> k; unicode.ToLower, Go's CaseRanges)."""
    return "".join("i" if c == "\u0130" else "k" if c == "\u212a" else c.lower() if c.isascii() else c for c in text)


def _trim_prefix_ignore_case(text: str, prefix: str) -> tuple[str, bool]:
    """trimPrefixIgnoreCase: ``strings.ToLower(s[:len(prefix)]) == prefix`` on bytes; the prefixes are
    ASCII, and a non-ASCII byte in that slice never lowers to the same number of ASCII bytes."""
    head = text[: len(prefix)]
    if len(head) == len(prefix) and head.isascii() and head.lower() == prefix:
        return text[len(prefix) :], True
    return text, False


def _query_unescape(text: str) -> str | None:
    """Go's url.QueryUnescape; None where it fails (a bad %-escape)."""
    out = bytearray()
    i = 0
    raw = text.encode("utf-8", "surrogateescape")
    while i < len(raw):
        c = raw[i]
        if c == ord("%"):
            pair = raw[i + 1 : i + 3]
            if len(pair) < 2 or not all(chr(b) in "0123456789abcdefABCDEF" for b in pair):
                return None
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(ord(" ") if c == ord("+") else c)
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _parse_query(query: str) -> str:
    """parseQuery's ref: ``ref`` over ``version``; "" (HEAD) when url.ParseQuery fails."""
    values: dict[str, list[str]] = {}
    for part in query.split("&"):
        if not part:
            continue
        if ";" in part:
            return ""  # url.ParseQuery: "invalid semicolon separator in query"
        key, _, value = part.partition("=")
        k, v = _query_unescape(key), _query_unescape(value)
        if k is None or v is None:
            return ""
        values.setdefault(k, []).append(v)
    ref = (values.get("version") or [""])[0]
    return (values.get("ref") or [""])[0] or ref


def _is_standard_github_host(text: str) -> bool:
    lowered = _go_lower(text)
    return lowered.startswith(("github.com/", "github.com:"))


def _find_path_separator(host_path: str, accept_scp: bool) -> int:
    sep = host_path.find("/")
    if accept_scp:
        colon = host_path.find(":")
        if sep == -1 or 0 < colon < sep:
            sep = colon
    return sep


def _extract_host(n: str) -> tuple[str, str] | None:
    n, _ = _trim_prefix_ignore_case(n, "git::")  # ignoreForcedGitProtocol
    scheme = ""
    for prefix in _SCHEMES:
        n, found = _trim_prefix_ignore_case(n, prefix)
        if found:
            scheme = prefix
            break
    username = ""
    if m := _USER.match(n):
        username = m.group(1) + "@"
        n = n[len(username) :]
    github = _is_standard_github_host(n)
    accept_scp = scheme == "" and (username != "" or github)
    if scheme == "" and not accept_scp:
        return None  # validateScheme: "failed to parse scheme"
    if scheme == FILE_SCHEME:
        return scheme, username + n
    host, rest = n, ""
    sep = _find_path_separator(n, accept_scp)
    if sep >= 0:
        host, rest = n[: sep + 1], n[sep + 1 :]
    if github:  # normalizeGithubHostParts
        if scheme.startswith(SSH_SCHEME) or username != "":
            scheme, host = "", "github.com:"
        else:
            scheme, username, host = HTTPS_SCHEME, "", "github.com/"
    if host == "":
        return None
    return scheme + username + host, rest


def _explicit_marker_split(n: str) -> tuple[str, str] | None:
    if (i := n.find("_git/")) >= 0:
        segments = n[i + len("_git/") :].split("/")
        return n[: i + len("_git/")] + segments[0], "/".join(segments[1:])
    if (i := n.find("//")) >= 0:
        return n[:i], n[i + 2 :]
    if (i := n.find(".git")) >= 0:
        return n[: i + len(".git")], n[i + len(".git") :]
    return None


def _parse_path_parts(n: str, default_length: int) -> tuple[str, str] | None:
    split = _explicit_marker_split(n)
    if split is None:
        if default_length == _ALL_SEGMENTS:
            split = (n, "")
        elif len(segments := n.split("/")) >= default_length:
            split = ("/".join(segments[:default_length]), "/".join(segments[default_length:]))
    if split is None or not split[0]:
        return None
    repo_path, kust_root = split
    # kustRootPathExitsRepo: filepath.Clean(TrimPrefix(path, "/")), first element ".."
    cleaned = posixpath.normpath(kust_root.removeprefix("/")) if kust_root.removeprefix("/") else "."
    if cleaned.split("/")[0] == "..":
        return None
    return repo_path, kust_root.removeprefix("/")


def repo_spec(entry: str) -> RepoSpec | None:
    """kustomize's ``NewRepoSpecFromURL(entry)``: the repository it clones, or None where it returns an
    error (kustomize then reads a local folder)."""
    if entry.startswith("/"):  # filepath.IsAbs
        return None
    n, _, query = entry.partition("?")
    ref = _parse_query(query)
    parsed = _extract_host(n)
    if parsed is None:
        return None
    host, rest = parsed
    parts = _parse_path_parts(rest, _ALL_SEGMENTS if host.startswith(FILE_SCHEME) else _ORG_REPO_SEGMENTS)
    if parts is None:
        return None
    return RepoSpec(host=host, repo_path=parts[0], kust_root=parts[1], ref=ref)


def url_scheme(entry: str) -> str:
    """The scheme Go's ``url.Parse`` finds (getScheme, lowered), "" for none."""
    for i, c in enumerate(entry.split("#", 1)[0]):
        if c.isascii() and c.isalpha():
            continue
        if c.isascii() and (c.isdigit() or c in "+-."):
            if i == 0:
                return ""
            continue
        return entry[:i].lower() if c == ":" and i > 0 else ""
    return ""


def is_remote_file(entry: str) -> bool:
    """Whether kustomize may download ``entry`` as a file (a superset of ``IsRemoteFile``)."""
    return url_scheme(entry) in ("http", "https")


def is_remote(entry: object) -> bool:
    """Whether kustomize may fetch ``entry`` over the network, wherever a kustomization names it: a
    git repository it clones or a URL it downloads. Decided on the entry as written and with
    surrounding white space removed (kustomize does not strip it; either reading counts)."""
    if not isinstance(entry, str):
        return False
    return any(repo_spec(e) is not None or is_remote_file(e) for e in {entry, entry.strip()})


def describe(entry: str) -> str:
    """What kustomize would fetch for ``entry`` (which :func:`is_remote` accepts), in words."""
    url = any(is_remote_file(e) for e in (entry, entry.strip()))
    for e in (entry, entry.strip()):
        spec = repo_spec(e)
        if spec is not None:
            clone = f"the git repository {spec.clone_spec}{' at ' + spec.ref if spec.ref else ''}"
            return f"a URL it downloads, or else {clone} it clones" if url else f"{clone}, which it clones"
    return "a URL it downloads"

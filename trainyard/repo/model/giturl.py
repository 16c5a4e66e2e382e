"""Git repository URLs compared as Argo CD compares them: argo-cd@v3.5.1:util/git/git.go
NormalizeGitURL and SameURL, with Go's net/url Parse and URL.String (Go 1.26) ported for the parts
they use.

NormalizeGitURL lower-cases the whole URL and trims white space; an SSH URL written
``git@host:path`` (sshURLRegex ``^(ssh://)?([^/:]*?)@[^@]+$``) gets its first ``:`` replaced by ``/``
and ``ssh://`` put in front; one trailing ``.git`` is dropped; the result is parsed and printed by
net/url (which escapes what a path may not hold, ``{`` ``}`` included) and ``ssh://`` is dropped
again. A URL net/url cannot parse normalises to ``""``. A trailing ``/`` stays: ``…/repo/`` and
``…/repo`` are different repositories to Argo CD.

Not ported, refused with :class:`UrlNotEmulated`: characters outside ASCII (Go lower-cases them
with its own Unicode tables) and IPv6 literals in brackets (net/netip).
"""

from __future__ import annotations

import re

_SSH_URL = re.compile(r"(ssh://)?([^/:]*?)@[^@]+\Z", re.DOTALL)
_GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)

_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
_HOST_OK = frozenset(b"!$&'()*+,;=:[]<>\"")
_HEX = frozenset(b"0123456789abcdefABCDEF")


class UrlNotEmulated(ValueError):
    """A URL whose normalisation trainyard does not emulate."""


class _ParseError(ValueError):
    pass


def _should_escape(c: int, mode: str) -> bool:
    """net/url shouldEscape (gen_encoding_table.go), for the modes Parse and String use."""
    if c in _UNRESERVED:
        return False
    if mode == "host" and c in _HOST_OK:
        return False
    if c in b"$&+,/:;=?@":
        if mode == "path":
            return c == ord("?")
        if mode == "user":
            return c in b"@/?:"
        if mode == "fragment":
            return False
    return not (mode == "fragment" and c in b"!()*")


def _unescape(s: bytes, mode: str) -> bytes:
    i = 0
    n = 0
    while i < len(s):
        c = s[i]
        if c == ord("%"):
            n += 1
            if i + 2 >= len(s) or s[i + 1] not in _HEX or s[i + 2] not in _HEX:
                raise _ParseError("invalid URL escape")
            if mode == "host" and int(chr(s[i + 1]), 16) < 8 and s[i : i + 3] != b"%25":
                raise _ParseError("invalid URL escape")
            i += 3
        else:
            if mode == "host" and c < 0x80 and _should_escape(c, mode):
                raise _ParseError("invalid character in host name")
            i += 1
    if n == 0:
        return s
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == ord("%"):
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(s[i])
            i += 1
    return bytes(out)


def _escape(s: bytes, mode: str) -> bytes:
    out = bytearray()
    for c in s:
        if _should_escape(c, mode):
            out += b"%" + f"{c:02X}".encode()
        else:
            out.append(c)
    return bytes(out)


def _valid_encoded(s: bytes, mode: str) -> bool:
    for c in s:
        if c in b"!$&'()*+,;=:@[]%":
            continue
        if _should_escape(c, mode):
            return False
    return True


def _valid_optional_port(port: bytes) -> bool:
    if not port:
        return True
    return port[:1] == b":" and all(0x30 <= b <= 0x39 for b in port[1:])


def _valid_userinfo(s: bytes) -> bool:
    return all(c in _UNRESERVED or c in b":!$&'()*+,;=%@" for c in s)


def _get_scheme(raw: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(raw):
        if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            continue
        if 0x30 <= c <= 0x39 or c in b"+-.":
            if i == 0:
                return b"", raw
            continue
        if c == ord(":"):
            if i == 0:
                raise _ParseError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _parse_host(scheme: bytes, host: bytes) -> bytes:
    if b"[" in host:
        raise UrlNotEmulated("an IPv6 address in brackets")
    i = host.find(b":")
    if i != -1:
        last = host.rfind(b":")
        if last != i and scheme not in (b"http", b"https"):
            i = last
        if not _valid_optional_port(host[i:]):
            raise _ParseError("invalid port after host")
    return _unescape(host, "host")


def go_url_string(raw: str) -> str:
    """net/url Parse(raw).String(); raises _ParseError where Parse fails."""
    data = raw.encode("utf-8")
    u, _, frag = data.partition(b"#")
    if any(b < 0x20 or b == 0x7F for b in u):
        raise _ParseError("invalid control character in URL")
    fragment = raw_fragment = b""
    if frag:
        fragment = _unescape(frag, "fragment")
        raw_fragment = b"" if _escape(fragment, "fragment") == frag else frag
    scheme, opaque, user, host, path, raw_path, query, force, omit = b"", b"", None, b"", b"", b"", b"", False, False
    if u == b"*":
        path = b"*"
    else:
        scheme, rest = _get_scheme(u)
        scheme = scheme.lower()
        force = rest.endswith(b"?") and rest.count(b"?") == 1
        if force:
            rest, query = rest[:-1], b""
        else:
            rest, _, query = rest.partition(b"?")
        if not rest.startswith(b"/") and scheme:
            opaque = rest
        else:
            if not rest.startswith(b"/") and b":" in rest.partition(b"/")[0]:
                raise _ParseError("first path segment in URL cannot contain colon")
            if (scheme or not rest.startswith(b"///")) and rest.startswith(b"//"):
                authority, rest = rest[2:], b""
                slash = authority.find(b"/")
                if slash >= 0:
                    authority, rest = authority[:slash], authority[slash:]
                at = authority.rfind(b"@")
                host = _parse_host(scheme, authority[at + 1 :] if at >= 0 else authority)
                if at >= 0:
                    info = authority[:at]
                    if not _valid_userinfo(info):
                        raise _ParseError("invalid userinfo")
                    if b":" in info:
                        name, _, password = info.partition(b":")
                        user = (_unescape(name, "user"), _unescape(password, "user"))
                    else:
                        user = (_unescape(info, "user"), None)
            elif scheme and rest.startswith(b"/"):
                omit = True
            path = _unescape(rest, "path")
            raw_path = b"" if _escape(path, "path") == rest else rest
    out = bytearray()
    if scheme:
        out += scheme + b":"
    if opaque:
        out += opaque
    else:
        if (scheme or host or user is not None) and not (omit and not host and user is None):
            if host or path or user is not None:
                out += b"//"
            if user is not None:
                out += _escape(user[0], "user")
                if user[1] is not None:
                    out += b":" + _escape(user[1], "user")
                out += b"@"
            if host:
                out += _escape(host, "host")
        escaped = _escaped_path(path, raw_path)
        if escaped and escaped[:1] != b"/" and host:
            out += b"/"
        if not out and b":" in escaped.partition(b"/")[0]:
            out += b"./"
        out += escaped
    if force or query:
        out += b"?" + query
    if fragment:
        valid = raw_fragment and _valid_encoded(raw_fragment, "fragment")
        out += b"#" + (
            raw_fragment if valid and _unescape(raw_fragment, "fragment") == fragment else _escape(fragment, "fragment")
        )
    return out.decode("utf-8", "surrogateescape")


def _escaped_path(path: bytes, raw_path: bytes) -> bytes:
    if raw_path and _valid_encoded(raw_path, "path"):
        try:
            if _unescape(raw_path, "path") == path:
                return raw_path
        except _ParseError:
            pass
    if path == b"*":
        return b"*"
    return _escape(path, "path")


def normalize_git_url(repo: str) -> str:
    """argo-cd@v3.5.1:util/git/git.go NormalizeGitURL ("" where net/url cannot parse it). Raises
    UrlNotEmulated for what is not ported."""
    if any(ord(c) > 0x7F for c in repo):
        raise UrlNotEmulated("characters outside ASCII")
    text = repo
    while text and text[0] in _GO_SPACE:
        text = text[1:]
    while text and text[-1] in _GO_SPACE:
        text = text[:-1]
    text = text.lower()
    if _SSH_URL.match(text) and not text.startswith("ssh://"):
        text = "ssh://" + text.replace(":", "/", 1)
    text = text.removesuffix(".git")
    try:
        normalized = go_url_string(text)
    except _ParseError:
        return ""
    return normalized.removeprefix("ssh://")


def same_url(left: str, right: str) -> bool:
    """argo-cd@v3.5.1:util/git/git.go SameURL (NormalizeGitURLAllowInvalid on both sides)."""
    a = normalize_git_url(left) or left
    b = normalize_git_url(right) or right
    return a != "" and b != "" and a == b

"""Go's path.Match for the patterns this repository writes: literal text and ``*``.

Argo CD matches an ApplicationSet's git ``directories[].path`` with path.Match
(argo-cd@v3.6.2:applicationset/generators/repo_path_utils.go filterPaths) and an AppProject's
resource lists with filepath.Match, the same on Linux (pkg/apis/application/v1alpha1/types.go
isResourceInList, isNamedResourceInList). ``*`` matches any run of characters but ``/``. The other
pattern characters (``?``, ``[...]``, ``\\``) are refused with :class:`PatternNotRead`, never matched
differently. Linear in the lengths (``str.find`` per chunk), whatever the input.
"""

from __future__ import annotations

import re

MAX_PATTERN = 4096  # characters; a path longer than PATH_MAX matches nothing anyway
_NOT_READ = re.compile(r"[?\[\]\\]")


class PatternNotRead(ValueError):
    """A pattern beyond literal text and ``*``; the message names the character."""


def check(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN:
        raise PatternNotRead(f"longer than {MAX_PATTERN} characters")
    bad = _NOT_READ.search(pattern)
    if bad:
        raise PatternNotRead(
            f"{bad.group()!r} is a pattern character of Go's path.Match that trainyard does not read offline "
            "(it reads literal text and '*')"
        )


def _segment(pattern: str, name: str) -> bool:
    """One '/'-free segment: the first chunk a prefix, the last a suffix, the middle ones found
    left to right (the leftmost match never loses with '*' as the only wildcard)."""
    chunks = pattern.split("*")
    if len(chunks) == 1:
        return pattern == name
    first, *middle, last = chunks
    if len(name) < len(first) + len(last) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for chunk in middle:
        found = name.find(chunk, at, end)
        if found < 0:
            return False
        at = found + len(chunk)
    return True


def path_match(pattern: str, name: str) -> bool:
    """path.Match(pattern, name) for literal text and ``*``; PatternNotRead for anything else. A
    ``*`` never crosses ``/``, so both sides have their ``/`` at the same places."""
    check(pattern)
    parts, names = pattern.split("/"), name.split("/")
    return len(parts) == len(names) and all(_segment(p, n) for p, n in zip(parts, names, strict=True))

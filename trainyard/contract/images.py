"""Container image references, normalised as the container runtime does.

``trainer``, ``docker.io/library/trainer:1`` and ``index.docker.io/library/trainer@sha256:..``
are the same repository; ``registry.example.com/ml/trainer-evil`` and
``evil.example.com/registry.example.com/ml/trainer`` are not ``registry.example.com/ml/trainer``.
Grammar: github.com/distribution/reference (domain, path, tag, digest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_DOMAIN = "docker.io"
_LEGACY_DOMAINS = ("index.docker.io", "registry-1.docker.io")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_DOMAIN = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.?)+(?::[0-9]+)?$"  # host[:port]
    r"|^\[[0-9a-fA-F:]+\](?::[0-9]+)?$"  # [ipv6][:port]
)


@dataclass(frozen=True, slots=True)
class ImageRef:
    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}"


@lru_cache(maxsize=4096)
def parse_image(image: str) -> ImageRef | None:
    """Parse an image reference; None if it is not a valid reference."""
    if not image or len(image) > 4096 or image != image.strip():
        return None
    rest, digest = image, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.match(digest):
            return None
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.match(tag):
            return None
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not _DOMAIN.match(first):
            return None
        domain, path = first, remainder
    else:
        domain, path = DEFAULT_DOMAIN, rest
    if domain in _LEGACY_DOMAINS:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    if not path or not all(_PATH_COMPONENT.match(c) for c in path.split("/")):
        return None
    return ImageRef(domain=domain, path=path, tag=tag, digest=digest)

"""Container image references: parsed in linear time, and one identity rule for "is this the trainer".

The grammar is distribution/reference's (github.com/distribution/reference@v0.6.0, regexp.go,
the compiled patterns being the authority over the doc comment in reference.go)::

    reference      := name [ ":" tag ] [ "@" digest ]
    name           := [ domain "/" ] path                 path: at most 255 characters
    domain         := host [ ":" port ]                   host: DNS components, or [IPv6]
    host component := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
    port           := [0-9]+
    path           := path-component ( "/" path-component )*
    path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*  separator: "." | "_" | "__" | "-"+
    tag            := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest         := algorithm ":" [0-9a-fA-F]{32,}      algorithm: [A-Za-z][A-Za-z0-9]* joined by [-_+.]

and which first component is a domain follows normalize.go ``splitDockerDomain``: the part before
the first ``/`` is the domain when it is ``localhost``, contains ``.`` or ``:``, or has an upper-case
letter; otherwise the reference is on Docker Hub (``docker.io``), and a one-component Docker Hub
path gets ``library/``. A 64-hex-digit string alone is an image ID, not a reference.

The scanner below splits at the separators (``@``, the last ``:``, the first ``/``) and checks each
part by searching it for one forbidden character or short sequence: every character is looked at
a bounded number of times, whatever the input (the backtracking regular expression it replaces
spent 18.9 s on a 32-character domain).

Identity (:func:`identity`, the rule the webhook, its matchConditions and the admission policy
all apply) is what decides which registry and repository a runtime pulls from, whatever the
spelling. On top of distribution's normalisation it makes the registry host case-insensitive (DNS
is), drops the default HTTPS port ``:443`` (and leading zeros of any port), and folds
``index.docker.io`` and ``registry-1.docker.io`` (where containerd sends ``docker.io`` pulls,
core/remotes/docker/resolver.go ``DefaultHost``) into ``docker.io``; the tag and the digest do not
matter. :func:`cel_pattern` turns a set of repositories into the RE2 pattern that accepts exactly
the references whose identity is one of them, for the CEL of base/webhook.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache

DEFAULT_DOMAIN = "docker.io"
_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")
DEFAULT_PORT = "443"  # HTTPS: containerd dials a registry over https unless told otherwise
PATH_MAX = 255  # distribution/reference RepositoryNameTotalLengthMax, applied to the path
TAG_MAX = 128
_CACHED_MAX = 256  # longer strings are parsed every time, so the cache never holds megabytes

# Each check below is a search for one forbidden character or one forbidden short sequence: a
# single left-to-right pass with nothing to try again, so the time is linear in the length.
_NOT_HOST = re.compile(r"[^A-Za-z0-9.-]|\.\.|\.-|-\.")  # components: alphanumerics and inner "-"
_NOT_IPV6 = re.compile(r"[^0-9A-Fa-f:]")
_NOT_DIGITS = re.compile(r"[^0-9]")
# path: lower-case alphanumerics joined by ".", "_", "__" or "-"+ inside a component, "/" between
_NOT_PATH = re.compile(r"[^a-z0-9._/-]|___|[./][._/-]|[._/-][./]|_-|-_")
_NOT_TAG = re.compile(r"[^A-Za-z0-9_.-]")
_NOT_HEX = re.compile(r"[^0-9A-Fa-f]")
_NOT_LOWER_HEX = re.compile(r"[^0-9a-f]")
_NOT_ALGORITHM = re.compile(r"[^A-Za-z0-9+._-]|[+._-][^A-Za-z]")  # components start with a letter
_LETTERS = frozenset(string.ascii_letters)
_ALNUM = frozenset(string.ascii_letters + string.digits)
_LOWER_ALNUM = frozenset(string.ascii_lowercase + string.digits)


@dataclass(frozen=True, slots=True)
class ImageRef:
    domain: str  # normalised: lower case, no :443, docker.io for the Docker Hub spellings
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        """The identity: registry and repository, as the runtime pulls them."""
        return f"{self.domain}/{self.path}"


def _domain(text: str) -> str | None:
    """``host[:port]`` normalised (host lower case, no default port), or None if not a domain."""
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        if end < 2 or _NOT_IPV6.search(host, 1, end):
            return None
    else:
        host, colon, port = text.partition(":")
        rest = colon + port
        if not host or host[0] in ".-" or host[-1] in ".-" or _NOT_HOST.search(host):
            return None
    if rest:
        port = rest[1:]
        if rest[0] != ":" or not port or _NOT_DIGITS.search(port):
            return None
        port = port.lstrip("0") or "0"
        rest = "" if port == DEFAULT_PORT else f":{port}"
    return host.lower() + rest


def _path(path: str) -> bool:
    return (
        0 < len(path) <= PATH_MAX
        and path[0] in _LOWER_ALNUM
        and path[-1] in _LOWER_ALNUM
        and not _NOT_PATH.search(path)
    )


def _tag(text: str) -> bool:
    return 0 < len(text) <= TAG_MAX and text[0] not in ".-" and not _NOT_TAG.search(text)


def _digest(text: str) -> bool:
    algorithm, colon, hexpart = text.partition(":")
    return (
        bool(colon)
        and len(hexpart) >= 32
        and not _NOT_HEX.search(hexpart)
        and algorithm[:1] in _LETTERS
        and algorithm[-1] in _ALNUM
        and not _NOT_ALGORITHM.search(algorithm)
    )


def parse_image(image: object) -> ImageRef | None:
    """Parse an image reference; None if it is not one (a runtime could not pull it)."""
    if not isinstance(image, str):
        return None
    if len(image) <= _CACHED_MAX:
        return _parse_cached(image)
    return _parse(image)


@lru_cache(maxsize=4096)  # a cluster runs a handful of images: parse each spelling once
def _parse_cached(image: str) -> ImageRef | None:
    return _parse(image)


def _parse(image: str) -> ImageRef | None:
    if not image or (len(image) == 64 and not _NOT_LOWER_HEX.search(image)):
        return None  # empty, or an image ID (normalize.go ParseNormalizedNamed refuses both)
    name, at, digest = image.partition("@")
    if at and not _digest(digest):
        return None
    tag = None
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1 :]
        if not _tag(tag):
            return None
    elif at and not digest.partition(":")[0].islower():
        # normalize.go ParseNormalizedNamed: the name up to the first ':' must be lower case;
        # without a tag that takes in '@' and the digest's algorithm ("x@Sha256:…" is refused)
        return None
    first, slash, rest = name.partition("/")
    domain, path = DEFAULT_DOMAIN, name
    if slash and (first == "localhost" or "." in first or ":" in first or first != first.lower()):
        given = _domain(first)
        if given is None:
            return None
        domain, path = given, rest
    if not _path(path):
        return None
    if domain in _DOCKER_HUB:
        domain = DEFAULT_DOMAIN
        if "/" not in path:
            path = f"library/{path}"
    return ImageRef(domain=domain, path=path, tag=tag, digest=digest or None)


def identity(image: object) -> str | None:
    """``registry/repository`` of a reference, normalised, or None if it is not a reference."""
    ref = parse_image(image)
    return ref.repository if ref is not None else None


# --- the same rule as an RE2 pattern, for CEL's matches() ------------------------------------------
# No backslashes: a literal "." is written "[.]", so the pattern goes into a CEL string literal and
# into YAML as it is. RE2 (what kube-apiserver's CEL uses) runs in linear time.

_TAG_RE = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST_RE = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
_LOWER_DIGEST_RE = "[a-z][a-z0-9]*(?:[-_+.][a-z][a-z0-9]*)*:[0-9A-Fa-f]{32,}"  # without a tag (see _parse)


class RepositoryError(ValueError):
    pass


def repository(text: str) -> str:
    """A trainer repository as a profile names it (no tag, no digest), normalised; RepositoryError
    says why one cannot be matched by :func:`cel_pattern`."""
    ref = parse_image(text)
    if ref is None:
        raise RepositoryError(f"{text!r} is not an image repository")
    if ref.tag or ref.digest:
        raise RepositoryError(f"{text!r} must be a repository without tag or digest")
    host = ref.domain.partition(":")[0]
    if host.startswith("["):
        raise RepositoryError(f"{text!r}: a registry given by IPv6 address is not supported; use its DNS name")
    if ref.domain != DEFAULT_DOMAIN and "." not in host and host != "localhost":
        raise RepositoryError(
            f"{text!r}: registry {host!r} has no '.', so the same name in lower case means Docker Hub; "
            "use the registry's fully qualified name"
        )
    return ref.repository


def _literal(text: str) -> str:
    return text.replace(".", "[.]")


def _host_re(domain: str) -> str:
    host, colon, port = domain.partition(":")
    return f"(?i:{_literal(host)})" + (f":0*{port}" if colon else f"(?::0*{DEFAULT_PORT})?")


def _repository_re(repo: str) -> str:
    domain, _, path = repo.partition("/")
    if domain != DEFAULT_DOMAIN:
        return _host_re(domain) + "/" + _literal(path)
    hub = "(?:" + "|".join(_host_re(d) for d in _DOCKER_HUB) + ")/"
    paths = [path]
    if path.startswith("library/"):
        paths.append(path.removeprefix("library/"))
    first = path.split("/", 1)[0]
    # without a domain: only when the first component cannot be read as one (splitDockerDomain)
    bare = "." not in first and first != "localhost"
    alternatives = [hub + _literal(p) for p in paths] + ([_literal(p) for p in paths] if bare else [])
    return "(?:" + "|".join(alternatives) + ")"


def cel_pattern(repositories: list[str]) -> str:
    """The RE2 pattern matching exactly the references whose :func:`identity` is in ``repositories``
    (each already normalised by :func:`repository`)."""
    names = "|".join(_repository_re(r) for r in sorted(set(repositories)))
    return f"^(?:{names})(?::{_TAG_RE}(?:@{_DIGEST_RE})?|@{_LOWER_DIGEST_RE})?$"


def cel_matches(variable: str, repositories: list[str]) -> str:
    """The CEL fragment ``<variable>.matches('<pattern>')`` for base/webhook."""
    return f"{variable}.matches('{cel_pattern(repositories)}')"


# --- the one image-tag rule: does this reference name one build? -----------------------------------
# A digest names one build. A tag names whatever was pushed under it last; a release tag is pushed
# once by convention, a branch-like tag on every build. The rule refuses only the tags that are
# certainly moving, so every real release spelling passes (v7.0, 25.01-py3, pytorch2.5.1,
# py311-cuda121-torch241): a tag is moving when it is missing (the runtime pulls ``latest``), a
# bare major line (``1``, ``v2``: each minor release moves it), a release branch
# (``release-0.19``), or one of its words (split at ``.``, ``-``, ``_``, any case) is a moving name,
# unless it also carries a commit (7 to 40 hexadecimal digits with a digit and a letter) or a date
# (``main-93c5489``, ``nightly-20261201`` name one build).
MOVING_WORDS = frozenset(
    [
        "latest",
        "stable",
        "edge",
        "nightly",
        "main",
        "master",
        "dev",
        "develop",
        "development",
        "head",
        "trunk",
        "snapshot",
        "canary",
        "unstable",
        "testing",
        "rolling",
        "current",
        "next",
    ]
)
_WORD_SPLIT = re.compile(r"[._-]")
_MAJOR_LINE = re.compile(r"^[vV]?[0-9]+$")
_RELEASE_BRANCH = re.compile(r"^(?:release|rel|branch)[-_][vV]?[0-9]+(?:[.][0-9]+)?$", re.IGNORECASE)
_COMMIT = re.compile(r"^(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}$")
_DATE = re.compile(r"^20[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])(?:[0-9]{2,6})?$")


def floating(image: object) -> str | None:
    """Why ``image`` may change under the same reference, or None when it names one build (a digest,
    or a fixed release tag). The message completes "image X ..."."""
    ref = parse_image(image)
    if ref is None:
        return "is not a valid image reference"
    if ref.digest is not None:
        return None
    tag = ref.tag
    if tag is None:
        return "has no tag, so the runtime pulls latest, which moves with every push"
    words = _WORD_SPLIT.split(tag)
    if any(_COMMIT.match(w) or _DATE.match(w) for w in words):
        return None
    if _MAJOR_LINE.match(tag):
        return f"uses the tag {tag}, a major-version line that every release of that line moves"
    if _RELEASE_BRANCH.match(tag):
        return f"uses the tag {tag}, a release branch that every build of that branch moves"
    moving = next((w for w in words if w.lower() in MOVING_WORDS), None)
    if moving is not None:
        return f"uses the tag {tag}, a branch-like tag ({moving}) that moves when it is pushed again"
    return None


FLOATING_FIX = "pin a release tag (such as v1.2.3) or a digest (@sha256:...) so every node runs the same image"

"""Image references: the grammar (checked against distribution/reference's own regular expressions,
run on RE2), the identity rule, its CEL pattern, and linear time on hostile strings."""

from __future__ import annotations

import time

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.contract.image_cases import CASES, HUB, HUB_CASES, SHA256, TRAINER
from trainyard.contract.images import RepositoryError, cel_pattern, identity, parse_image, repository

# --- an oracle: distribution/reference@v0.6.0 regexp.go and normalize.go, ported as written ----------
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_COMPONENT}(?:\.{_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_REMOTE = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}"
REFERENCE = re2.compile(rf"^((?:({_DOMAIN})/)?({_REMOTE}))(?::({_TAG}))?(?:@({_DIGEST}))?$")


def distribution(s: str) -> tuple[str, str, str | None, str | None] | None:
    """ParseNormalizedNamed, then the parts: (domain, path, tag, digest), or None."""
    if re2.fullmatch(r"[a-f0-9]{64}", s):
        return None
    first, slash, rest = s.partition("/")  # splitDockerDomain
    if not slash:
        domain, remainder = "docker.io", "library/" + s
    elif first == "localhost" or "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    else:
        domain, remainder = "docker.io", s
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in remainder.split(":", 1)[0].split("@", 1)[0]:
        remainder = "library/" + remainder
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        return None
    m = REFERENCE.fullmatch(f"{domain}/{remainder}")
    if m is None or len(m.group(3)) > 255:
        return None
    if m.group(2) is None:
        # splitDockerDomain took the first component for a domain ('.' in it), but it is none
        # ("0_0.0/0"): Parse reads it back into the path and the reference names no registry at
        # all, not Docker Hub either. No registry to pull from: trainyard refuses it.
        return None
    return m.group(2), m.group(3), m.group(4), m.group(5)


def normalised(parts):
    """What trainyard adds on top: host in lower case, no :443, the Docker Hub hosts folded."""
    domain, path, tag, digest = parts
    if domain.startswith("["):
        end = domain.index("]") + 1
        host, colon, port = domain[:end], domain[end : end + 1], domain[end + 1 :]
    else:
        host, colon, port = domain.partition(":")
    port = port.lstrip("0") or "0"
    domain = host.lower() + ("" if not colon or port == "443" else f":{port}")
    if domain in ("index.docker.io", "registry-1.docker.io"):
        domain = "docker.io"
    if domain == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return domain, path, tag, digest


REFERENCE_TEXT = st.text(alphabet="abcAB019.-_:/@+", max_size=24)


@settings(max_examples=3000, deadline=None)
@given(REFERENCE_TEXT)
def test_the_grammar_is_distributions(s):
    expected = distribution(s)
    got = parse_image(s)
    if expected is None:
        assert got is None, s
    else:
        assert got is not None, s
        assert (got.domain, got.path, got.tag, got.digest) == normalised(expected), s


@settings(max_examples=500, deadline=None)
@given(
    st.builds(
        lambda host, port, path, tag, digest: f"{host}{port}/{path}{tag}{digest}",
        st.sampled_from(["registry.example.com", "Registry.Example.COM", "localhost", "[::1]", "10.0.0.1", "a-b.c"]),
        st.sampled_from(["", ":443", ":0443", ":5000", ":"]),
        st.sampled_from(["ml/trainer", "a__b/c--d", "a.b_c", "x/y/z", "A/b", "a..b"]),
        st.sampled_from(["", ":v1", ":1.2_3-rc", ":-x"]),
        st.sampled_from(["", "@" + SHA256, "@sha256+b64u.x:" + "F" * 32, "@sha256:short"]),
    )
)
def test_well_formed_pieces_agree_with_distribution(s):
    expected = distribution(s)
    got = parse_image(s)
    assert (got is None) == (expected is None), s
    if got is not None:
        assert (got.domain, got.path, got.tag, got.digest) == normalised(expected)


@pytest.mark.parametrize(("image", "trainer"), CASES + [(i, t) for i, t in HUB_CASES])
def test_identity_table(image, trainer):
    expected = HUB if (image, trainer) in HUB_CASES else TRAINER
    assert (identity(image) == expected) is trainer


@pytest.mark.parametrize(("image", "trainer"), CASES)
def test_the_cel_pattern_is_the_identity_rule(image, trainer):
    assert bool(re2.search(cel_pattern([TRAINER]), image)) is trainer


@pytest.mark.parametrize(("image", "trainer"), HUB_CASES)
def test_the_cel_pattern_for_a_docker_hub_repository(image, trainer):
    assert bool(re2.search(cel_pattern([HUB]), image)) is trainer


SPELLINGS = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(
        ["", "docker.io/", "Docker.IO:443/", "index.docker.io/", "registry.example.com", "REGISTRY.example.COM"]
    ),
    st.sampled_from(["", ":443", ":0443", ":00443", ":4430", ":", "/"]),
    st.sampled_from(["", "/", "library/", "ml/"]),
    st.sampled_from(["trainer", "Trainer", "trainers", "trainer/x", "ml/trainer"]),
    st.sampled_from(["", ":1", ":", ":-", "@" + SHA256, ":1@" + SHA256, "@sha256:1"]),
    st.sampled_from(["", "\n", " ", "x"]),
)


@settings(max_examples=2000, deadline=None)
@given(SPELLINGS)
def test_pattern_and_identity_agree_on_every_spelling(s):
    for repo in (TRAINER, HUB):
        assert bool(re2.search(cel_pattern([repo]), s)) == (identity(s) == repo), (s, repo)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="registry.examplcom/:@4TRAINER-_mlt3", max_size=48))
def test_pattern_and_identity_agree_on_noise(s):
    assert bool(re2.search(cel_pattern([TRAINER]), s)) == (identity(s) == TRAINER), s


def test_a_pattern_for_several_repositories_matches_each():
    pattern = cel_pattern([TRAINER, HUB, "localhost:5000/x"])
    assert all(re2.search(pattern, s) for s in ("trainer:1", "REGISTRY.example.com/ml/trainer", "localhost:05000/x"))
    assert not re2.search(pattern, "localhost/x")


def test_the_pattern_needs_no_escaping_in_cel_or_yaml():
    pattern = cel_pattern([TRAINER, HUB])
    assert "\\" not in pattern and "'" not in pattern and '"' not in pattern and " " not in pattern


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("registry.example.com/ml/trainer", TRAINER),
        ("REGISTRY.example.com:443/ml/trainer", TRAINER),
        ("trainer", HUB),
        ("localhost/x", "localhost/x"),
    ],
)
def test_repositories_as_profiles_name_them(text, normal):
    assert repository(text) == normal


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("registry.example.com/ml/trainer:1", "without tag or digest"),
        (f"registry.example.com/ml/trainer@{SHA256}", "without tag or digest"),
        ("Registry/ml/trainer", "has no '.'"),
        ("[::1]:5000/ml/trainer", "IPv6"),
        ("not a reference", "not an image repository"),
    ],
)
def test_repositories_that_cannot_be_matched_are_refused(text, why):
    with pytest.raises(RepositoryError, match=why):
        repository(text)


# --- hostile strings: linear time --------------------------------------------------------------------

MiB = 1 << 20
HOSTILE = {
    "the 18.9 s string": "A" + "a" * 26 + "!/x:1",
    "a 40-letter domain that fails late": "A" + "a" * 40 + "!/x:1",
    "dotted domain": "a." * (MiB // 2) + "/x",
    "dashes in a domain": "A" + "a-" * (MiB // 2) + "!/x",
    "one long path component": "a" * MiB + "!",
    "separators in a path": "x/" + "a-" * (MiB // 2) + "!",
    "long tag": "x:" + "a" * MiB,
    "long digest": "x@sha256:" + "a" * MiB,
    "long digest algorithm": "x@" + "a+" * (MiB // 2) + "a:" + "0" * 64,
    "algorithm that fails at the end": "x@" + "a+" * (MiB // 2) + "+:" + "0" * 64,
    "many slashes": "/" * MiB,
    "many colons": ":" * MiB,
    "many at signs": "@" * MiB,
    "ipv6 host": "[" + "0:" * (MiB // 2) + "/x",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_strings_are_parsed_in_linear_time(name):
    text = HOSTILE[name]
    start = time.perf_counter()
    parse_image(text)
    elapsed = time.perf_counter() - start
    # about 5 ms per MiB here (90 ms for the digest algorithm); the replaced parser needed 18.9 s
    # for the first string, 27 characters long
    assert elapsed < 2.0, f"{name}: {elapsed:.2f} s for {len(text):,} characters"


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=64).map(lambda s: s * 2000))
def test_fuzzed_long_strings_never_raise(s):
    ref = parse_image(s)
    assert ref is None or ref.repository == identity(s)


def test_non_strings_are_no_references():
    assert parse_image(None) is None and parse_image(3) is None and identity(["x"]) is None

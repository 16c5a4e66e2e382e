"""Which kustomization entries kustomize fetches: the port of its rule (remote_refs) against
kustomize's own test table and against the real kustomize binary, run with no network: ``git`` on
its PATH is a stand-in that records what kustomize asks of it and fails the fetch, and HTTP goes to a
local proxy that records each request and answers none. Each entry also exists as a local folder
holding a kustomization, so a build that succeeds shows that kustomize read the local folder."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainyard.contract.errors import UserError
from trainyard.repo.model import kustomize, remote_refs

# sigs.k8s.io/kustomize/api@v0.21.3 internal/git/repospec_test.go TestNewRepoSpecFromUrl_Smoke (a
# sample: input -> host, repo path, path in the repository, ref)
UPSTREAM_SMOKE = [
    ("https://git-codecommit.us-east-2.amazonaws.com/someorg/somerepo/somedir?ref=testbranch",
     ("https://git-codecommit.us-east-2.amazonaws.com/", "someorg/somerepo", "somedir", "testbranch")),
    ("http://github.com/someorg/somerepo/somedir", ("https://github.com/", "someorg/somerepo", "somedir", "")),
    ("git@github.com:someorg/somerepo/somedir", ("git@github.com:", "someorg/somerepo", "somedir", "")),
    ("git@gitlab2.sqtools.ru:infra/kubernetes/thanos-base.git?ref=v0.1.0",
     ("git@gitlab2.sqtools.ru:", "infra/kubernetes/thanos-base.git", "", "v0.1.0")),
    ("ssh://git@gitlab.com/org/repo.git//path?ref=v1", ("ssh://git@gitlab.com/", "org/repo.git", "path", "v1")),
    ("git::https://gitlab.com/org/repo", ("https://gitlab.com/", "org/repo", "", "")),
    ("file:///a/b/c/someRepo.git/somepath?ref=someBranch",
     ("file://", "/a/b/c/someRepo.git", "somepath", "someBranch")),
    ("https://username@dev.azure.com/org/project/_git/repo/path/to/kustomization/root",
     ("https://username@dev.azure.com/", "org/project/_git/repo", "path/to/kustomization/root", "")),
    ("gitHub.com/org/repo", ("https://github.com/", "org/repo", "", "")),
    ("ssh://git.example.com:7999/org/repo", ("ssh://git.example.com:7999/", "org/repo", "", "")),
]  # fmt: skip
# TestNewRepoSpecFromUrlErrors: not a repository (kustomize looks for a local folder)
UPSTREAM_ERRORS = [
    "/tmp", "../../tmp", "src/github.com/org/repo/path", "iauhsdiuashduas", "htxxxtp://github.com/",
    "ssh://git.example.com", "git::___", "https://host?ref=group/version/minor_version",
    "https://github.com/org/repo.git//path/../../exits/repo", "github.com!org/repo.git//path", "gh:org/repo",
    "https://github.com/thisisa404.yaml", "file:////tmp//path/to/whatever", "git@scp://github.com/org/repo.git//path",
]  # fmt: skip


@pytest.mark.parametrize(("entry", "want"), UPSTREAM_SMOKE)
def test_the_port_reads_kustomizes_own_examples_as_it_does(entry, want):
    spec = remote_refs.repo_spec(entry)
    assert spec is not None
    assert (spec.host, spec.repo_path, spec.kust_root, spec.ref) == want
    assert remote_refs.is_remote(entry)


@pytest.mark.parametrize("entry", UPSTREAM_ERRORS)
def test_what_kustomize_does_not_parse_as_a_repository_is_not_one(entry):
    assert remote_refs.repo_spec(entry) is None


@pytest.mark.parametrize(
    "entry",
    ["job.yaml", "sub/dir", "../../../../base/jobs/trainjob", "a:b/c", "user@host", "ftp://x/y/z", "", "  "],
)
def test_local_paths_are_not_remote(entry):
    assert not remote_refs.is_remote(entry)


@pytest.mark.parametrize(
    "entry",
    ["HTTPS://example.com/x.yaml", "hTTp://example.com/x.yaml", "https:x.yaml", " https://example.com/x.yaml"],
)
def test_urls_in_any_case_are_downloaded(entry):
    assert remote_refs.is_remote(entry) and remote_refs.describe(entry) == "a URL it downloads"


# ---------------------------------------------------------------------------------------------
# the real kustomize, offline


@dataclass
class Outcome:
    git: list[str]  # the git commands kustomize ran
    http: bool  # it tried to download the entry
    local: bool  # it built the local folder of that path
    stderr: str

    @property
    def remote(self) -> bool:
        return bool(self.git) or self.http


class _Proxy:
    """An HTTP proxy on a loopback port that records the first line of each request and closes the
    connection unanswered: kustomize's download fails, and the attempt is known even where kustomize
    falls back to a local folder and prints nothing."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.requests.append(conn.recv(4096).decode("latin-1").split("\r\n", 1)[0])
                except OSError:
                    self.requests.append("?")


@dataclass
class Offline:
    home: Path  # bin/git: the stand-in
    proxy: _Proxy


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> Iterator[Offline]:
    try:
        kustomize.command()
    except UserError as exc:
        pytest.fail(f"these tests need the real kustomize: {exc}")
    home = tmp_path_factory.mktemp("offline")
    (home / "bin").mkdir()
    git = home / "bin" / "git"
    git.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' "$*" >> "$GITLOG"\n'
        'case "$1" in init|remote) exit 0;; esac\necho "offline: no fetch" >&2\nexit 1\n'
    )
    git.chmod(0o755)
    proxy = _Proxy()
    yield Offline(home, proxy)
    proxy.server.close()


def run_kustomize(offline: Offline, work: Path, entry: str) -> Outcome:
    """``kustomize build`` of a kustomization whose one resource is ``entry``, where a local folder of
    that path holds a kustomization that generates the ConfigMap ``local``."""
    folder = work / "k"
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").write_text(f"resources:\n- {json.dumps(entry)}\n")
    shadow = folder / entry
    shadow.mkdir(parents=True, exist_ok=True)
    (shadow / "kustomization.yaml").write_text("configMapGenerator:\n- name: local\n  literals: [a=b]\n")
    (work / "tmp").mkdir()
    home, proxy = offline.home, offline.proxy
    before = len(proxy.requests)
    env = {
        "PATH": f"{home / 'bin'}:/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work / "tmp"),
        "GITLOG": str(work / "git.log"),
        "HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}",
        "HTTP_PROXY": f"http://127.0.0.1:{proxy.port}",
    }
    proc = subprocess.run(
        [kustomize.command()[0], "build", str(folder)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    log = work / "git.log"
    return Outcome(
        git=log.read_text().splitlines() if log.exists() else [],
        http=len(proxy.requests) > before,
        local=proc.returncode == 0 and "name: local-" in proc.stdout,
        stderr=proc.stderr,
    )


def _agrees(entry: str, out: Outcome) -> None:
    assert out.remote or out.local, out.stderr
    assert remote_refs.is_remote(entry) == out.remote, (entry, out)
    spec = remote_refs.repo_spec(entry)
    if out.git:  # the repository and ref kustomize fetches are the ones the port names
        assert spec is not None, (entry, out.git)
        assert out.git[1:3] == [
            f"remote add origin {spec.clone_spec}",
            f"fetch --depth=1 {spec.clone_spec} {spec.ref or 'HEAD'}",
        ]
    else:
        assert spec is None, entry


SPELLINGS = [
    "GitHub.com/org/repo//deploy?ref=v1",  # host in another case
    "gİthub.com/org/repo",  # Go lowers İ to i
    "me@example.com:org/repo",  # scp-like, with a user
    "git@EXAMPLE.com:org/repo.git//sub",
    "GIT::https://example.com/org/repo",  # git:: in any case
    "Git::git@github.com:org/repo",
    "SSH://git@example.com:2222/org/repo?ref=main",  # a port
    "HtTpS://example.com/org/repo.git",  # downloaded first, then cloned
    "https://dev.example.com/org/project/_git/repo/path",
    "github.com:org/repo?version=v2&timeout=5",
]


@pytest.mark.parametrize("entry", SPELLINGS)
def test_kustomize_clones_what_the_port_calls_remote_even_with_a_local_folder_there(offline, tmp_path, entry):
    _agrees(entry, run_kustomize(offline, tmp_path, entry))


@pytest.mark.parametrize("entry", ["deploy", "sub/dir", "user@host", "a:b/c", "github.com.local/org"])
def test_kustomize_reads_the_local_folder_where_the_port_says_local(offline, tmp_path, entry):
    out = run_kustomize(offline, tmp_path, entry)
    assert out.local and not out.remote and not remote_refs.is_remote(entry), out


def _cased(text: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(text), max_size=len(text)).map(
        lambda flips: "".join(c.upper() if f else c for c, f in zip(text, flips, strict=True))
    )


_SCHEME = st.sampled_from(["", "https://", "http://", "ssh://", "git::https://", "git::", "git::ssh://"]).flatmap(
    _cased
)
_USER = st.sampled_from(["", "git@", "me@", "org-1@"]).flatmap(_cased)
_HOST = st.sampled_from(["github.com", "example.com", "gitlab.example.org", "example.com:2222", "10.1.2.3"]).flatmap(
    _cased
)
_PATH = st.sampled_from(
    ["org/repo", "org/repo.git", "org/repo//deploy/x", "org/repo.git/deploy", "org/p/_git/repo/sub", "org", "org/r/s"]
)
_QUERY = st.sampled_from(["", "?ref=v1", "?ref=main&timeout=10", "?version=v2", "?submodules=false&ref=x"])


@st.composite
def spellings(draw) -> str:
    scheme, user, host = draw(_SCHEME), draw(_USER), draw(_HOST)
    separator = draw(st.sampled_from(["/", ":"]))
    return f"{scheme}{user}{host}{separator}{draw(_PATH)}{draw(_QUERY)}"


@given(entry=spellings())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_port_agrees_with_kustomize_on_remote_spellings(offline, tmp_path_factory, entry):
    work = tmp_path_factory.mktemp("spelling")
    out = run_kustomize(offline, work, entry)
    if not remote_refs.is_remote(entry):
        assert not out.remote and out.local, (entry, out)
        return
    assert out.remote or remote_refs.url_scheme(entry) in ("http", "https"), (entry, out)
    if not out.remote:
        # the one place the port is wider: an http(s) entry Go's url.Parse rejects (a port that is not a
        # number) that does not parse as a repository either; kustomize reads a local path then
        assert remote_refs.repo_spec(entry) is None and ":" in entry.split("//", 1)[1].split("/")[0], (entry, out)
        return
    _agrees(entry, out)


def test_no_git_or_network_escapes_the_stand_ins(offline, tmp_path):
    """The stand-ins are what kustomize ran: the proxy saw the download, its error names the fake git."""
    out = run_kustomize(offline, tmp_path, "https://example.com/org/repo")
    assert out.http and out.git and "offline: no fetch" in out.stderr
    assert offline.proxy.requests[-1].startswith("CONNECT example.com:443 ")

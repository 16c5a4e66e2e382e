"""The upstream sources of this repository's Applications, served under their own URLs to Argo
CD's repo-server on a local cluster, from the pinned releases (trainyard/repo/model/releases.py).

Argo CD fetches each source by its URL (argo-cd@v3.6.2:reposerver/repository/repository.go and
util/helm/cmd.go), and here nothing beyond loopback answers. This server answers for the hosts the
pinned releases name, with what each release holds, as trainyard's offline render reads it:

- a git tag (``https://github.com/OWNER/REPO.git``): go-git lists the refs, then ``git fetch``
  runs; both are answered by ``git http-backend`` (git's own smart-HTTP server) from a bare
  repository with one commit per pinned tag of that repository, its tree the tag's Go module;
- a file a kustomization lists by URL: ``raw.githubusercontent.com/OWNER/REPO/TAG/PATH`` from the
  tag's tree, ``github.com/OWNER/REPO/releases/download/TAG/NAME`` built as the release builds it;
- a chart repository (``helm pull --repo URL CHART --version V``): ``index.yaml`` written by
  ``helm repo index`` over the chart packaged as its release packages it;
- an OCI chart (``helm pull oci://HOST/PATH/CHART --version V``): the pull endpoints of the OCI
  distribution API (opencontainers/distribution-spec v1.1.0 spec.md: ``/v2/``, manifests by tag or
  digest, blobs, tags/list) serving the manifest ``helm push`` writes: a config of media type
  ``application/vnd.cncf.helm.config.v1+json`` (the chart's metadata) and one layer
  ``application/vnd.cncf.helm.chart.content.v1.tar+gzip`` (helm/helm@v4: pkg/registry/constants.go).

One HTTPS listener on port 443 of a loopback address, one certificate for every host name, issued
by a CA of the cluster's own. The repo-server reaches it in a mount namespace of its own, where
``/etc/hosts`` sends those names to that address (argocd_daemons.py). Every other URL, and every
other method than GET and HEAD (and git's upload-pack POST), is refused with 404 or 405 naming it.
Content is built on first request and kept in the ``--cache`` folder: :func:`cache_dir`, one folder
on this machine shared by every local cluster and keyed by what decides the content, so a cluster
after the first serves what an earlier one built (a lock file per item keeps two servers from
building one item twice). A git repository is packed once built: every fetch of a loose repository
compresses each object again (5 s a clone of kubeflow/trainer's two tags on 2 cores, 1.5 s packed).

Run as ``python -m trainyard.cluster.sources --address A --cert C --key K --cache DIR``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import ipaddress
import json
import random
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from cryptography.hazmat.primitives import serialization

from trainyard.cluster import components, pki, services
from trainyard.contract.files import write_private
from trainyard.contract.images import DEFAULT_PORT
from trainyard.repo.model import releases, upstream
from webhook import certs

PORT = int(DEFAULT_PORT)  # HTTPS's port: the URLs name none
MAX_BODY = 16 * 2**20  # an upload-pack request (the wants and haves of one fetch)
# helm/helm@v4 pkg/registry/constants.go
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
TLS = "tls"  # the serving pair's name in the endpoint's folder


def hosts() -> list[str]:
    """Every host name a pinned release is fetched from."""
    names = {"github.com", "raw.githubusercontent.com"}
    for r in releases.RELEASES:
        if r.chart:  # an https chart repository, or an OCI one written without oci://
            repo = r.chart.repo.removeprefix("oci://")
            names.add((urlsplit(repo).hostname or "") if "://" in repo else repo.split("/", 1)[0])
    return sorted(n for n in names if n)


FORMAT = "trainyard-sources/1"


def cache_dir() -> Path:
    """Where this machine keeps built sources (``$TRAINYARD_CACHE/sources/KEY``), KEY a hash of this
    module and of what decides every upstream build (upstream.fingerprint): a changed pin, tool or
    recipe makes a new folder, never a stale answer."""
    h = hashlib.sha256(f"{FORMAT}\0{upstream.fingerprint()}\0".encode() + Path(__file__).read_bytes())
    return components.cache_root() / "sources" / h.hexdigest()[:16]


class Sources:
    """What each URL answers, built from the pinned releases on first request."""

    def __init__(self, cache: Path, log: Callable[[str], None] = print) -> None:
        self.cache = cache
        self.log = log
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._pushed: dict[str, tuple[dict[str, bytes], bytes]] = {}  # release key -> OCI blobs, manifest

    def _once(self, key: str, path: Path, make: Callable[[Path], None]) -> Path:
        """``path``, made by ``make`` the first time (under a lock per key, in this process and on the
        folder for the others; written aside then moved)."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if path.exists():
                return path
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.parent / f".{path.name}.lock", "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                if not path.exists():  # another server may have built it while this one waited
                    self.log(f"building {key}")
                    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
                        made = Path(tmp) / path.name
                        make(made)
                        made.rename(path)
        return path

    # --- git ---------------------------------------------------------------------------------

    def git_root(self) -> Path:
        return self.cache / "git"

    def git_repository(self, slug: str) -> Path | None:
        """The bare repository ``OWNER/REPO.git``: one commit per pinned tag, tagged."""
        tags = sorted(releases.of_repo(f"https://github.com/{slug}"), key=lambda r: releases.version_key(r.git_tag))
        if not tags:
            return None

        def make(bare: Path) -> None:
            git = ["git", "-c", "user.name=trainyard", "-c", "user.email=trainyard@localhost", f"--git-dir={bare}"]
            subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True, capture_output=True)
            env = {"GIT_INDEX_FILE": str(bare / "index.build"), "PATH": "/usr/bin:/bin"}

            def run(tree_dir: Path, *args: str) -> str:
                argv = [*git, f"--work-tree={tree_dir}", *args]
                return subprocess.run(argv, cwd=tree_dir, check=True, capture_output=True, text=True, env=env).stdout

            parent: list[str] = []
            for r in tags:
                tree_dir = upstream.release_tree(r)  # a read-only module folder: git reads it, writes nothing there
                run(tree_dir, "read-tree", "--empty")
                run(tree_dir, "add", "-A", "-f", ".")
                tree = run(tree_dir, "write-tree").strip()
                commit = run(tree_dir, "commit-tree", tree, *parent, "-m", f"{r.module}@{r.version}").strip()
                run(tree_dir, "tag", r.git_tag, commit)
                parent = ["-p", commit]
            subprocess.run([*git, "update-ref", "refs/heads/main", parent[1]], check=True, capture_output=True)
            (bare / "index.build").unlink(missing_ok=True)
            subprocess.run([*git, "repack", "-a", "-d", "-q"], check=True, capture_output=True)

        return self._once(f"git {slug}", self.git_root() / f"{slug}.git", make)

    # --- files of a tag, release assets ------------------------------------------------------

    def raw_file(self, owner: str, name: str, tag: str, path: str) -> Path | None:
        release = releases.by_git(f"https://github.com/{owner}/{name}", tag)
        if release is None:
            return None
        root = upstream.release_tree(release).resolve()
        found = (root / path).resolve()
        return found if found.is_file() and root in found.parents else None

    def asset(self, owner: str, name: str, tag: str, file: str) -> Path | None:
        release = releases.by_git(f"https://github.com/{owner}/{name}", tag)
        asset = next((a for a in release.assets if a.name == file), None) if release else None
        if release is None or asset is None:
            return None
        out = self.cache / "assets" / owner / name / tag / file
        return self._once(f"asset {owner}/{name}/{tag}/{file}", out,
                          lambda p: p.write_text(upstream.build_asset(release, asset), encoding="utf-8"))  # fmt: skip

    # --- charts ------------------------------------------------------------------------------

    def chart_file(self, release: releases.Release) -> Path:
        chart = release.chart
        assert chart is not None
        out = self.cache / "charts" / release.key / f"{chart.name}-{chart.version}.tgz"

        # helm package names the file <name>-<version>.tgz, the name asked for, in the build folder
        return self._once(f"chart {release.key}", out, lambda p: upstream.package_chart(release, chart, p.parent))

    def chart_index(self, repo: str) -> Path | None:
        """``index.yaml`` of chart repository ``repo`` (an https URL), by ``helm repo index``."""
        found = releases.of_chart_repo(repo)
        if not found:
            return None
        key = hashlib.sha256(repo.encode()).hexdigest()[:12]

        def make(folder: Path) -> None:
            folder.mkdir()
            for r in found:
                tgz = self.chart_file(r)
                shutil.copyfile(tgz, folder / tgz.name)
            subprocess.run([upstream.helm_command(), "repo", "index", str(folder), "--url", repo.rstrip("/")],
                           check=True, capture_output=True)  # fmt: skip

        return self._once(f"index {repo}", self.cache / "index" / key, make) / "index.yaml"

    def chart_tgz(self, repo: str, file: str) -> Path | None:
        for r in releases.of_chart_repo(repo):
            assert r.chart is not None
            if file == f"{r.chart.name}-{r.chart.version}.tgz":
                return self.chart_file(r)
        return None

    # --- OCI ---------------------------------------------------------------------------------

    def oci(self, host: str, name: str) -> tuple[releases.Release, dict[str, bytes], bytes] | None:
        """The chart pushed as ``host/name``: (release, blobs by digest, manifest)."""
        repo, _, chart_name = f"{host}/{name}".rpartition("/")
        for r in releases.of_chart_repo(repo):
            assert r.chart is not None
            if r.chart.name == chart_name and "://" not in r.chart.repo:
                with self._guard:
                    built = self._pushed.get(r.key)
                if built is None:
                    built = self._push(r)
                    with self._guard:
                        self._pushed[r.key] = built
                return r, *built
        return None

    def _push(self, r: releases.Release) -> tuple[dict[str, bytes], bytes]:
        """The blobs and manifest ``helm push`` would write for release ``r``'s chart."""
        assert r.chart is not None
        tgz = self.chart_file(r)
        layer = tgz.read_bytes()
        with tarfile.open(tgz) as tar:
            member = tar.extractfile(f"{r.chart.name}/Chart.yaml")
            meta = yaml.safe_load(member.read()) if member else {}
        config = json.dumps(meta, sort_keys=True).encode()
        blobs = {_digest(config): config, _digest(layer): layer}
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": HELM_CONFIG, "digest": _digest(config), "size": len(config)},
                "layers": [{"mediaType": HELM_CHART, "digest": _digest(layer), "size": len(layer)}],
            }
        ).encode()
        return blobs, manifest


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Handler(BaseHTTPRequestHandler):
    sources: Sources
    server_version = "trainyard-sources"

    def log_message(self, format: str, *args) -> None:
        self.sources.log(f"{self.headers.get('Host', '-')} {format % args}")

    def _host(self) -> str:
        return (self.headers.get("Host") or "").rsplit(":", 1)[0].lower()

    def _send(self, status: int, body: bytes | Path, content_type: str, headers: dict[str, str] | None = None) -> None:
        data = body.read_bytes() if isinstance(body, Path) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, status: int = 404) -> None:
        url = f"https://{self._host()}{self.path}"
        what = "not a source of a pinned release" if status == 404 else f"{self.command} is not served"
        self._send(status, f"{url}: {what} (trainyard/repo/model/releases.py)\n".encode(), "text/plain")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        try:
            self._route()
        except (subprocess.CalledProcessError, OSError, upstream.UpstreamError) as exc:
            said = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else str(exc)
            self.sources.log(f"failed: {self.path}: {said}")
            self._send(500, f"{self.path}: {said}\n".encode(), "text/plain")

    def _not_served(self) -> None:
        self._refuse(405)

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _not_served  # a read-only mirror

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if self._host() == "github.com" and path.endswith("/git-upload-pack"):
            self.do_GET()
        else:
            self._refuse(405)

    def _route(self) -> None:
        host, parts = self._host(), urlsplit(self.path)
        path = parts.path
        if host == "github.com":
            m = re.fullmatch(rf"/({SEGMENT}/{SEGMENT}?)(?:\.git)?/(info/refs|git-upload-pack)", path)
            if m and self.sources.git_repository(m[1]) is not None:
                return self._git(f"/{m[1]}.git/{m[2]}", parts.query)
            m = re.fullmatch(rf"/({SEGMENT})/({SEGMENT})/releases/download/({SEGMENT})/({SEGMENT})", path)
            if m and self.command != "POST" and (found := self.sources.asset(*m.groups())) is not None:
                return self._send(200, found, "application/octet-stream")
            return self._refuse()
        if self.command == "POST":
            return self._refuse(405)
        if host == "raw.githubusercontent.com":
            m = re.fullmatch(rf"/({SEGMENT})/({SEGMENT})/({SEGMENT})/((?:{SEGMENT}/)*{SEGMENT})", path)
            if m and (found := self.sources.raw_file(*m.groups())) is not None:
                return self._send(200, found, "text/plain; charset=utf-8")
            return self._refuse()
        if path == "/v2/" or path.startswith("/v2/"):
            return self._oci(host, path)
        folder, _, file = path.rpartition("/")
        repo = f"https://{host}{folder}"
        if file == "index.yaml" and (index := self.sources.chart_index(repo)) is not None:
            return self._send(200, index, "application/x-yaml")
        if file.endswith(".tgz") and (tgz := self.sources.chart_tgz(repo, file)) is not None:
            return self._send(200, tgz, "application/gzip")
        return self._refuse()

    def _oci(self, host: str, path: str) -> None:
        api = {"Docker-Distribution-API-Version": "registry/2.0"}
        if path == "/v2/":
            return self._send(200, b"{}", "application/json", api)
        m = re.fullmatch(rf"/v2/((?:{SEGMENT}/)*{SEGMENT})/(manifests|blobs|tags)/([A-Za-z0-9._:+-]+)", path)
        found = self.sources.oci(host, m[1]) if m else None
        if m is None or found is None:
            return self._refuse()
        release, blobs, manifest = found
        what, ref = m[2], m[3]
        assert release.chart is not None
        tag = release.chart.version.replace("+", "_")  # OCI tags cannot hold '+' (helm pkg/registry)
        if what == "tags" and ref == "list":
            return self._send(200, json.dumps({"name": m[1], "tags": [tag]}).encode(), "application/json", api)
        if what == "manifests" and ref in (tag, _digest(manifest)):
            return self._send(200, manifest, OCI_MANIFEST, {**api, "Docker-Content-Digest": _digest(manifest)})
        if what == "blobs" and ref in blobs:
            return self._send(200, blobs[ref], "application/octet-stream", {**api, "Docker-Content-Digest": ref})
        return self._refuse()

    def _git(self, path_info: str, query: str) -> None:
        """One request through ``git http-backend`` (a CGI program: environment in, headers and
        body out; git's Documentation/git-http-backend.adoc)."""
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(413, b"request too large\n", "text/plain")
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.sources.git_root()),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path_info,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": self.client_address[0],
        }
        proc = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, timeout=300)
        head, _, out = proc.stdout.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers[key] = value.strip()
        if proc.returncode and status == 200:
            status, out = 500, proc.stderr
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@dataclass(frozen=True)
class Endpoint:
    """Where the sources listen and what a client needs to reach them under the hosts' names."""

    address: str
    folder: Path  # a PKI folder (trainyard/cluster/pki.py layout): ca.crt, tls.crt, tls.key, and hosts

    @property
    def ca(self) -> Path:
        return pki.Pki(self.folder).ca

    @property
    def cert(self) -> Path:
        return pki.Pki(self.folder).cert(TLS)

    @property
    def key(self) -> Path:
        return pki.Pki(self.folder).key(TLS)

    @property
    def hosts_file(self) -> Path:
        """An /etc/hosts for a client's mount namespace: loopback, and every source host at ``address``."""
        return self.folder / "hosts"


def prepare(folder: Path, days: int = 30) -> Endpoint:
    """A loopback address whose port 443 is free, a CA of its own, a certificate for every host of
    :func:`hosts` and that address, and the hosts file that sends the names there."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    rng = random.SystemRandom()
    for _ in range(16):  # 127.0.0.0/8 is loopback; one address per cluster keeps their port 443 apart
        address = f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
        with socket.socket() as probe:
            try:
                probe.bind((address, PORT))
                break
            except OSError:
                continue
    else:
        raise OSError(f"no loopback address with port {PORT} free")
    end = Endpoint(address, folder)
    ca = certs.new_ca(days)
    names = hosts()
    write_private(end.ca, ca[0].public_bytes(serialization.Encoding.PEM), 0o644)
    pki.write_pair(pki.Pki(folder), TLS, *certs.serving_certificate(ca, names, [ipaddress.ip_address(address)], days))
    services.write_hosts(end.hosts_file, dict.fromkeys(names, address))
    return end


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """One line, not a traceback: a client that hung up mid-answer (TLS or pipe errors)."""
        print(f"{client_address[0]}: connection ended: {sys.exc_info()[1]!r}", flush=True)


def serve(address: str, cert: Path, key: Path, cache: Path, *, port: int = PORT) -> ThreadingHTTPServer:
    """The server, bound and wrapped in TLS; call ``serve_forever`` on it."""
    Handler.sources = Sources(cache, log=lambda line: print(line, flush=True))
    server = Server((address, port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainyard.cluster.sources", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, type=ipaddress.ip_address, help="a loopback address to bind")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--cert", required=True, type=Path)
    parser.add_argument("--key", required=True, type=Path)
    parser.add_argument("--cache", required=True, type=Path, help="where built repositories and charts are kept")
    args = parser.parse_args(argv)
    if not args.address.is_loopback:
        parser.error(f"--address {args.address} is not a loopback address")
    server = serve(str(args.address), args.cert, args.key, args.cache, port=args.port)
    print(f"serving {', '.join(hosts())} on {args.address}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

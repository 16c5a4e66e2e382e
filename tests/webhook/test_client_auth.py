"""Only kube-apiserver calls the webhook: ``serve --client-ca`` (mutual TLS) and the client
certificate ``certs --client`` issues, over real TLS on real sockets."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import subprocess
import sys

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.webhook.conftest import POLICIES, ROOT, example
from tests.webhook.server_process import AtomicDir, Server, wait_for
from webhook.certs import client_certificate, generate, new_ca, write_client_certificate
from webhook.review import admission_review
from webhook.tls import CertStore

NOW = dt.datetime.now(dt.UTC)
TLS_VERSIONS = [pytest.param(ssl.TLSVersion.TLSv1_2, id="TLSv1.2"), pytest.param(ssl.TLSVersion.TLSv1_3, id="TLSv1.3")]


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def ca_certificate(not_before: dt.datetime, not_after: dt.datetime, ca: bool = True) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return pem(cert)


def context(server: Server, cert: tuple | None, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server.ca))
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def refused_at_handshake(server: Server, cert: tuple | None, version: ssl.TLSVersion) -> ssl.SSLError:
    """The TLS error a client meets, with not a byte of HTTP read. Under TLS 1.3 the client's
    side of the handshake completes before the server has checked its certificate, so the
    refusal arrives as the connection closing under the first read."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError) as refused,
        context(server, cert, version).wrap_socket(raw, server_hostname="localhost", suppress_ragged_eofs=False) as tls,
    ):
        data = tls.recv(1)
        raise AssertionError(f"the server answered {data!r} instead of refusing the handshake")
    return refused.value


def metric(server: Server, line_start: str) -> float:
    for line in httpx.get(f"http://127.0.0.1:{server.probe_port}/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric line starting with {line_start}")


def post_review(client: httpx.Client) -> httpx.Response:
    body = orjson.dumps(admission_review(example("pytorchjob-worker.yaml")))
    return client.post("/mutate", content=body, headers={"content-type": "application/json"})


@pytest.fixture
def mtls(tmp_path):
    """A server started with --client-ca on a kubelet-style volume holding the CA of
    ``certs --client``; a second CA with a client certificate of its own."""
    issued, other = tmp_path / "issued", tmp_path / "other"
    ca = generate(issued, client="kube-apiserver")
    generate(other, client="kube-apiserver")
    client_ca = AtomicDir(tmp_path / "client-ca")
    client_ca.write({"ca.crt": (issued / "ca.crt").read_bytes()})
    server = Server(
        POLICIES,
        issued,
        issued / "ca.crt",
        "roce",
        log=tmp_path / "server.log",
        extra_args=("--client-ca", str(client_ca.path / "ca.crt")),
        client_cert=(issued / "client.crt", issued / "client.key"),
    )
    yield server, issued, other, client_ca, ca
    assert server.stop() == 0, server.logs()


# --- the server ------------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("version", TLS_VERSIONS)
def test_a_client_with_a_certificate_from_the_client_ca_is_served(mtls, version):
    server, issued, *_ = mtls
    cert = (issued / "client.crt", issued / "client.key")
    with httpx.Client(base_url=server.base, verify=context(server, cert, version), timeout=10) as c:
        r = post_review(c)
        assert r.status_code == 200 and r.json()["response"]["patchType"] == "JSONPatch"
        assert c.get("/readyz").status_code == 200
    assert metric(server, 'trainyard_webhook_client_certificates_refused_total{why="missing"}') == 0


@pytest.mark.server
@pytest.mark.parametrize("version", TLS_VERSIONS)
def test_a_client_without_a_certificate_is_refused_at_the_handshake(mtls, version):
    server, *_ = mtls
    refused_at_handshake(server, None, version)
    with pytest.raises(httpx.TransportError):  # no HTTP status at all, not a 401 or 403
        httpx.post(f"{server.base}/mutate", content=b"{}", verify=context(server, None), timeout=10)
    wait_for(lambda: metric(server, 'trainyard_webhook_client_certificates_refused_total{why="missing"}') == 2)
    # said once in the log (then at most once a minute), naming the CA the client needs
    (line,) = wait_for(lambda: [x for x in server.logs().splitlines() if "without a trusted client certificate" in x])
    assert "missing" in line and "client-ca/ca.crt" in line and "AdmissionConfiguration" in line


@pytest.mark.server
@pytest.mark.parametrize("version", TLS_VERSIONS)
def test_a_certificate_from_another_ca_is_refused(mtls, version):
    server, issued, other, *_ = mtls
    refused_at_handshake(server, (other / "client.crt", other / "client.key"), version)
    # the trusted CA's serving certificate is no client certificate (ExtendedKeyUsage serverAuth only)
    refused_at_handshake(server, (issued / "tls.crt", issued / "tls.key"), version)
    wait_for(lambda: metric(server, 'trainyard_webhook_client_certificates_refused_total{why="untrusted"}') == 2)
    with server.client() as c:  # and kube-apiserver's is still served
        assert post_review(c).status_code == 200


@pytest.mark.server
def test_probes_need_no_client_certificate(mtls):
    """The kubelet presents no certificate: the probe port (plain HTTP) answers it."""
    server, *_ = mtls
    base = f"http://127.0.0.1:{server.probe_port}"
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{base}/readyz", timeout=10).json() == {"status": "ready"}


@pytest.mark.server
def test_the_client_ca_is_reloaded_and_a_bad_one_is_refused(mtls):
    server, issued, other, client_ca, _ = mtls
    ours, theirs = (issued / "client.crt", issued / "client.key"), (other / "client.crt", other / "client.key")
    client_ca.write({"ca.crt": (other / "ca.crt").read_bytes()})  # the CA changes: the other one's client now
    wait_for(lambda: metric(server, 'trainyard_webhook_certificate_reloads_total{result="success"}') == 1)
    with httpx.Client(base_url=server.base, verify=context(server, theirs), timeout=10) as c:
        assert post_review(c).status_code == 200
    refused_at_handshake(server, ours, ssl.TLSVersion.TLSv1_2)

    # not a CA: refused, and the last good bundle keeps serving
    client_ca.write({"ca.crt": (other / "client.crt").read_bytes()})
    line = 'trainyard_webhook_reload_refusals_total{reason="client_ca",what="certificate"}'
    wait_for(lambda: metric(server, line) == 1, what="the refusal")
    ready = httpx.get(f"http://127.0.0.1:{server.probe_port}/readyz", timeout=10)
    assert ready.status_code == 200 and "is not a CA certificate" in ready.json()["refused"]["certificate"]
    with httpx.Client(base_url=server.base, verify=context(server, theirs), timeout=10) as c:
        assert post_review(c).status_code == 200

    # a bundle of both CAs (a CA rotation): both clients are served, the refusal is over
    client_ca.write({"ca.crt": (issued / "ca.crt").read_bytes() + (other / "ca.crt").read_bytes()})
    wait_for(lambda: metric(server, 'trainyard_webhook_certificate_reloads_total{result="success"}') == 2)
    for cert in (ours, theirs):
        with httpx.Client(base_url=server.base, verify=context(server, cert), timeout=10) as c:
            assert post_review(c).status_code == 200
    assert metric(server, 'trainyard_webhook_config_refused{what="certificate"}') == 0


@pytest.mark.server
def test_an_oversized_client_ca_is_refused_on_reload_and_the_last_good_one_keeps_verifying(mtls):
    """A 50 MB bundle (sparse) swapped in as the kubelet swaps a Secret volume: refused from its
    size, reported in /readyz and the metric, and the bundle loaded before keeps verifying."""
    server, issued, _, client_ca, _ = mtls
    ours = (issued / "client.crt", issued / "client.key")
    client_ca.write({"ca.crt": b""})
    line = 'trainyard_webhook_reload_refusals_total{reason="client_ca",what="certificate"}'
    wait_for(lambda: metric(server, line) == 1, what="the empty bundle's refusal")
    generation = (client_ca.path / "..data").resolve()
    with open(generation / "ca.crt", "r+b") as f:  # grown in place to 50 MB, no disk used
        f.truncate(50 * 1024 * 1024)
    wait_for(lambda: metric(server, line) == 2, what="the oversized bundle's refusal")
    refused = httpx.get(f"http://127.0.0.1:{server.probe_port}/readyz", timeout=10).json()["refused"]
    assert "52428800 bytes, over the bound of 1048576 bytes" in refused["certificate"]
    with httpx.Client(base_url=server.base, verify=context(server, ours), timeout=10) as c:
        assert post_review(c).status_code == 200


@pytest.mark.server
def test_without_client_ca_no_client_certificate_is_asked_for(tmp_path):
    issued = tmp_path / "issued"
    generate(issued, client="kube-apiserver")
    with Server(POLICIES, issued, issued / "ca.crt", "roce", log=tmp_path / "server.log") as server:
        for cert in (None, (issued / "client.crt", issued / "client.key")):
            with httpx.Client(base_url=server.base, verify=context(server, cert), timeout=10) as c:
                assert post_review(c).status_code == 200
        assert "client certificates" not in server.logs()


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainyard.cli", "serve", "--port", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_a_bad_client_ca_is_a_clear_error_naming_the_file(tmp_path):
    issued = tmp_path / "tls"
    generate(issued, client="kube-apiserver")
    policies = tmp_path / "p"
    shutil.copytree(POLICIES, policies)
    base = ("--policies", str(policies), "--profile", "roce", "--tls-dir", str(issued))
    base += ("--tls-server-name", "localhost")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    expired = tmp_path / "expired-ca.crt"
    expired.write_bytes(ca_certificate(NOW - dt.timedelta(days=10), NOW - dt.timedelta(days=1)))
    cases = [
        (tmp_path / "missing.crt", "cannot read a PEM bundle of CA certificates"),
        (garbage, "cannot read a PEM bundle of CA certificates"),
        (issued / "client.crt", "is not a CA certificate"),
        (expired, "no CA certificate in it is valid now"),
    ]
    for path, message in cases:
        r = serve(*base, "--client-ca", str(path))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"error: {path} (--client-ca): ") and message in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = serve(*base, "--client-ca", "")
    assert r.returncode == 2 and "--client-ca is empty" in r.stderr and "Traceback" not in r.stderr


def test_the_context_requires_a_client_certificate_only_with_a_client_ca(tmp_path):
    generate(tmp_path)
    assert CertStore(tmp_path, server_name=None).current.verify_mode == ssl.CERT_NONE
    store = CertStore(tmp_path, server_name=None, client_ca=tmp_path / "ca.crt")
    assert store.current.verify_mode == ssl.CERT_REQUIRED
    assert store.files == (tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt")


def test_a_client_ca_that_expires_makes_the_webhook_unready(tmp_path):
    """Past the client CA's end no client can be verified: /readyz says so, as for the serving pair."""
    generate(tmp_path)
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(pem(new_ca(1)[0]))  # valid for two days; the serving pair for a year
    store = CertStore(tmp_path, server_name=None, client_ca=client_ca)
    assert store.serving_problem() is None
    problem = store.serving_problem(NOW + dt.timedelta(days=3))
    assert problem is not None and problem.startswith(f"the client CA ({client_ca}) expired at")


# --- trainyard certs --client ----------------------------------------------------------------------


def certs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainyard.cli", "certs", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_certs_client_writes_a_client_certificate_from_the_same_ca(tmp_path):
    out = tmp_path / "tls"
    r = certs("--out", str(out), "--client", "kube-apiserver")
    assert r.returncode == 0, r.stderr
    written = ", ".join(f"{out}/{n}" for n in ("ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"))
    assert r.stdout.strip() == f"wrote {written}"
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    client = x509.load_pem_x509_certificate((out / "client.crt").read_bytes())
    client.verify_directly_issued_by(ca)
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kube-apiserver"
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not client.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (out / "client.key").stat().st_mode & 0o077 == 0
    key = serialization.load_pem_private_key((out / "client.key").read_bytes(), None)
    assert key.public_key() == client.public_key()
    # the serving certificate is as without --client
    serving = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    serving.verify_directly_issued_by(ca)
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]


def test_certs_without_client_writes_no_client_certificate(tmp_path):
    r = certs("--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


def test_certs_refuses_a_bad_client_name_before_writing_anything(tmp_path):
    r = certs("--out", str(tmp_path / "out"), "--client", "x" * 65)
    assert r.returncode == 2 and r.stderr.startswith("error: --client ") and "1 to 64" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_client_certificates_from_python_sign_with_a_kept_ca(tmp_path):
    """What a caller (the local control plane) does: generate the serving files, keep the CA,
    and issue the client certificate it writes into kube-apiserver's webhook kubeconfig."""
    ca = generate(tmp_path / "tls")
    crt, key = write_client_certificate(tmp_path / "apiserver", ca, "kube-apiserver", days=30)
    assert (crt, key) == (tmp_path / "apiserver" / "client.crt", tmp_path / "apiserver" / "client.key")
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    cert.verify_directly_issued_by(ca[0])
    assert cert.not_valid_after_utc - cert.not_valid_before_utc < dt.timedelta(days=31)
    in_memory, _ = client_certificate(ca, "system:kube-apiserver")
    assert in_memory.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-apiserver"

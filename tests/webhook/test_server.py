"""The webhook server over real TLS: the HTTP contract, rotation and reload without failures."""

from __future__ import annotations

import base64
import datetime as dt
import gc
import shutil
import socket
import ssl
import threading

import httpx
import orjson
import pytest
import yaml

from tests.webhook.conftest import POLICIES, apply, example, pod, trainer
from tests.webhook.server_process import AtomicDir, Server, tls_pair, wait_for
from webhook.certs import generate
from webhook.review import admission_review
from webhook.server import uvicorn_server
from webhook.tls import CertStore

pytestmark = pytest.mark.server

NOW = dt.datetime.now(dt.UTC)


def policy_files(change=None) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in POLICIES.glob("*.yaml")}
    if change:
        name, fn = change
        doc = yaml.safe_load(files[name])
        fn(doc)
        files[name] = yaml.safe_dump(doc).encode()
    return files


def tls_files(directory) -> dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in ("tls.crt", "tls.key")}


@pytest.fixture
def setup(tmp_path):
    """A running server whose TLS and policy directories are kubelet-style volumes."""
    issued = tmp_path / "issued"
    ca = generate(issued)
    tls, policies = AtomicDir(tmp_path / "tls"), AtomicDir(tmp_path / "policies")
    tls.write(tls_files(issued))
    policies.write(policy_files())
    server = Server(policies.path, tls.path, issued / "ca.crt", "roce", log=tmp_path / "server.log")
    yield server, tls, policies, ca, issued
    assert server.stop() == 0, server.logs()


def post(client: httpx.Client, body: bytes | dict, content_type: str = "application/json") -> httpx.Response:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return client.post("/mutate", content=data, headers={"content-type": content_type})


def patched_env(pod: dict, response: httpx.Response) -> dict:
    resp = response.json()["response"]
    mutated = apply(pod, orjson.loads(base64.b64decode(resp["patch"])))
    return {e["name"]: e.get("value") for e in mutated["spec"]["containers"][0]["env"]}


def metric(client: httpx.Client, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric line starting with {line_start}")


def test_mutate_over_tls(setup):
    server, *_ = setup
    pod = example("pytorchjob-worker.yaml")
    req = admission_review(pod)
    with server.client() as c:
        r = post(c, req)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json()["response"]["uid"] == req["request"]["uid"]
        assert patched_env(pod, r)["NCCL_SOCKET_IFNAME"] == "net1"
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200
        assert metric(c, 'trainyard_webhook_reviews_total{outcome="patched"}') == 1
        assert metric(c, "trainyard_webhook_review_duration_seconds_count") == 1

    def review_lines():  # written in batches, within a fraction of a second
        return [orjson.loads(line) for line in server.logs().splitlines() if '"uid"' in line]

    (entry,) = wait_for(review_lines, what="the review's log line")
    assert entry["uid"] == req["request"]["uid"] and entry["pod"] == pod["metadata"]["name"]
    assert entry["profile"] == "roce" and entry["ops"] > 0 and entry["warnings"] and entry["ms"] > 0


def test_http_errors(setup):
    server, *_ = setup
    with server.client() as c:
        assert post(c, b"{not json").status_code == 400
        r = post(c, {"apiVersion": "v1", "kind": "Pod"})
        assert r.status_code == 400 and "expected apiVersion admission.k8s.io/v1" in r.json()["error"]
        r = post(c, admission_review(example("tfjob-chief.yaml")), content_type="text/plain")
        assert r.status_code == 415 and "application/json" in r.json()["error"]
        assert post(c, b"{}", content_type="").status_code == 415
        big = b'{"pad": "' + b"x" * (3 * 1024 * 1024) + b'"}'
        r = post(c, big)
        # answered before the body ended: the connection closes, so the rest of the body is never
        # read as the next request (which once came back 431 on the reused connection)
        assert r.status_code == 413 and r.headers["connection"] == "close"
        # a JSON media type with parameters is fine
        assert (
            post(c, admission_review(example("tfjob-chief.yaml")), "application/json; charset=utf-8").status_code == 200
        )
        assert c.get("/mutate").status_code == 405
        assert metric(c, 'trainyard_webhook_reviews_total{outcome="too_large"}') == 1
        assert metric(c, 'trainyard_webhook_reviews_total{outcome="unsupported_media"}') == 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_plain_http_and_old_tls_are_refused(setup):
    server, *_ = setup
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)

    def handshake(version: ssl.TLSVersion) -> str:
        ctx = ssl.create_default_context(cafile=str(server.ca))
        ctx.minimum_version = ctx.maximum_version = version
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer what the server must refuse
        with (
            socket.create_connection(("127.0.0.1", server.port)) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            return tls.version()

    # the server refuses (an alert, or uvloop just closes): not the client failing to offer 1.1
    with pytest.raises(ssl.SSLError, match=r"PROTOCOL_VERSION|UNEXPECTED_EOF"):
        handshake(ssl.TLSVersion.TLSv1_1)
    assert handshake(ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"


def test_certificate_rotation_under_load_fails_no_request(setup, tmp_path):
    server, tls, _, ca, _ = setup
    before = server.peer_certificate()
    errors, done, count = [], threading.Event(), [0]
    body = orjson.dumps(admission_review(example("mpijob-worker.yaml")))

    def load():
        while not done.is_set():
            try:  # a new connection each time, so each request does a handshake
                with server.client() as c:
                    r = c.post("/mutate", content=body, headers={"content-type": "application/json"})
                    if r.status_code != 200:
                        errors.append(r.status_code)
                count[0] += 1
            except Exception as exc:
                errors.append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: count[0] > 20, what="requests before the rotation")
    rotated = tmp_path / "rotated"
    generate(rotated, ca=ca)  # cert-manager renews: same CA, new key and certificate
    tls.write(tls_files(rotated))
    wait_for(lambda: server.peer_certificate() != before, what="the new certificate to be served")
    at_rotation = count[0]
    wait_for(lambda: count[0] > at_rotation + 20, what="requests after the rotation")
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert server.peer_certificate() == ssl.PEM_cert_to_DER_cert((rotated / "tls.crt").read_text())
    with server.client() as c:
        assert metric(c, 'trainyard_webhook_certificate_reloads_total{result="success"}') == 1


def refused(client: httpx.Client) -> dict:
    r = client.get("/readyz")
    assert r.status_code == 200, r.text  # the last good files serve: still ready
    return r.json().get("refused", {})


@pytest.mark.parametrize(
    ("pair", "reason", "message"),
    [
        (lambda ca, tls: tls_pair(ca, not_after=NOW - dt.timedelta(hours=1)), "expired", "expired at"),
        (lambda ca, tls: tls_pair(ca, not_before=NOW + dt.timedelta(days=1)), "not_yet_valid", "not valid before"),
        (lambda ca, tls: tls_pair(ca, dns=("elsewhere.example.com",), ips=()), "wrong_name", "does not name localhost"),
        (
            lambda ca, tls: {"tls.crt": tls_pair(ca)["tls.crt"], "tls.key": tls_files(tls.path)["tls.key"]},
            "key_mismatch",
            "is not the key of",
        ),
        (lambda ca, tls: {"tls.crt": b"not a certificate", "tls.key": b"x"}, "unreadable", "cannot read"),
    ],
)
def test_a_certificate_that_would_not_serve_is_refused_and_the_old_one_kept(setup, pair, reason, message):
    server, tls, _, ca, _ = setup
    before = server.peer_certificate()
    tls.write(pair(ca, tls))
    with server.client() as c:
        line = f'trainyard_webhook_reload_refusals_total{{reason="{reason}",what="certificate"}}'
        wait_for(lambda: metric(c, line) == 1, what="the refusal")
        assert metric(c, 'trainyard_webhook_certificate_reloads_total{result="failure"}') == 1
        assert metric(c, 'trainyard_webhook_config_refused{what="certificate"}') == 1
        assert message in refused(c)["certificate"]
        assert c.get("/healthz").status_code == 200
    assert server.peer_certificate() == before
    assert message in server.logs()
    tls.write(tls_pair(ca))  # a good pair again: served, and the refusal is over
    wait_for(lambda: server.peer_certificate() != before, what="the good certificate")
    with server.client() as c:
        assert refused(c) == {} and metric(c, 'trainyard_webhook_config_refused{what="certificate"}') == 0


def test_a_serving_certificate_that_expires_makes_the_webhook_unready(tmp_path):
    issued = tmp_path / "issued"
    ca = generate(issued)
    tls = AtomicDir(tmp_path / "tls")
    tls.write(tls_pair(ca, not_after=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)))
    with Server(POLICIES, tls.path, issued / "ca.crt", "roce") as server:
        r = httpx.get(f"http://127.0.0.1:{server.probe_port}/readyz", timeout=10)
        assert r.status_code == 200
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{server.probe_port}/readyz", timeout=10).status_code == 503,
            timeout=60,
            what="the expiry",
        )
        assert "the serving certificate expired at" in httpx.get(f"http://127.0.0.1:{server.probe_port}/readyz").text


def test_policy_reload_and_bad_policy_keeps_the_last_good_set(setup):
    server, _, policies, *_ = setup
    pod = example("mpijob-worker.yaml")
    with server.client() as c:
        assert patched_env(pod, post(c, admission_review(pod)))["NCCL_IB_HCA"] == "mlx5"

        def hca_1(doc):
            doc["spec"]["env"][1]["value"] = "mlx5_1"

        policies.write(policy_files(("roce.yaml", hca_1)))
        wait_for(lambda: metric(c, 'trainyard_webhook_policy_reloads_total{result="success"}') == 1)
        assert patched_env(pod, post(c, admission_review(pod)))["NCCL_IB_HCA"] == "mlx5_1"

        def broken(doc):
            doc["spec"]["shm"]["perGPU"] = "lots"

        policies.write(policy_files(("roce.yaml", broken)))
        wait_for(lambda: metric(c, 'trainyard_webhook_policy_reloads_total{result="failure"}') == 1)
        assert patched_env(pod, post(c, admission_review(pod)))["NCCL_IB_HCA"] == "mlx5_1"
        assert "spec.shm.perGPU" in refused(c)["policies"]
        assert metric(c, 'trainyard_webhook_reload_refusals_total{reason="invalid",what="policies"}') == 1
    assert "spec.shm.perGPU" in server.logs()


@pytest.mark.parametrize(
    ("files", "reason", "message"),
    [
        (lambda: {k: v for k, v in policy_files().items() if k != "ib.yaml"}, "dropped_profile", "profile ib would"),
        (lambda: {**policy_files(), "ib.yaml": b""}, "truncated", "ib.yaml: the file is empty"),
        (
            lambda: {**policy_files(), "roce.yaml": policy_files()["roce.yaml"].rstrip(b"\n")[:-3]},
            "truncated",
            "does not end with a line break",
        ),
        (
            lambda: policy_files(("tcp.yaml", lambda d: d["metadata"].update(name="tpc"))),
            "dropped_profile",
            "profile tcp would disappear",
        ),
        (
            lambda: policy_files(("roce.yaml", lambda d: d["spec"]["tolerations"][0].update(key="nvidia.com/"))),
            "invalid",
            "is not a valid toleration key",
        ),
    ],
)
def test_a_policy_set_that_means_less_than_the_serving_one_is_refused(setup, files, reason, message):
    server, _, policies, *_ = setup
    policies.write(files())
    with server.client() as c:
        line = f'trainyard_webhook_reload_refusals_total{{reason="{reason}",what="policies"}}'
        wait_for(lambda: metric(c, line) == 1, what="the refusal")
        assert message in refused(c)["policies"]
        assert metric(c, "trainyard_webhook_profiles") == 3
        r = post(c, admission_review(pod(trainer(), labels={"trainyard.dev/fabric": "ib"})))
        assert r.json()["response"]["allowed"] is True  # ib still serves
    policies.write(policy_files())  # the files as they were: accepted, the refusal is over
    with server.client() as c:
        wait_for(lambda: metric(c, 'trainyard_webhook_policy_reloads_total{result="success"}') == 1)
        assert refused(c) == {}


def test_probes_and_metrics_have_a_listener_of_their_own(setup):
    server, *_ = setup
    base = f"http://127.0.0.1:{server.probe_port}"
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    assert httpx.get(f"{base}/readyz", timeout=10).json() == {"status": "ready"}
    r = httpx.get(f"{base}/metrics", timeout=10)
    assert r.status_code == 200 and "trainyard_webhook_connections" in r.text
    assert httpx.get(f"{base}/mutate", timeout=10).status_code == 404


def test_bad_startup_input_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    issued = tmp_path / "tls"
    generate(issued)
    policies = tmp_path / "p"
    shutil.copytree(POLICIES, policies)

    def serve(*args):
        return subprocess.run(
            [sys.executable, "-m", "trainyard.cli", "serve", "--port", "1", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = serve("--policies", str(policies), "--profile", "omnipath", "--tls-dir", str(issued))
    assert r.returncode == 2 and "default profile 'omnipath' is not defined" in r.stderr
    r = serve("--policies", str(policies), "--profile", "roce", "--tls-dir", str(tmp_path))
    assert r.returncode == 2 and "missing tls.crt and tls.key" in r.stderr
    assert "Traceback" not in r.stderr
    # the certificate must name the Service kube-apiserver calls (trainyard certs wrote localhost)
    r = serve("--policies", str(policies), "--profile", "roce", "--tls-dir", str(issued))
    assert r.returncode == 2 and "does not name trainyard-webhook.trainyard-system.svc" in r.stderr
    expired = AtomicDir(tmp_path / "expired")
    ca = generate(tmp_path / "ca")
    expired.write(tls_pair(ca, not_after=NOW - dt.timedelta(days=1)))
    r = serve(*("--policies", str(policies), "--profile", "roce", "--tls-dir", str(expired.path)),
              *("--tls-server-name", "localhost"))  # fmt: skip
    assert r.returncode == 2 and "expired at" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_server_leaves_what_start_up_made_out_of_later_collections(tmp_path):
    """A full collection walks only what serving made: start-up's objects are frozen."""
    generate(tmp_path)
    gc.unfreeze()
    try:
        uvicorn_server(object(), CertStore(tmp_path, server_name=None), "127.0.0.1", 0)
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()

"""The webhook under abuse: fuzzed bodies, soak, rotation and reload under load, stalled
clients, graceful shutdown. Every test runs the real server (or its real ASGI app)."""

from __future__ import annotations

import base64
import datetime as dt
import signal
import socket
import ssl
import threading
import uuid

import kubernetes_validate
import orjson
import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.conftest import POLICIES, apply, example, example_names
from tests.webhook.load import run_load
from tests.webhook.server_process import AtomicDir, Server, tls_pair, wait_for
from tests.webhook.strategies import pods
from trainyard.sandbox.webhook_process import rss_bytes
from webhook.app import State, create_app
from webhook.certs import generate
from webhook.policy import load_policies
from webhook.review import admission_review

FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def asgi():
    state = State(policies=load_policies(POLICIES), default="roce")
    with TestClient(create_app(state)) as client:
        yield client


def post(client, body: bytes):
    return client.post("/mutate", content=body, headers={"content-type": "application/json"})


# --- fuzzing -------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(
    pod=pods(),
    operation=st.sampled_from(["CREATE", "CREATE", "UPDATE", "CONNECT"]),
    namespace=st.sampled_from(["ml", "kube-system", ""]),
)
def test_fuzzed_pods_never_5xx_and_patches_apply_and_validate(asgi, pod, operation, namespace):
    review = admission_review(pod, operation=operation, namespace=namespace)
    r = post(asgi, orjson.dumps(review))
    assert r.status_code == 200, r.text
    response = r.json()["response"]
    assert response["uid"] == review["request"]["uid"]
    assert all(len(w) <= 120 for w in response.get("warnings", []))
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        mutated = apply(pod, orjson.loads(base64.b64decode(response["patch"])))
        kubernetes_validate.validate(mutated, "1.30", strict=True)


@FUZZ
@given(
    request=st.dictionaries(
        st.sampled_from(["uid", "kind", "operation", "object", "namespace", "subResource", "name"]), json_values
    )
)
def test_fuzzed_review_envelopes_never_5xx(asgi, request):
    body = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    r = post(asgi, body)
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert r.json()["response"]["uid"] == request["uid"]
    else:
        assert r.json()["error"]


@FUZZ
@given(body=json_values | st.binary(max_size=64))
def test_fuzzed_bodies_never_5xx(asgi, body):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    assert post(asgi, raw).status_code == 400


@FUZZ
@given(obj=json_values)
def test_fuzzed_objects_in_a_pod_review_never_5xx(asgi, obj):
    review = admission_review({"metadata": {"name": "x"}})
    review["request"]["object"] = obj
    assert post(asgi, orjson.dumps(review)).status_code in (200, 400)


# --- a running server ------------------------------------------------------------------------------


@pytest.fixture
def live(tmp_path):
    issued = tmp_path / "issued"
    ca = generate(issued)
    tls, policies = AtomicDir(tmp_path / "tls"), AtomicDir(tmp_path / "policies")
    tls.write({n: (issued / n).read_bytes() for n in ("tls.crt", "tls.key")})
    policies.write({p.name: p.read_bytes() for p in POLICIES.glob("*.yaml")})
    server = Server(
        policies.path,
        tls.path,
        issued / "ca.crt",
        "roce",
        log=tmp_path / "server.log",
        extra_args=("--request-timeout", "1", "--log-level", "warning"),
    )
    yield server, tls, policies, ca
    if server.proc.poll() is None:
        assert server.stop() == 0, server.logs()


def corpus() -> list[bytes]:
    return [orjson.dumps(admission_review(example(name))) for name in example_names()]


@pytest.mark.server
def test_soak_many_clients_no_error_and_stable_memory(live):
    server, *_ = live
    bodies = corpus()
    warm = run_load(server.base, str(server.ca), bodies, 5000, processes=2, concurrency=32)
    assert warm.errors == []
    rss_warm = rss_bytes(server.proc.pid)
    soak = run_load(server.base, str(server.ca), bodies, 20000, processes=2, concurrency=64)
    rss_after = rss_bytes(server.proc.pid)
    assert soak.errors == [] and soak.ok == 20000
    growth = rss_after - rss_warm
    assert growth < 16 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over 20000 reviews ({rss_warm} -> {rss_after})"


def load_in_background(server, total: int) -> tuple[threading.Thread, dict]:
    """``total`` reviews from 2 processes x 16 connections, on a thread; ``result["r"]`` once joined
    (``result["error"]`` if the load itself failed). A daemon thread: a test that fails never keeps
    the interpreter from exiting."""
    result: dict = {}

    def send() -> None:
        try:
            result["r"] = run_load(server.base, str(server.ca), corpus(), total, processes=2, concurrency=16)
        except BaseException as exc:
            result["error"] = exc

    load = threading.Thread(target=send, daemon=True)
    load.start()
    return load, result


def finish(load: threading.Thread, result: dict):
    """Wait for a background load (its own deadline bounds the wait) and return its result."""
    load.join(240)
    assert not load.is_alive(), "the background load did not end"
    if "error" in result:
        raise result["error"]
    return result["r"]


@pytest.mark.server
def test_rotation_and_policy_change_in_the_middle_of_load(live, tmp_path):
    server, tls, policies, ca = live
    before = server.peer_certificate()
    load, result = load_in_background(server, 12000)
    with server.client() as c:
        wait_for(lambda: _reviews(c) > 1000, what="load to start")
        generate(tmp_path / "rotated", ca=ca)
        tls.write({n: (tmp_path / "rotated" / n).read_bytes() for n in ("tls.crt", "tls.key")})
        doc = yaml.safe_load((POLICIES / "roce.yaml").read_text())
        doc["spec"]["env"][1]["value"] = "mlx5_4"
        policies.write(
            {**{p.name: p.read_bytes() for p in POLICIES.glob("*.yaml")}, "roce.yaml": yaml.safe_dump(doc).encode()}
        )
        wait_for(lambda: server.peer_certificate() != before, what="the rotated certificate")
        wait_for(
            lambda: 'trainyard_webhook_policy_reloads_total{result="success"} 1.0' in c.get("/metrics").text,
            what="the policy reload",
        )
        mid = _reviews(c)
    r = finish(load, result)
    assert r.errors == [] and r.ok == 12000
    assert mid < 12000, "the rotation and the reload must happen while the load runs"


@pytest.mark.server
def test_refused_reloads_under_load_fail_no_request(live, tmp_path):
    """Policy sets and certificates that must not serve arrive while the server is under load:
    each is refused (logged, counted, listed by /readyz), the last good ones keep serving, and no
    request fails: no 5xx, no connection error."""
    server, tls, policies, ca = live
    good_policies = {p.name: p.read_bytes() for p in POLICIES.glob("*.yaml")}
    bad_policies = [
        {k: v for k, v in good_policies.items() if k != "ib.yaml"},  # a profile dropped
        {**good_policies, "roce.yaml": good_policies["roce.yaml"][:-40]},  # cut short
        {**good_policies, "tcp.yaml": b""},  # emptied
    ]
    now = dt.datetime.now(dt.UTC)
    bad_pairs = [
        tls_pair(ca, not_after=now - dt.timedelta(hours=1)),
        tls_pair(ca, not_before=now + dt.timedelta(days=1)),
        tls_pair(ca, dns=("elsewhere.example.com",), ips=()),
    ]
    before = server.peer_certificate()
    load, result = load_in_background(server, 12000)
    with server.client() as c:
        wait_for(lambda: _reviews(c) > 500, what="load to start")
        for i, (files, pair) in enumerate(zip(bad_policies, bad_pairs, strict=True)):
            policies.write(files)
            tls.write(pair)
            wait_for(
                lambda i=i: (
                    _metric(c, 'trainyard_webhook_policy_reloads_total{result="failure"}') == i + 1
                    and _metric(c, 'trainyard_webhook_certificate_reloads_total{result="failure"}') == i + 1
                ),
                timeout=30,
                what=f"refusal {i + 1}",
            )
            ready = c.get("/readyz")
            assert ready.status_code == 200 and set(ready.json()["refused"]) == {"policies", "certificate"}
        mid = _reviews(c)
    r = finish(load, result)
    assert r.errors == [] and r.ok == 12000
    assert mid < 12000, "the refusals must happen while the load runs"
    assert server.peer_certificate() == before
    logs = server.logs()
    for what, reason in [("policies", "dropped_profile"), ("policies", "truncated"), ("certificate", "expired"),
                         ("certificate", "not_yet_valid"), ("certificate", "wrong_name")]:  # fmt: skip
        assert f"{what} refused ({reason})" in logs


def _metric(client, prefix: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {prefix}")


def _reviews(client) -> float:
    return _metric(client, 'trainyard_webhook_reviews_total{outcome="patched"}')


def _tls_socket(server) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.ssl_context().wrap_socket(raw, server_hostname="localhost")


@pytest.mark.server
def test_stalled_clients_block_no_one_and_are_cut_off(live):
    server, *_ = live
    silent = [_tls_socket(server) for _ in range(10)]
    partial_headers = [_tls_socket(server) for _ in range(10)]
    for s in partial_headers:
        s.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl")
    body = orjson.dumps(admission_review(example("tfjob-chief.yaml")))
    partial_body = _tls_socket(server)
    partial_body.sendall(
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[:100]
    )
    with server.client() as c:  # everyone else is served while those stall
        for _ in range(20):
            assert c.post("/mutate", content=body, headers={"content-type": "application/json"}).status_code == 200
    # the server closes stalled connections on its own (the socket reads EOF, not a timeout)
    for s in silent + partial_headers:
        assert s.recv(1024) == b""
    reply = partial_body.recv(4096)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    for s in [*silent, *partial_headers, partial_body]:
        s.close()


@pytest.mark.server
def test_sigterm_finishes_in_flight_requests_then_exits_zero(live):
    server, *_ = live
    req = admission_review(example("pytorchjob-master.yaml"))
    body = orjson.dumps(req)
    head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    in_flight = _tls_socket(server)
    in_flight.sendall(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
    with server.client() as c:  # the server has the request (headers read, body awaited)
        wait_for(lambda: _metric(c, "trainyard_webhook_reviews_in_flight ") == 1, what="the request in flight")
    server.proc.send_signal(signal.SIGTERM)
    # new connections are refused once the listener closes, while the in-flight request lives on
    wait_for(lambda: _refused(server.port), what="the listener to close")
    in_flight.sendall(body[len(body) // 2 :])
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < _length(reply):
        chunk = in_flight.recv(65536)
        assert chunk, f"connection closed before the response was complete: {reply[:200]!r}"
        reply += chunk
    in_flight.close()  # as kube-apiserver would; the server then has nothing left to wait for
    assert reply.startswith(b"HTTP/1.1 200")
    assert orjson.loads(reply.split(b"\r\n\r\n", 1)[1])["response"]["uid"] == req["request"]["uid"]
    assert server.proc.wait(30) == 0


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 1 << 30


@pytest.mark.server
def test_request_ids_are_echoed_under_concurrency(live):
    server, *_ = live
    bodies = [orjson.dumps(admission_review(example("sidecar.yaml"))) for _ in range(50)]
    uids = [orjson.loads(b)["request"]["uid"] for b in bodies]
    assert len(set(uids)) == 50 and all(uuid.UUID(u) for u in uids)
    result = run_load(server.base, str(server.ca), bodies, 500, processes=2, concurrency=25)
    assert result.errors == [] and result.ok == 500

"""``trainyard certs`` and ``trainyard mutate`` as a user runs them."""

from __future__ import annotations

import base64
import subprocess
import sys

import orjson
import yaml
from cryptography import x509

from tests.webhook.conftest import EXAMPLES, POLICIES, ROOT
from webhook.review import admission_review


def trainyard(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainyard.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        timeout=60,
    )


def test_certs_writes_a_ca_and_a_serving_certificate(tmp_path):
    r = trainyard(
        "certs", "--out", str(tmp_path / "tls"), "--dns", "trainyard-webhook.trainyard-system.svc", "--ip", "10.0.0.7"
    )
    assert r.returncode == 0, r.stderr
    ca = x509.load_pem_x509_certificate((tmp_path / "tls" / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "tls.crt").read_bytes())
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["trainyard-webhook.trainyard-system.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o077 == 0


def test_certs_rejects_a_bad_ip(tmp_path):
    r = trainyard("certs", "--out", str(tmp_path), "--ip", "10.0.0.300")
    assert r.returncode == 2 and r.stderr.startswith("error: --ip:") and "Traceback" not in r.stderr


def test_mutate_a_pod_file_prints_the_admitted_pod_and_warnings():
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "roce", str(EXAMPLES / "pytorchjob-worker.yaml"))
    assert r.returncode == 0, r.stderr
    pod = yaml.safe_load(r.stdout)
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "roce-network"
    assert "NCCL_SOCKET_IFNAME eth0 -> net1" in r.stderr


def test_mutate_json_in_json_out_and_stdin():
    pod = yaml.safe_load((EXAMPLES / "tfjob-chief.yaml").read_text())
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "tcp", "-", stdin=orjson.dumps(pod).decode())
    assert r.returncode == 0, r.stderr
    out = orjson.loads(r.stdout)
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"] if "value" in e}
    assert env["TRAINYARD_FABRIC"] == "tcp" and env["NCCL_IB_DISABLE"] == "1"


def test_mutate_an_admission_review_prints_the_response():
    pod = yaml.safe_load((EXAMPLES / "mpijob-worker.yaml").read_text())
    req = admission_review(pod)
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "roce", "-", stdin=orjson.dumps(req).decode())
    assert r.returncode == 0, r.stderr
    out = orjson.loads(r.stdout)
    assert out["response"]["uid"] == req["request"]["uid"]
    assert orjson.loads(base64.b64decode(out["response"]["patch"]))


def test_mutate_errors_are_clear(tmp_path):
    denied = tmp_path / "denied.yaml"
    pod = yaml.safe_load((EXAMPLES / "mpijob-worker.yaml").read_text())
    pod["metadata"]["labels"]["trainyard.dev/fabric"] = "omnipath"
    denied.write_text(yaml.safe_dump(pod))
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "roce", str(denied))
    assert r.returncode == 1 and "denied:" in r.stderr and "known profiles: ib, roce, tcp" in r.stderr
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "roce", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml: cannot read" in r.stderr
    (tmp_path / "bad.yaml").write_text("kind: Pod\nspec: [\n")
    r = trainyard("mutate", "--policies", str(POLICIES), "--profile", "roce", str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and "not valid YAML" in r.stderr
    (tmp_path / "empty").mkdir()
    r = trainyard("mutate", "--policies", str(tmp_path / "empty"), "--profile", "roce", str(denied))
    assert r.returncode == 2 and "no FabricProfile documents" in r.stderr
    assert "Traceback" not in r.stderr


def test_help_lists_the_webhook_commands():
    r = trainyard("--help")
    assert r.returncode == 0
    for command in ("certs", "serve", "mutate"):
        assert command in r.stdout

"""``make demo``: the webhook as kube-apiserver sees it.

Generates a local CA and serving certificate, starts ``trainyard serve`` over TLS, sends each
example pod to ``POST /mutate`` as an AdmissionReview (as kube-apiserver does), applies the
returned JSONPatch and prints what the webhook injected and why.
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import jsonpatch
import orjson
import yaml

from webhook.certs import generate
from webhook.describe import describe
from webhook.local import LocalWebhook

ROOT = Path(__file__).resolve().parents[1]


def admission_review(pod: dict, namespace: str) -> dict:
    """An AdmissionReview v1 request for creating ``pod``, shaped as kube-apiserver sends it."""
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": pod["metadata"].get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def say(text: str = "") -> None:
    print(text, flush=True)


def show_admission(client: httpx.Client, path: Path) -> dict:
    """Send the pod in ``path`` to the webhook as kube-apiserver would; print and return the result."""
    pod = yaml.safe_load(path.read_text())
    namespace = pod["metadata"].get("namespace", "default")
    t0 = time.perf_counter()
    r = client.post(
        "/mutate", content=orjson.dumps(admission_review(pod, namespace)), headers={"content-type": "application/json"}
    )
    ms = (time.perf_counter() - t0) * 1000
    r.raise_for_status()
    response = r.json()["response"]
    say()
    say(f"== {namespace}/{pod['metadata']['name']}  ({path.name}, {ms:.1f} ms over HTTPS)")
    if not response["allowed"]:
        say(f"   denied: {response['status']['message']}")
        return pod
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    lines = describe(pod, ops)
    jsonpatch.apply_patch(pod, ops, in_place=True)  # what kube-apiserver does with the answer; it must apply
    for line in lines:
        say(f"   {line}")
    for warning in response.get("warnings", []):
        say(f"   warning: {warning}")
    return pod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainyard.demo", description=__doc__)
    parser.add_argument("--policies", default=str(ROOT / "policies"), help="FabricProfile directory")
    parser.add_argument("--profile", default="roce", help="the webhook's default profile (default roce)")
    parser.add_argument("--examples", default=str(ROOT / "examples" / "pods"), help="directory of example pods")
    args = parser.parse_args(argv)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trainyard-demo-") as tmp:
        tls = Path(tmp) / "tls"
        say(f"[1/3] certificates: a local CA and a serving certificate for 127.0.0.1 in {tls}")
        generate(tls)
        say(f"[2/3] webhook: trainyard serve --policies {args.policies} --profile {args.profile} (TLS)")
        try:
            webhook = LocalWebhook(
                Path(args.policies), tls, tls / "ca.crt", args.profile, log=Path(tmp) / "webhook.log"
            )
        except (RuntimeError, TimeoutError) as exc:
            print(f"error: the webhook did not start: {exc}", file=sys.stderr)
            return 1
        say(f"      listening on {webhook.base}")
        files = sorted(Path(args.examples).glob("*.yaml"))
        say(f"[3/3] admission: {len(files)} example pods from {args.examples}, as kube-apiserver sends them")
        try:
            with webhook.client() as client:
                for path in files:
                    show_admission(client, path)
        finally:
            code = webhook.stop()
        say()
        if code != 0:
            print(f"error: the webhook exited with status {code}: {webhook.logs()[-2000:]}", file=sys.stderr)
            return 1
        say(f"done in {time.monotonic() - started:.1f} s; the webhook drained and stopped cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())

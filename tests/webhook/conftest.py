from __future__ import annotations

import copy
from pathlib import Path

import jsonpatch
import pytest
import yaml

from webhook.policy import PolicySet, load_policies

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
EXAMPLES = ROOT / "examples" / "pods"
TRAINER = "registry.example.com/ml/trainer:0.1.0"


@pytest.fixture(scope="session")
def policies() -> PolicySet:
    return load_policies(POLICIES)


@pytest.fixture(scope="session")
def roce(policies):
    return policies.get("roce")


@pytest.fixture(scope="session")
def tcp(policies):
    return policies.get("tcp")


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def example_names() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def apply(pod: dict, ops: list[dict]) -> dict:
    """Apply a patch as kube-apiserver does (RFC 6902), to a copy."""
    return jsonpatch.apply_patch(copy.deepcopy(pod), ops)


def pod(*containers: dict, labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    meta: dict = {"name": "p"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers), **spec}}


def trainer(name: str = "pytorch", gpus: int | None = None, memory: str | None = None, **fields) -> dict:
    c: dict = {"name": name, "image": TRAINER, **fields}
    limits = {}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    if memory is not None:
        limits["memory"] = memory
    if limits:
        c.setdefault("resources", {})["limits"] = limits
    return c


def env_of(container: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}

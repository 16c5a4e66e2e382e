"""What each cluster declares about itself, once: ``clusters/<cluster>/cluster.yaml``.

The facts a cluster's manifests cannot say by themselves: the Kubernetes version it runs, which
admission mechanism applies the fabric (``webhook``, or ``policy``: a MutatingAdmissionPolicy,
Kubernetes 1.36+), its node pools (how many nodes, their labels and what each can allocate) and
the node labels that make up its network topology, outermost first (block, rack, host). The
tooling reads them for capacity checks, for the Kueue objects it generates and for the admission
mode; the job namespace's quota stays in its ResourceQuota manifest, read from the render.
``jobPriorityClasses`` and ``jobWorkloadPriorityClasses`` list the PriorityClasses and Kueue
WorkloadPriorityClasses jobs may name (none by default; never a ``system-`` class).
``schedulers`` names the schedulers the cluster runs beside ``default-scheduler`` (a pod naming
another one stays Pending for ever).
``monitoring: prometheus-operator`` says Prometheus Operator runs on the cluster (installed by the
platform team, outside this repository): its CRDs are served, so the cluster installs the monitors,
rules and dashboards of base/monitoring (Application trainyard-monitoring); ``none`` (the default):
it installs none of them.

The file is not a Kubernetes object and no kustomization lists it, so Argo CD never applies it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from trainyard.contract.errors import UserError, describe_fields
from trainyard.contract.files import FileTooLarge, read_text_bounded
from trainyard.contract.k8s import HOSTNAME_LABEL, is_dns1123_label, is_dns1123_subdomain
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo.model import rawyaml
from trainyard.repo.model.repository import CLUSTERS, Repository

FILE = "cluster.yaml"
API_VERSION = "trainyard.dev/v1alpha1"
KIND = "ClusterFacts"
# spec.monitoring: what scrapes the cluster. Prometheus Operator serves the API group below.
NO_MONITORING = "none"
PROMETHEUS_OPERATOR = "prometheus-operator"
MONITORING_GROUP = "monitoring.coreos.com"


class DeclarationError(UserError):
    """clusters/<cluster>/cluster.yaml is missing or wrong; the message names the file and field."""


def _version(value: str) -> str:
    parts = value.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or parts[0] != "1":
        raise ValueError(f"{value!r} is not a Kubernetes minor version such as '1.33'")
    return value


def _quantity(value: object) -> str:
    try:
        if parse_quantity(value) < 0:
            raise ValueError(f"{value!r} must not be negative")
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return str(value)


def _label_key(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if not name or len(name) > 63 or (prefix and len(prefix) > 253) or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"{value!r} is not a label key ([prefix/]name, name at most 63 characters)")
    return value


def _scheduler(value: str) -> str:
    if value == "default-scheduler" or not is_dns1123_subdomain(value):
        raise ValueError(f"{value!r}: name a scheduler the cluster runs beside default-scheduler (DNS-1123 subdomain)")
    return value


Version = Annotated[str, AfterValidator(_version)]
SchedulerName = Annotated[str, AfterValidator(_scheduler)]


def _priority_class(value: str) -> str:
    # kube-apiserver reserves the prefix for its own classes (kubernetes/kubernetes@v1.36.0:
    # pkg/apis/scheduling/validation/validation.go ValidatePriorityClass, scheduling.SystemPriorityClassPrefix):
    # system-node-critical and system-cluster-critical preempt the platform's own pods
    if value.startswith("system-"):
        raise ValueError(f"{value!r}: a job may not run at a system priority (it would preempt the platform's pods)")
    if not is_dns1123_subdomain(value):
        raise ValueError(f"{value!r} is not a class name (DNS-1123 subdomain)")
    return value


PriorityClassName = Annotated[str, AfterValidator(_priority_class)]
Quantity = Annotated[str, AfterValidator(_quantity)]
LabelKey = Annotated[str, AfterValidator(_label_key)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class NodePool(_Model):
    """``count`` identical nodes: their labels (beyond the per-node hostname) and allocatable resources."""

    name: str
    count: int = Field(ge=1)
    labels: dict[LabelKey, str] = {}
    allocatable: dict[str, Quantity]

    @model_validator(mode="after")
    def _named(self) -> NodePool:
        if not is_dns1123_label(self.name):
            raise ValueError(f"name {self.name!r} must be a DNS-1123 label")
        for key in ("cpu", "memory"):
            if key not in self.allocatable:
                raise ValueError(f"allocatable must say {key} (what one node can give pods)")
        return self

    def amount(self, resource: str) -> Decimal:
        """What one node of the pool can allocate of ``resource`` (0 when it has none)."""
        value = self.allocatable.get(resource)
        return parse_quantity(value) if value is not None else Decimal(0)


class Spec(_Model):
    kubernetes_version: Version
    admission: Literal["webhook", "policy"] = "webhook"
    node_pools: list[NodePool] = Field(min_length=1)
    # node label keys of the network topology, outermost first; the last one is the host
    topology: list[LabelKey] = [HOSTNAME_LABEL]
    monitoring: Literal["none", "prometheus-operator"] = NO_MONITORING
    # schedulers the cluster runs beside default-scheduler (a pod naming another stays Pending)
    schedulers: list[SchedulerName] = []
    # PriorityClasses a job's pods may name (spec.priorityClassName); a pod naming none gets the
    # cluster's default, always allowed. Kueue WorkloadPriorityClasses a job may name (its label
    # kueue.x-k8s.io/priority-class). Any other is refused by validate and by the generated
    # admission policy (trainyard/repo/generate/priority.py).
    job_priority_classes: list[PriorityClassName] = []
    job_workload_priority_classes: list[PriorityClassName] = []

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        if self.admission == "policy" and tuple(map(int, self.kubernetes_version.split("."))) < (1, 36):
            raise ValueError(
                f"admission: policy needs MutatingAdmissionPolicy, GA in Kubernetes 1.36; this cluster runs "
                f"{self.kubernetes_version}: use admission: webhook"
            )
        if not self.topology or self.topology[-1] != HOSTNAME_LABEL:
            raise ValueError(f"topology must end with {HOSTNAME_LABEL} (the host level)")
        if len(set(self.topology)) != len(self.topology):
            raise ValueError("topology lists a label twice")
        names = [p.name for p in self.node_pools]
        if len(set(names)) != len(names):
            raise ValueError("nodePools: two pools have the same name")
        for pool in self.node_pools:
            missing = [k for k in self.topology if k != HOSTNAME_LABEL and k not in pool.labels]
            if missing:
                raise ValueError(f"nodePools: pool {pool.name} has no value for the topology label(s) {missing}")
        return self


class Metadata(_Model):
    name: str


class ClusterFacts(_Model):
    api_version: Literal["trainyard.dev/v1alpha1"]
    kind: Literal["ClusterFacts"]
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def prometheus_operator(self) -> bool:
        """Whether Prometheus Operator runs on the cluster (its CRDs are served)."""
        return self.spec.monitoring == PROMETHEUS_OPERATOR

    def total(self, resource: str) -> Decimal:
        return sum((p.amount(resource) * p.count for p in self.spec.node_pools), Decimal(0))

    def largest_node(self, resource: str) -> Decimal:
        return max((p.amount(resource) for p in self.spec.node_pools), default=Decimal(0))


def load(repo: Repository, cluster: str) -> ClusterFacts:
    """The declared facts of ``cluster``; DeclarationError naming the file and field otherwise."""
    path = repo.root / CLUSTERS / cluster / FILE
    rel = f"{CLUSTERS.as_posix()}/{cluster}/{FILE}"
    try:
        data = yaml.load(read_text_bounded(path), Loader=rawyaml.SafeLoader)  # libyaml's parser where built
    except FileTooLarge as exc:
        raise DeclarationError(str(exc).replace(str(path), rel, 1)) from None
    except FileNotFoundError:
        raise DeclarationError(
            f"{rel}: missing; every cluster declares its Kubernetes version, admission mode and node pools there"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeclarationError(f"{rel}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise DeclarationError(f"{rel}{at}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    try:
        facts = ClusterFacts.model_validate(data)
    except ValidationError as exc:
        raise DeclarationError(describe_fields(exc.errors(include_url=False), rel, KIND)) from None
    if facts.name != cluster:
        raise DeclarationError(f"{rel}: metadata.name is {facts.name!r}, but the folder is {cluster!r}")
    return facts

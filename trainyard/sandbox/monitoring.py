"""A real Prometheus for the sandbox: it discovers the trainer pods through kube-apiserver, scrapes
them on the pod network and the webhook on loopback, and evaluates the repository's alert rules.

In a cluster, Prometheus Operator turns the repository's PodMonitor into a scrape job of role
``pod`` (prometheus-operator@v0.94.1: pkg/prometheus/promcfg.go, ``generatePodMonitorConfig``) and
Prometheus runs as a pod on the pod network. Here:

- :func:`pod_monitor_job` makes that job from the rendered PodMonitor, with the operator's
  relabelings in the operator's order, for the fields the repository sets, and real Prometheus
  applies them;
- Debian's Prometheus is built without Kubernetes service discovery, so :func:`pod_targets` stands
  in for it: it turns the pods kube-apiserver holds into the targets and ``__meta_kubernetes_*``
  labels that role ``pod`` discovers (prometheus@v0.316.0: discovery/kubernetes/pod.go,
  ``buildPod`` and ``podLabels``), written for Prometheus's file discovery;
- the pod network lives in network namespaces, and Prometheus (like the demo that queries it) in
  the host's: :class:`~trainyard.sandbox.podproxy.PodNetworkProxy` is an HTTP proxy on loopback
  (Prometheus's ``proxy_url``) that opens each connection from a network namespace of its own on
  the cluster bridge, as a pod of the monitoring stack would, only to the pod network's addresses,
  and forwards a scrape's GET rebuilt from a strictly parsed head, nothing else;
- the webhook's metrics (its plain-HTTP probe port, where its ServiceMonitor points) are scraped
  on loopback, where the local webhook listens.

The Prometheus is Debian's package (``/usr/bin/prometheus``, the one ``make`` installs for promtool).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from trainyard.cluster.controlplane import wait_ready
from trainyard.cluster.processes import Daemon, free_port, spawn
from trainyard.contract.errors import UserError
from trainyard.repo.model.rendered_facts import WEBHOOK_SERVICE
from trainyard.repo.upstream.matching import selector_matches
from trainyard.sandbox.podproxy import Dialer, PodNetworkProxy

# --- the scrape configuration ----------------------------------------------------------------

# The PodMonitor's relabeling fields as the operator writes them into Prometheus's configuration
# (prometheus-operator@v0.94.1: pkg/apis/monitoring/v1/types.go RelabelConfig; the keys of
# Prometheus's relabel_config).
RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def _sanitize(label: str) -> str:
    """A label name as Kubernetes SD and the operator write it: [^a-zA-Z0-9_] becomes _
    (promcfg.go sanitizeLabelName)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in label)


def _meta(labels: dict[str, str], role: str, kind: str, values: dict | None) -> None:
    """discovery/kubernetes/kubernetes.go addObjectAnnotationsAndLabels: each label (annotation)
    as ``__meta_kubernetes_<role>_label_<name>`` and ``..._labelpresent_<name>``."""
    for key, value in (values or {}).items():
        name = _sanitize(str(key))
        labels[f"__meta_kubernetes_{role}_{kind}_{name}"] = str(value)
        labels[f"__meta_kubernetes_{role}_{kind}present_{name}"] = "true"


def pod_targets(pods: list[dict], namespaces: set[str] | None) -> list[dict]:
    """File-discovery target groups for ``pods`` as role ``pod`` discovers them (pod.go ``buildPod``):
    one target per container port (a container without ports: one at the pod's address), none for a
    pod without an address yet."""
    groups = []
    for pod in pods:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        if namespaces is not None and meta.get("namespace") not in namespaces:
            continue
        ip = status.get("podIP") or ""
        if not ip:
            continue
        ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "unknown")
        labels = {
            "__meta_kubernetes_namespace": meta.get("namespace", ""),
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_ready": str(ready).lower(),
            "__meta_kubernetes_pod_phase": status.get("phase", ""),
            "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
            "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
            "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        }
        _meta(labels, "pod", "label", meta.get("labels"))
        _meta(labels, "pod", "annotation", meta.get("annotations"))
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner:
            labels["__meta_kubernetes_pod_controller_kind"] = owner.get("kind", "")
            labels["__meta_kubernetes_pod_controller_name"] = owner.get("name", "")
        targets = []
        containers = [(c, False) for c in spec.get("containers") or []]
        containers += [(c, True) for c in spec.get("initContainers") or []]
        for c, init in containers:
            base = {"__meta_kubernetes_pod_container_name": c.get("name", ""),
                    "__meta_kubernetes_pod_container_image": c.get("image", ""),
                    "__meta_kubernetes_pod_container_init": str(init).lower()}  # fmt: skip
            if not c.get("ports"):
                targets.append({"__address__": ip, **base})
            for port in c.get("ports") or []:
                number = str(port.get("containerPort", ""))
                targets.append({
                    "__address__": f"[{ip}]:{number}" if ":" in ip else f"{ip}:{number}",
                    **base,
                    "__meta_kubernetes_pod_container_port_number": number,
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
                })  # fmt: skip
        # file discovery takes one label set per group: one group per target, the pod's labels in each
        groups += [{"targets": [t.pop("__address__")], "labels": {**labels, **t}} for t in targets]
    return groups


def pod_monitor_job(monitor: dict, targets_file: Path, proxy_url: str, interval: str) -> tuple[dict, set[str] | None]:
    """The scrape job Prometheus Operator makes of a rendered PodMonitor's first endpoint
    (promcfg.go ``generatePodMonitorConfig``: the same relabelings in the same order), for the
    fields the repository uses; a field it does not follow is refused by name, never left out.
    One Prometheus shard: the operator's sharding relabeling keeps every target then. The
    endpoint's ``interval`` gives way to the demo's ``interval`` (a short job). Returns the
    job, its targets read from ``targets_file`` (:func:`pod_targets`), and the namespaces its
    selector picks (None: all)."""
    meta, spec = monitor["metadata"], monitor.get("spec") or {}
    namespace = meta.get("namespace", "default")
    name = f"{namespace}/{meta['name']}"
    followed = {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel", "podTargetLabels"}
    selector = spec.get("selector") or {}
    endpoints = spec.get("podMetricsEndpoints") or []
    unknown = sorted(set(spec) - followed) + sorted(f"selector.{k}" for k in set(selector) - {"matchLabels"})
    if len(endpoints) == 1:
        extra = set(endpoints[0]) - {"port", "path", "interval", "relabelings", "scheme"}
        unknown += sorted(f"podMetricsEndpoints[0].{k}" for k in extra)
    else:
        unknown.append(f"{len(endpoints)} podMetricsEndpoints (it follows one)")
    if unknown:
        raise UserError(f"PodMonitor {name}: the sandbox's Prometheus does not follow {', '.join(unknown)}")
    endpoint = endpoints[0]
    ns_selector = spec.get("namespaceSelector") or {}
    namespaces: set[str] | None = {namespace}
    if ns_selector.get("matchNames"):
        namespaces = set(ns_selector["matchNames"])
    elif ns_selector.get("any"):
        namespaces = None
    port = str(endpoint["port"])
    relabel: list[dict] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
    ]
    for label, value in sorted((selector.get("matchLabels") or {}).items()):
        relabel.append({
            "action": "keep",
            "source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(label)}",
                              f"__meta_kubernetes_pod_labelpresent_{_sanitize(label)}"],
            "regex": f"({value});true",
        })  # fmt: skip
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    for label in spec.get("podTargetLabels") or []:
        relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(label)}"],
                        "target_label": _sanitize(label), "regex": "(.+)", "replacement": "${1}"})  # fmt: skip
    relabel.append({"target_label": "job", "replacement": name})
    if spec.get("jobLabel"):
        relabel.append({"source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(spec['jobLabel'])}"],
                        "target_label": "job", "regex": "(.+)", "replacement": "${1}"})  # fmt: skip
    relabel.append({"target_label": "endpoint", "replacement": port})
    files = {"files": [str(targets_file)]}
    job = _scrape_job(f"podMonitor/{name}/0", endpoint, interval, relabel, proxy_url=proxy_url, file_sd_configs=[files])
    return job, namespaces


def _scrape_job(name: str, endpoint: dict, interval: str, relabel: list[dict], **discovery: Any) -> dict:
    """A monitor endpoint's scrape job: its path and scheme, the operator's relabelings, then the
    endpoint's own (camelCase fields as Prometheus's keys)."""
    relabel = relabel + [{RELABEL_KEYS[k]: v for k, v in r.items() if k in RELABEL_KEYS}
                         for r in endpoint.get("relabelings") or []]  # fmt: skip
    return {
        "job_name": name,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
        **discovery,
        "relabel_configs": relabel,
    }


def rule_groups(rules: list[dict]) -> list[dict]:
    """The groups of rendered PrometheusRules, as Prometheus reads a rule file."""
    return [g for r in rules for g in (r.get("spec") or {}).get("groups") or []]


# --- the server --------------------------------------------------------------------------------


@dataclass
class Prometheus:
    """``prometheus`` on 127.0.0.1 with a configuration of its own, stopped by :meth:`close`."""

    folder: Path
    config: dict
    rules: list[dict] = field(default_factory=list)
    binary: str = "prometheus"
    daemon: Daemon | None = None
    url: str = ""

    def start(self, timeout: float = 60) -> None:
        path = shutil.which(self.binary)
        if path is None:
            raise UserError(
                "the demo's Prometheus needs the prometheus command: install Debian's prometheus package "
                "(apt-get install --no-install-recommends prometheus; make demo does it when run as root)"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        config = dict(self.config)
        if self.rules:
            (self.folder / "rules.yaml").write_text(yaml.safe_dump({"groups": self.rules}, sort_keys=False))
            config["rule_files"] = [str(self.folder / "rules.yaml")]
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [path, f"--config.file={self.folder / 'prometheus.yml'}", f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
        self.daemon = spawn("prometheus", argv, self.folder / "prometheus.log", (port,))
        wait_ready(self.daemon, lambda: httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200,
                   "prometheus's /-/ready", timeout=timeout)  # fmt: skip

    def _get(self, path: str, params: dict[str, str]) -> Any:
        doc = httpx.get(f"{self.url}{path}", params=params, timeout=30).json()  # an error too is a JSON document
        if doc.get("status") != "success":
            raise UserError(f"Prometheus refused {params.get('query', path)!r}: {doc.get('error', doc)}")
        return doc["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", params)["result"]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return self._get("/api/v1/query_range", params)["result"]

    def alerts(self) -> list[dict]:
        return self._get("/api/v1/alerts", {})["alerts"]

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()


# --- the demo's monitoring -------------------------------------------------------------------

SCRAPE_INTERVAL = "1s"  # a demo job trains for tens of seconds; a cluster scrapes every 30 s


def service_monitor_job(monitor: dict, service: dict, address: str, interval: str) -> dict:
    """The scrape job Prometheus Operator makes of a ServiceMonitor's first endpoint (promcfg.go
    ``generateServiceMonitorConfig``), for a Service whose one endpoint is ``address``: the
    target labels it sets (namespace, service, pod-less endpoint, job = the Service's name), then
    the endpoint's relabelings. The local webhook listens on loopback, so its one endpoint is
    given as a static target with the labels endpoints discovery would give it."""
    meta, spec = monitor["metadata"], monitor.get("spec") or {}
    endpoint = (spec.get("endpoints") or [{}])[0]
    port = str(endpoint.get("port", ""))
    svc = service["metadata"]
    labels = {
        "__meta_kubernetes_namespace": svc.get("namespace", ""),
        "__meta_kubernetes_service_name": svc["name"],
        "__meta_kubernetes_endpoint_port_name": port,
    }
    _meta(labels, "service", "label", svc.get("labels"))
    relabel: list[dict] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": port},
    ]
    name = f"serviceMonitor/{meta.get('namespace', 'default')}/{meta['name']}/0"
    return _scrape_job(name, endpoint, interval, relabel, static_configs=[{"targets": [address], "labels": labels}])


class DemoMonitoring:
    """The demo's Prometheus: the rendered PodMonitor's job over the sandbox's pods, the rendered
    ServiceMonitor's over the local webhook's probe port, the rendered PrometheusRules loaded."""

    def __init__(self, cluster: Any, resources: list, folder: Path, webhook_metrics: str | None,
                 webhook_service: str = WEBHOOK_SERVICE) -> None:  # fmt: skip
        from trainyard.sandbox.localpods import CLUSTER_CIDR

        by_kind: dict[str, list[dict]] = {}
        for r in resources:
            by_kind.setdefault(r.kind, []).append(r.doc)
        monitors = by_kind.get("PodMonitor") or []
        if not monitors:
            raise UserError("the cluster renders no PodMonitor: nothing tells Prometheus to scrape the trainer pods")
        self.folder = folder
        self.targets_file = folder / "pods.json"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.targets_file.write_text("[]")
        self.dialer = Dialer(cluster.host_on_pod_network("prometheus"))
        self.proxy = PodNetworkProxy(self.dialer, CLUSTER_CIDR)
        jobs, self.namespaces = [], set()
        for m in monitors:
            job, namespaces = pod_monitor_job(m, self.targets_file, self.proxy.url, SCRAPE_INTERVAL)
            jobs.append(job)
            self.namespaces = None if namespaces is None or self.namespaces is None else self.namespaces | namespaces
        # Of the ServiceMonitors, the webhook's is followed: the local webhook is the one Service
        # whose endpoint runs here on loopback. The others (Kueue's) are named as not scraped.
        self.not_scraped: list[str] = []
        services = by_kind.get("Service") or []
        for sm in by_kind.get("ServiceMonitor") or []:
            selector, ns = (sm.get("spec") or {}).get("selector"), sm["metadata"].get("namespace")
            webhook = next(
                (s for s in services
                 if (s["metadata"].get("namespace"), s["metadata"]["name"]) == (ns, webhook_service)
                 and selector_matches(selector, s["metadata"].get("labels") or {})),
                None,
            )  # fmt: skip
            if webhook is not None and webhook_metrics:
                jobs.append(service_monitor_job(sm, webhook, webhook_metrics, SCRAPE_INTERVAL))
            else:
                self.not_scraped.append(f"{ns}/{sm['metadata']['name']}")
        self.prometheus = Prometheus(
            folder,
            {"global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
             "scrape_configs": jobs},
            rules=rule_groups(by_kind.get("PrometheusRule") or []),
        )  # fmt: skip
        self._written = "[]"

    def start(self) -> None:
        self.prometheus.start()

    def refresh(self, pods: list[dict]) -> None:
        """Write the pods' targets when they changed (Prometheus's file discovery reads the file on
        each change)."""
        text = json.dumps(pod_targets(pods, self.namespaces), sort_keys=True)
        if text != self._written:
            tmp = self.targets_file.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(self.targets_file)
            self._written = text

    def close(self) -> None:
        self.prometheus.close()
        self.proxy.close()


# --- what the report says, as Prometheus answers ------------------------------------------------


@dataclass
class JobMetrics:
    """A job's figures as PromQL answers them, and the queries asked (shown beside each figure)."""

    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (what, value, query)
    loss: list[tuple[float, float]] = field(default_factory=list)
    throughput: list[tuple[float, float]] = field(default_factory=list)
    unit: str = "tokens/s"
    firing: list[str] = field(default_factory=list)


def _scalar(result: list[dict]) -> float | None:
    values = [float(r["value"][1]) for r in result]
    return max(values) if values else None


def job_metrics(prom: Prometheus, job: str, cluster: str, start: float, end: float) -> JobMetrics:
    """The job's progress, throughput, loss and last checkpoint between ``start`` and ``end`` (Unix
    seconds), from the series of trainyard.contract.metrics, selected by the labels the scrape
    sets (``job_name``, ``cluster``). Job-wide series are the same on each of the job's pods, so
    they are taken with max, never summed."""
    from trainyard.contract import metrics as m

    sel = f'{m.LABEL_JOB}="{job}",{m.LABEL_CLUSTER}="{cluster}"'
    span = f"{max(int(end - start) + 5, 10)}s"
    out = JobMetrics()

    def ask(what: str, query: str, fmt: str) -> float | None:
        value = _scalar(prom.query(query, at=end))
        out.lines.append((what, "no data" if value is None else fmt.format(value), query))
        return value

    ask("trainer pods scraped", f"count(count by (pod) (max_over_time(up{{{sel}}}[{span}]) == 1))", "{:.0f}")
    ask("steps", f"max(max_over_time({m.STEP.name}{{{sel}}}[{span}]))", "{:.0f}")
    tokens = f"max by ({m.LABEL_JOB}) (rate({m.TOKENS.name}{{{sel}}}[5s]))"
    ask("throughput, mean over the run", f"avg_over_time({tokens}[{span}:1s])", "{:,.0f} tokens/s")
    ask("loss, last", f"max(last_over_time({m.LOSS.name}{{{sel}}}[{span}]))", "{:.4f}")
    step = ask("last committed checkpoint", f"max(max_over_time({m.CHECKPOINT_STEP.name}{{{sel}}}[{span}]))",
               "step {:.0f}")  # fmt: skip
    if step is not None:
        ask("  committed before the job ended",
            f"{end:.3f} - max(max_over_time({m.CHECKPOINT_TIME.name}{{{sel}}}[{span}]))", "{:.1f} s")  # fmt: skip
    ask("restarts of a worker group, most", f"max(max_over_time({m.RESTARTS.name}{{{sel}}}[{span}]))", "{:.0f}")
    ask("pods that resumed a checkpoint", f"count(max_over_time({m.RESUMES.name}{{{sel}}}[{span}]) > 0)", "{:.0f}")
    ask("webhook reviews that patched a pod",
        f'sum(max_over_time({m.WEBHOOK_REVIEWS}{{outcome="patched"}}[{span}]))', "{:.0f}")  # fmt: skip
    step_s = max(1.0, round((end - start) / 120, 1))
    for target, query in ((out.loss, f"max({m.LOSS.name}{{{sel}}})"), (out.throughput, tokens)):
        for series in prom.query_range(query, start, end, step_s)[:1]:
            for t, v in series["values"]:
                if target and float(t) - start - target[-1][0] > 2.5 * step_s:
                    target.append((target[-1][0] + step_s, float("nan")))  # no scrape: a gap, not a line
                target.append((float(t) - start, float(v)))
    out.firing = sorted({a["labels"].get("alertname", "?") for a in prom.alerts() if a.get("state") == "firing"})
    return out


def plot(metrics: JobMetrics, job: str, path: Path, fault: tuple[float, str] | None = None) -> Path:
    """Loss and throughput over the run, as a small PNG; ``fault``: when (seconds from the start)
    and what, marked on both."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.8), sharex=True, dpi=100)
    for ax, series, label in ((top, metrics.loss, "loss"), (bottom, metrics.throughput, metrics.unit)):
        if series:
            ax.plot([t for t, _ in series], [v for _, v in series], linewidth=1.5, marker=".", markersize=3)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        if fault is not None:
            ax.axvline(fault[0], color="tab:red", linestyle="--", linewidth=1, label=fault[1])
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    if fault is not None:
        top.legend(loc="upper right", fontsize="small")
    bottom.set_xlabel("seconds since the job was synced (gaps: no pod was serving)")
    top.set_title(f"{job}: as Prometheus scraped it")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

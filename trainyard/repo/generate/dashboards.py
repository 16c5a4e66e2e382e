"""The Grafana dashboards of a training job and of the platform, shipped as ConfigMaps that
Grafana's dashboard sidecar loads.

Built with grafana-foundation-sdk, Grafana's own typed builders (generated from the dashboard
schema), so a panel is checked by its types rather than written as JSON by hand. Every series and
label of the trainer and the webhook comes from :mod:`trainyard.contract.metrics`; the series of
Kueue and kube-apiserver are named below, each with the upstream file that defines it.

Variables (``$cluster``, ``$namespace``, ``$job_name``) select the job; ``$__rate_interval`` is
Grafana's own rate window. Each panel's description says what question it answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, TooltipDisplayMode
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from trainyard.contract import metrics as m
from trainyard.repo.generate.pod_security import NAME as POD_SECURITY_POLICY
from trainyard.repo.model.rendered_facts import VAP_NAME, WEBHOOK_NAMESPACE, WEBHOOK_SERVICE
from webhook.metrics import OUTCOMES

FOLDER = "base/monitoring/dashboards"
SOURCE = "trainyard/repo/generate/dashboards.py"

# --- upstream series ---------------------------------------------------------------------------
# kubernetes/apiserver@v0.36.5: pkg/admission/plugin/policy/validating/metrics/metrics.go
# (namespace "apiserver", subsystem "validating_admission_policy", counter "check_total", labels
# policy, policy_binding, error_type, enforcement_action: "deny" when a validation refused).
VAP_CHECKS = "apiserver_validating_admission_policy_check_total"
VAP_POLICY = "policy"
VAP_ACTION = "enforcement_action"
VAP_DENY = "deny"
# kubernetes-sigs/kueue@v0.19.2: pkg/metrics/metrics.go (subsystem "kueue"): the gauge
# pending_workloads{cluster_queue, status, replica_role} ("active" | "inadmissible") and the
# histogram admission_wait_time_seconds{cluster_queue, priority_class, replica_role}.
KUEUE_PENDING = "kueue_pending_workloads"
KUEUE_WAIT_SECONDS = "kueue_admission_wait_time_seconds"
KUEUE_QUEUE = "cluster_queue"
KUEUE_STATUS = "status"
# Prometheus's own per-target series; a ServiceMonitor's targets get job=<Service name> unless it
# sets jobLabel (prometheus-operator: pkg/apis/monitoring/v1/servicemonitor_types.go, JobLabel).
UP = "up"
# The webhook's outcome label (webhook/metrics.py, Reviews.collect); the outcomes that are an
# answer to the review, every other one is a failure to answer it.
OUTCOME = "outcome"
ANSWERED = ("patched", "unchanged", "skipped", "denied")
FAILED = tuple(o for o in OUTCOMES if o not in ANSWERED)
UPSTREAM_SERIES = (VAP_CHECKS, KUEUE_PENDING, KUEUE_WAIT_SECONDS, UP)

# --- the sidecar -------------------------------------------------------------------------------
# kube-prometheus-stack's values.yaml (grafana.sidecar.dashboards): label grafana_dashboard,
# labelValue "1", searchNamespace ALL: a ConfigMap so labelled in any namespace is loaded.
SIDECAR_LABEL = "grafana_dashboard"
SIDECAR_LABEL_VALUE = "1"
# kiwigrid/k8s-sidecar src/sidecar.py: the folder annotation defaults to this name; a relative value
# is a subfolder of the sidecar's folder (src/resources.py, _get_destination_folder), which Grafana
# shows as a folder when the chart sets provider.foldersFromFilesStructure.
FOLDER_ANNOTATION = "k8s-sidecar-target-directory"
GRAFANA_FOLDER = "trainyard"

VAR_DATASOURCE = "datasource"
VAR_CLUSTER = m.LABEL_CLUSTER
VAR_NAMESPACE = m.LABEL_NAMESPACE
VAR_JOB = m.LABEL_JOB
RATE = "$__rate_interval"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=f"${{{VAR_DATASOURCE}}}")


@dataclass(frozen=True)
class Dashboard:
    name: str  # the ConfigMap's and the file's
    uid: str
    model: dict  # the dashboard JSON


def _query(expr: str, legend: str, ref: str, *, instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def _targets(panel: Builder, queries: list[tuple[str, str]], *, instant: bool = False) -> Builder:
    for i, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + i), instant=instant))  # type: ignore[attr-defined]
    return panel


def _series(title: str, question: str, unit: str, queries: list[tuple[str, str]], *, width: int = 12) -> Builder:
    panel = (
        timeseries.Panel().title(title).description(question).unit(unit).datasource(DATASOURCE)
        .span(width).height(8)
        .legend(VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST)
                .placement(LegendPlacement.BOTTOM))
        .tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI))
    )  # fmt: skip
    return _targets(panel, queries)


def _stat(title: str, question: str, unit: str, queries: list[tuple[str, str]], *, width: int = 6) -> Builder:
    panel = (
        stat.Panel().title(title).description(question).unit(unit).datasource(DATASOURCE).span(width).height(8)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )  # fmt: skip
    return _targets(panel, queries)


def _thresholds(*steps: tuple[float | None, str]) -> d.ThresholdsConfig:
    return d.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


def _variable(name: str, label: str, query: str, *, include_all: bool) -> d.QueryVariable:
    v = (
        d.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
    )  # fmt: skip
    if include_all:  # "All" as .*, which also matches a series without the label
        v = v.include_all(True).all_value(".*")
    return v


def _datasource_variable() -> d.DatasourceVariable:
    return d.DatasourceVariable(VAR_DATASOURCE).label("Prometheus").type("prometheus")


def _encode(builder: d.Dashboard) -> dict:
    model = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    # Panel ids must be unique within a dashboard (links and "view panel" use them); the SDK
    # leaves them 0 unless each is set, so they are numbered in layout order here.
    for number, panel in enumerate(model.get("panels", []), 1):
        panel["id"] = number
    return model


# --- the job -----------------------------------------------------------------------------------
def _job_selector() -> str:
    return f'{m.LABEL_CLUSTER}=~"${VAR_CLUSTER}", {m.LABEL_NAMESPACE}="${VAR_NAMESPACE}", {m.LABEL_JOB}="${VAR_JOB}"'


def job() -> Dashboard:
    sel = _job_selector()
    used, expected = m.TRANSPORT.labels
    by_job = f"by ({m.LABEL_JOB})"
    by_rank = f"by ({m.LABEL_NODE_RANK})"

    def q(metric: m.Metric, suffix: str = "") -> str:
        return f"{metric.name}{suffix}{{{sel}}}"

    def quantile(p: float, metric: m.Metric) -> str:
        return f"histogram_quantile({p}, sum by (le) (rate({q(metric, '_bucket')}[{RATE}])))"

    def mean(metric: m.Metric) -> str:
        return f"sum(rate({q(metric, '_sum')}[{RATE}])) / sum(rate({q(metric, '_count')}[{RATE}]))"

    selector_of_info = f'{m.INFO.name}{{{m.LABEL_CLUSTER}=~"${VAR_CLUSTER}"}}'
    builder = (
        d.Dashboard("trainyard: training job").uid("trainyard-job").tags(["trainyard", "training"])
        .description("One training job: progress, step time, checkpoints, restarts and the fabric it runs on")
        .refresh("30s").time("now-3h", "now").timezone("browser").editable()
        .with_variable(_datasource_variable())
        .with_variable(_variable(VAR_CLUSTER, "Cluster", f"label_values({m.INFO.name}, {m.LABEL_CLUSTER})",
                                 include_all=True))
        .with_variable(_variable(VAR_NAMESPACE, "Namespace",
                                 f"label_values({selector_of_info}, {m.LABEL_NAMESPACE})", include_all=False))
        .with_variable(_variable(
            VAR_JOB, "Job",
            f'label_values({m.INFO.name}{{{m.LABEL_CLUSTER}=~"${VAR_CLUSTER}", '
            f'{m.LABEL_NAMESPACE}="${VAR_NAMESPACE}"}}, {m.LABEL_JOB})',
            include_all=False,
        ))
        .with_row(d.Row("Progress"))
        .with_panel(_series(
            "Throughput",
            "How fast is the job training? Tokens and samples per second of the whole job (each pod "
            "counts the whole job's, so this is the largest pod's rate, not their sum).",
            "short",
            [(f"max {by_job} (rate({q(m.TOKENS)}[{RATE}]))", "tokens/s"),
             (f"max {by_job} (rate({q(m.SAMPLES)}[{RATE}]))", "samples/s")],
        ))
        .with_panel(_series(
            "Loss",
            "Is the model learning? The mean training loss of the last step over all ranks.",
            "short",
            [(f"max {by_job} ({q(m.LOSS)})", "loss")],
        ))
        .with_panel(_series(
            "Learning rate",
            "Is the schedule doing what it should (warm-up, decay)? The learning rate of the last step.",
            "short",
            [(f"max {by_job} ({q(m.LEARNING_RATE)})", "learning rate")],
        ))
        .with_panel(_series(
            "Step time",
            "How long does one optimizer step take, and is it getting slower or more uneven? The median "
            "and 95th percentile from the step histogram, and the mean.",
            "s",
            [(quantile(0.5, m.STEP_SECONDS), "p50"), (quantile(0.95, m.STEP_SECONDS), "p95"),
             (mean(m.STEP_SECONDS), "mean")],
        ))
        .with_row(d.Row("Checkpoints"))
        .with_panel(_series(
            "Checkpoint stall",
            "How long does a checkpoint save stop the training loop? The mean time one save blocked it, "
            "and the seconds blocked per second of wall time (every pod blocks together: the largest pod's).",
            "s",
            [(mean(m.CHECKPOINT_BLOCKING), "mean block per save"),
             (f"max(rate({q(m.CHECKPOINT_BLOCKING, '_sum')}[{RATE}]))", "blocked seconds per second")],
            width=12,
        ))
        .with_panel(_stat(
            "Since the last checkpoint",
            "How much work would a crash now lose? Time since the newest committed checkpoint.",
            "s",
            [(f"time() - max {by_job} ({q(m.CHECKPOINT_TIME)})", "age")],
        ))
        .with_panel(_stat(
            "Steps since the last checkpoint",
            "How many steps would a crash now lose, against the checkpoint interval? The step reached "
            "minus the step of the newest committed checkpoint, and the interval.",
            "short",
            [(f"max {by_job} ({q(m.STEP)}) - max {by_job} ({q(m.CHECKPOINT_STEP)})", "steps behind"),
             (f"max {by_job} ({q(m.CHECKPOINT_EVERY)})", "interval")],
        ))
        .with_row(d.Row("Pods and fabric"))
        .with_panel(_series(
            "Restarts and resumes",
            "Is the job crash-looping, and did its restarts resume from a checkpoint? torchrun restarts "
            "of each pod's worker group, and the starts that resumed (with the step they resumed).",
            "short",
            [(f"max {by_rank} ({q(m.RESTARTS)})", "restarts, node {{" + m.LABEL_NODE_RANK + "}}"),
             (f"sum {by_rank} ({q(m.RESUMES)})", "resumed, node {{" + m.LABEL_NODE_RANK + "}}"),
             (f"max {by_rank} ({q(m.RESUMED_FROM)})", "resumed from step, node {{" + m.LABEL_NODE_RANK + "}}")],
        ))
        .with_panel(_stat(
            "World size",
            "Are all the job's processes there? Processes in the job, as each pod sees it.",
            "short",
            [(f"max {by_job} ({q(m.WORLD_SIZE)})", "processes"),
             (f"count {by_job} ({q(m.WORLD_SIZE)})", "pods reporting")],
        ))
        .with_panel(
            _stat(
                "NCCL transport",
                "Does NCCL use the transport the fabric promises on every node? Red: this node rank "
                "uses another transport than the expected one (a lost fabric falls back to sockets).",
                "none",
                [(f"max by ({m.LABEL_NODE_RANK}, {used}, {expected}) ({q(m.TRANSPORT)})",
                  f"node {{{{{m.LABEL_NODE_RANK}}}}}: {{{{{used}}}}} (expected {{{{{expected}}}}})")],
            )
            .thresholds(_thresholds((None, "green"), (1, "red")))
            .mappings([ValueMap({"0": ValueMappingResult(text="as promised", color="green"),
                                 "1": ValueMappingResult(text="mismatch", color="red")})])
        )
        .with_panel(_targets(
            table.Panel().title("Preflight").datasource(DATASOURCE).span(24).height(8).show_header(True)
            .description(
                "Was the fabric really live when each pod started? Each preflight check's status per node "
                "rank (pass, warn, skip, fail, error)."
            )
            .with_transformation(DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True, "Value": True}}
            )),
            [(f"max by ({', '.join((m.LABEL_NODE_RANK, *m.PREFLIGHT.labels))}) ({q(m.PREFLIGHT)}) == 1", "")],
            instant=True,
        ))
    )  # fmt: skip
    return Dashboard("trainyard-dashboard-job", "trainyard-job", _encode(builder))


# --- the platform ------------------------------------------------------------------------------
def platform() -> Dashboard:
    cluster = f'{m.LABEL_CLUSTER}=~"${VAR_CLUSTER}"'
    reviews = f"{m.WEBHOOK_REVIEWS}{{{cluster}}}"
    failed = "|".join(FAILED)
    policies = "|".join((VAP_NAME, POD_SECURITY_POLICY))

    def latency(p: float) -> str:
        return f"histogram_quantile({p}, sum by (le) (rate({m.WEBHOOK_REVIEW_SECONDS}_bucket{{{cluster}}}[{RATE}])))"

    def wait(p: float) -> str:
        return (
            f"histogram_quantile({p}, sum by (le, {KUEUE_QUEUE}) "
            f"(rate({KUEUE_WAIT_SECONDS}_bucket{{{cluster}}}[{RATE}])))"
        )

    builder = (
        d.Dashboard("trainyard: platform").uid("trainyard-platform").tags(["trainyard", "admission", "kueue"])
        .description("The admission path of training pods (webhook, admission policies) and Kueue's queues")
        .refresh("1m").time("now-6h", "now").timezone("browser").editable()
        .with_variable(_datasource_variable())
        .with_variable(
            _variable(VAR_CLUSTER, "Cluster", f"label_values({UP}, {m.LABEL_CLUSTER})", include_all=True)
            .description("The cluster label trainyard's monitors add; Kueue's and kube-apiserver's series carry it "
                         "only where their scrape or Prometheus's external labels add it: on one cluster's "
                         "Prometheus keep All.")
        )
        .with_row(d.Row("Webhook"))
        .with_panel(_series(
            "Webhook reviews by outcome",
            "What is the webhook answering? AdmissionReviews per second by outcome: patched, unchanged, "
            "skipped and denied are answers; the others are reviews it failed to answer.",
            "reqps",
            [(f"sum by ({OUTCOME}) (rate({reviews}[{RATE}]))", "{{" + OUTCOME + "}}")],
        ))
        .with_panel(_series(
            "Webhook latency",
            "Is the webhook well inside the timeout kube-apiserver gives it (its configuration's "
            "timeoutSeconds)? The median and 99th percentile time to answer one review.",
            "s",
            [(latency(0.5), "p50"), (latency(0.99), "p99")],
        ))
        .with_panel(_series(
            "Webhook errors",
            "What share of reviews does the webhook fail to answer (error, invalid, too large, "
            "unsupported media, busy)? It fails open: those pods go on without the fabric settings.",
            "percentunit",
            [(f'sum(rate({m.WEBHOOK_REVIEWS}{{{cluster}, {OUTCOME}=~"{failed}"}}[{RATE}])) '
              f"/ sum(rate({reviews}[{RATE}]))", "failed share")],
        ).thresholds(_thresholds((None, "green"), (0.01, "orange"), (0.05, "red"))))
        .with_panel(_stat(
            "Webhook targets up",
            "Can Prometheus reach every webhook replica? Replicas scraped successfully, of those found.",
            "short",
            [(f'sum({UP}{{{cluster}, job="{WEBHOOK_SERVICE}", namespace="{WEBHOOK_NAMESPACE}"}})', "up"),
             (f'count({UP}{{{cluster}, job="{WEBHOOK_SERVICE}", namespace="{WEBHOOK_NAMESPACE}"}})', "found")],
            width=12,
        ))
        .with_row(d.Row("Admission policies"))
        .with_panel(_series(
            "Policy refusals",
            "Which pods does kube-apiserver refuse, and by which policy? Denials per second of trainyard's "
            "ValidatingAdmissionPolicies: the fabric check (a pod that reached the cluster without its "
            "fabric settings) and the job namespaces' pod security.",
            "reqps",
            [(f'sum by ({VAP_POLICY}) (rate({VAP_CHECKS}{{{cluster}, {VAP_POLICY}=~"{policies}", '
              f'{VAP_ACTION}="{VAP_DENY}"}}[{RATE}]))', "{{" + VAP_POLICY + "}}")],
            width=24,
        ))
        .with_row(d.Row("Kueue"))
        .with_panel(_series(
            "Pending workloads",
            "Are jobs waiting for quota? Workloads pending in each ClusterQueue, active (being tried) or "
            "inadmissible (waiting for the cluster to change).",
            "short",
            [(f"sum by ({KUEUE_QUEUE}, {KUEUE_STATUS}) ({KUEUE_PENDING}{{{cluster}}})",
              "{{" + KUEUE_QUEUE + "}} {{" + KUEUE_STATUS + "}}")],
        ))
        .with_panel(_series(
            "Queue wait",
            "How long does a job wait before Kueue admits it? The median and 95th percentile time from "
            "a workload's creation (or requeue) to its admission, per ClusterQueue.",
            "s",
            [(wait(0.5), "p50 {{" + KUEUE_QUEUE + "}}"), (wait(0.95), "p95 {{" + KUEUE_QUEUE + "}}")],
        ))
    )  # fmt: skip
    return Dashboard("trainyard-dashboard-platform", "trainyard-platform", _encode(builder))


def dashboards() -> list[Dashboard]:
    return [job(), platform()]


# --- the files ---------------------------------------------------------------------------------
def file_name(dash: Dashboard) -> str:
    return dash.name.removeprefix("trainyard-dashboard-") + ".yaml"


def config_map(dash: Dashboard, marker: str) -> str:
    """The ConfigMap of one dashboard as YAML: the JSON (sorted, indented) as a literal block."""
    body = json.dumps(dash.model, indent=2, sort_keys=True, ensure_ascii=False)
    return (
        f"# {marker} from {SOURCE}; do not edit.\n"
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        f"  name: {dash.name}\n"
        f"  namespace: {WEBHOOK_NAMESPACE}\n"
        "  labels:\n"
        f'    {SIDECAR_LABEL}: "{SIDECAR_LABEL_VALUE}"\n'
        "    app.kubernetes.io/part-of: trainyard\n"
        "  annotations:\n"
        f"    {FOLDER_ANNOTATION}: {GRAFANA_FOLDER}\n"
        "data:\n"
        f"  {dash.uid}.json: |\n" + "".join(f"    {line}\n" for line in body.splitlines())
    )


def files(marker: str) -> list[tuple[str, str]]:
    """(path, text) of every dashboard ConfigMap and of the kustomization that lists them."""
    out = [(f"{FOLDER}/{file_name(dash)}", config_map(dash, marker)) for dash in dashboards()]
    resources = "".join(f"  - {path.rsplit('/', 1)[1]}\n" for path, _ in out)
    kustomization = (
        f"# {marker} from {SOURCE}; do not edit.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources:\n{resources}"
    )
    return [*out, (f"{FOLDER}/kustomization.yaml", kustomization)]

"""The Grafana dashboards: the ConfigMaps in git are what the generator builds, every PromQL
expression parses (Debian's promtool) and names only series that exist, every panel says what it
answers, and the variables the expressions use are defined."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.trainyard.repo.conftest import REPO_ROOT, edit
from trainyard.contract import metrics as m
from trainyard.repo.generate import dashboards, files
from webhook.metrics import Metrics

PROMTOOL = "/usr/bin/promtool"
# k8s.io/apimachinery pkg/api/validation/objectmeta.go TotalAnnotationSizeLimitB: client-side apply
# (Argo CD's default) copies the whole object into an annotation, which may not exceed this.
ANNOTATIONS_LIMIT = 256 * 1024

# A label set by the scrape or the Prometheus topology (relabelings, external labels) on any series.
TARGET_LABELS = {m.LABEL_CLUSTER, m.LABEL_NAMESPACE, "pod", "job", "instance", "service"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}  # fmt: skip
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"')
IDENTIFIER = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w(])(?!\s*\()")
VARIABLE = re.compile(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$", re.S)


def _webhook_series() -> dict[str, set[str]]:
    """The webhook's series and their labels, as its real registry exposes them."""
    metrics = Metrics()
    metrics.reviews.count("patched", 0.001)
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _known_series() -> dict[str, set[str]]:
    """Every series a dashboard may read, with the labels it may be selected by."""
    known: dict[str, set[str]] = {}
    for metric in m.METRICS:
        labels = {*m.TRAINER_LABELS, *metric.labels, *m.SCRAPE_LABELS}
        if metric.kind == "histogram":
            known[f"{metric.name}_bucket"] = labels | {"le"}
            known[f"{metric.name}_sum"] = known[f"{metric.name}_count"] = labels
        else:
            known[metric.name] = labels
    for name, labels in _webhook_series().items():
        known[name] = labels | TARGET_LABELS
    known[dashboards.VAP_CHECKS] = {"policy", "policy_binding", "error_type", "enforcement_action", m.LABEL_CLUSTER}
    known[dashboards.KUEUE_PENDING] = {"cluster_queue", "status", "replica_role", m.LABEL_CLUSTER}
    for suffix in ("_bucket", "_sum", "_count"):
        labels = {"cluster_queue", "priority_class", "replica_role", m.LABEL_CLUSTER}
        known[dashboards.KUEUE_WAIT_SECONDS + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    known[dashboards.UP] = TARGET_LABELS
    return known


KNOWN = _known_series()


def unknown_names(expr: str, known: dict[str, set[str]] = KNOWN) -> list[str]:
    """What in a PromQL expression is not a known series, or selects one by a label it lacks."""
    problems = []
    for name, body in SELECTOR.findall(expr):
        for label, _ in MATCHER.findall(body):
            if name in known and label not in known[name]:
                problems.append(f"{name} has no label {label!r}")
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    bare = re.sub(r"\{[^}]*\}", "", bare)  # matchers
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # ranges
    bare = GROUPING.sub(" ", bare)
    for name in IDENTIFIER.findall(bare):
        if name.lower() not in KEYWORDS and name not in known:
            problems.append(f"{name} is not a series the trainer, the webhook, Kueue or kube-apiserver exports")
    return problems


def _grafana_free(expr: str) -> str:
    """The expression as Grafana sends it: its own intervals and the variables' values put in."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    return VARIABLE.sub("value", expr)


def _panels(model: dict) -> list[dict]:
    out = []
    for panel in model["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _expressions(model: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every variable query of a dashboard."""
    out = []
    for panel in _panels(model):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} target {target['refId']}", target["expr"]))
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["query"])
            assert match, f"variable {variable['name']}: {variable['query']!r} is not label_values(series, label)"
            out.append((f"variable {variable['name']}", match.group(1)))
    return out


@pytest.fixture(scope="module")
def built() -> list[dashboards.Dashboard]:
    return dashboards.dashboards()


def _promtool() -> str:
    if not Path(PROMTOOL).is_file() and not shutil.which("promtool"):
        pytest.fail("promtool is missing: install Debian's prometheus package (apt-get install prometheus)")
    return PROMTOOL if Path(PROMTOOL).is_file() else str(shutil.which("promtool"))


def promtool_check(exprs: list[tuple[str, str]], tmp_path: Path) -> subprocess.CompletedProcess:
    """``promtool check rules`` on one recording rule per expression: Prometheus's own parser."""
    rules = [{"record": f"dashboard:expr_{i}", "expr": _grafana_free(e)} for i, (_, e) in enumerate(exprs)]
    path = tmp_path / "dashboard-exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}), encoding="utf-8")
    return subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


# --- the files in git --------------------------------------------------------------------------
def test_the_committed_configmaps_are_what_the_generator_builds(repo):
    for path, text in dashboards.files(files.MARKER):
        on_disk = REPO_ROOT / path
        assert on_disk.is_file(), f"{path} is missing: run `trainyard generate`"
        assert on_disk.read_text(encoding="utf-8") == text, f"{path} differs: run `trainyard generate`"
    assert [p for p, _ in files.stale(repo) if p.startswith(dashboards.FOLDER)] == []


def test_a_hand_edited_dashboard_is_stale_and_generate_repairs_it(repo_copy):
    path = f"{dashboards.FOLDER}/job.yaml"
    edit(repo_copy, path, '"title": "Loss"', '"title": "Lost"')
    stale = dict(files.stale(repo_copy))
    assert f"differs from what {dashboards.SOURCE} generates" in stale[path]
    assert path in files.write(repo_copy)
    assert [p for p, _ in files.stale(repo_copy) if p.startswith(dashboards.FOLDER)] == []


def test_each_configmap_carries_its_dashboard_for_the_sidecar(built):
    namespace = yaml.safe_load((REPO_ROOT / "base/webhook/namespace.yaml").read_text())["metadata"]["name"]
    kustomization = yaml.safe_load((REPO_ROOT / dashboards.FOLDER / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [dashboards.file_name(dash) for dash in built]
    for dash in built:
        text = (REPO_ROOT / dashboards.FOLDER / dashboards.file_name(dash)).read_text(encoding="utf-8")
        doc = yaml.safe_load(text)
        assert (doc["apiVersion"], doc["kind"]) == ("v1", "ConfigMap")
        assert doc["metadata"]["namespace"] == namespace
        assert doc["metadata"]["labels"][dashboards.SIDECAR_LABEL] == "1"
        assert doc["metadata"]["annotations"] == {dashboards.FOLDER_ANNOTATION: dashboards.GRAFANA_FOLDER}
        assert json.loads(doc["data"][f"{dash.uid}.json"]) == dash.model
        assert len(text.encode()) < ANNOTATIONS_LIMIT, f"{dash.name} is too large for client-side apply"


# --- the dashboards ----------------------------------------------------------------------------
def test_every_expression_parses_with_promtool(built, tmp_path):
    exprs = [e for dash in built for e in _expressions(dash.model)]
    assert len(exprs) > 20
    result = promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_refuses_an_expression_that_does_not_parse(tmp_path):
    result = promtool_check([("bad", f"rate({m.TOKENS.name}[5m]"), ("good", f"{m.LOSS.name}")], tmp_path)
    assert result.returncode != 0 and "parse error" in (result.stdout + result.stderr)


def test_every_expression_names_only_series_that_exist(built):
    problems = [f"{dash.uid} {where}: {p}" for dash in built for where, e in _expressions(dash.model)
                for p in unknown_names(e)]  # fmt: skip
    assert problems == []
    read = {name for dash in built for _, e in _expressions(dash.model) for name, _ in SELECTOR.findall(e)}
    # the dashboards read the series: progress, checkpoints, transport, webhook, policies, queues
    for name in (m.TOKENS.name, m.SAMPLES.name, m.LOSS.name, f"{m.STEP_SECONDS.name}_bucket", m.TRANSPORT.name,
                 f"{m.CHECKPOINT_BLOCKING.name}_sum", m.CHECKPOINT_TIME.name, m.RESTARTS.name, m.PREFLIGHT.name,
                 m.WEBHOOK_REVIEWS, f"{m.WEBHOOK_REVIEW_SECONDS}_bucket", dashboards.VAP_CHECKS,
                 dashboards.KUEUE_PENDING, f"{dashboards.KUEUE_WAIT_SECONDS}_bucket"):  # fmt: skip
        assert name in read, name


def test_a_misspelt_series_or_label_is_caught():
    assert unknown_names(f'rate({m.TOKENS.name}{{{m.LABEL_JOB}="$job_name"}}[5m])') == []
    assert unknown_names('sum by (job_name) (rate(trainyard_trainer_tokenz_total{job_name="j"}[5m]))') == [
        "trainyard_trainer_tokenz_total is not a series the trainer, the webhook, Kueue or kube-apiserver exports"
    ]
    assert unknown_names(f'max({m.LOSS.name}{{job="x"}}) / {m.WORLD_SIZE.name}') == [
        f"{m.LOSS.name} has no label 'job'"
    ]
    assert unknown_names(f"{m.LOSS.name} * trainyard_trainer_los") != []


def test_the_webhook_outcomes_split_into_answers_and_failures():
    outcomes = {s.labels[dashboards.OUTCOME] for s in next(
        f for f in text_string_to_metric_families(Metrics().render().decode()) if f.name + "_total" ==
        m.WEBHOOK_REVIEWS).samples}  # fmt: skip
    assert set(dashboards.ANSWERED) | set(dashboards.FAILED) == outcomes
    assert set(dashboards.ANSWERED).isdisjoint(dashboards.FAILED) and "error" in dashboards.FAILED


def test_the_webhook_targets_are_the_webhook_service():
    service = yaml.safe_load((REPO_ROOT / "base/webhook/service.yaml").read_text())["metadata"]
    assert service["name"] == dashboards.WEBHOOK_SERVICE


def test_every_panel_says_what_question_it_answers(built):
    for dash in built:
        for panel in _panels(dash.model):
            if panel["type"] == "row":
                continue
            assert "?" in panel.get("description", ""), f"{dash.uid} panel {panel['title']!r} has no question"


def test_every_variable_an_expression_uses_is_defined(built):
    for dash in built:
        defined = [v["name"] for v in dash.model["templating"]["list"]]
        assert len(defined) == len(set(defined))
        for where, expr in _expressions(dash.model):
            used = {name for name in VARIABLE.findall(expr) if not name.startswith("__")}
            assert used <= set(defined), f"{dash.uid} {where} uses {used - set(defined)}"
        for panel in _panels(dash.model):
            for ref in [panel.get("datasource")] + [t.get("datasource") for t in panel.get("targets", [])]:
                if ref is not None:
                    assert ref == {"type": "prometheus", "uid": f"${{{dashboards.VAR_DATASOURCE}}}"}
    job = {v["name"] for v in built[0].model["templating"]["list"]}
    assert {m.LABEL_CLUSTER, m.LABEL_NAMESPACE, m.LABEL_JOB, dashboards.VAR_DATASOURCE} <= job
    for where, expr in _expressions(built[0].model):  # every panel of the job dashboard selects the job
        if not where.startswith("panel"):
            continue
        assert f'{m.LABEL_JOB}="$job_name"' in expr, expr


def test_the_dashboard_json_is_what_grafana_loads(built):
    uids = [dash.uid for dash in built]
    assert len(set(uids)) == len(uids)
    for dash in built:
        model = dash.model
        assert model["uid"] == dash.uid and len(dash.uid) <= 40  # Grafana's limit on a uid
        assert model["title"] and isinstance(model["schemaVersion"], int) and model["schemaVersion"] > 0
        ids = [p["id"] for p in _panels(model)]
        assert len(set(ids)) == len(ids) and 0 not in ids
        cells: dict[tuple[int, int], str] = {}
        for panel in _panels(model):
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
            xs, ys = range(pos["x"], pos["x"] + pos["w"]), range(pos["y"], pos["y"] + pos["h"])
            for cell in ((x, y) for x in xs for y in ys):
                assert cell not in cells, f"{panel['title']!r} overlaps {cells[cell]!r}"
                cells[cell] = panel["title"]
            refs = [t["refId"] for t in panel.get("targets", [])]
            assert len(set(refs)) == len(refs) and "" not in refs, panel["title"]
            if panel["type"] != "row":
                assert panel["targets"], f"{panel['title']} queries nothing"

"""The alert rules of base/monitoring/rules, rendered with the repository's kustomize exactly as
Argo CD would, checked and unit-tested with the real promtool (Debian's prometheus package).

Each PrometheusRule's spec.groups is written to ``<name>.rules.yaml`` beside copies of the promtool
unit tests of tests/monitoring/rules, which name those files in their rule_files.

A missing promtool fails these tests (with the package to install) rather than skipping them: every
alert's unit test is meant to run in ``make test``, which installs promtool first, and a skip would
let a machine without it report the rules as tested.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from trainyard.contract import metrics as contract
from trainyard.repo.model.kustomize import build_folder

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "base/monitoring/rules"
UNIT_TESTS = Path(__file__).resolve().parent / "rules"
DOCS = ROOT / "docs/observability.md"
RUNBOOKS = "docs/observability.md"
PLATFORM_NAMESPACE = yaml.safe_load((ROOT / "base/webhook/namespace.yaml").read_text())["metadata"]["name"]
TIMEOUT_S = 120
SEVERITIES = {"critical", "warning"}

# The fields of the PrometheusRule CRD (prometheus-operator pkg/apis/monitoring/v1/prometheusrule_types.go:
# RuleGroup and Rule json tags); anything else is dropped or refused by the API server.
GROUP_FIELDS = {"name", "labels", "interval", "query_offset", "rules", "partial_response_strategy", "limit"}
RULE_FIELDS = {"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}

# Label names the rules may use beyond the contract's: Prometheus' own target labels, the webhook's
# outcome (webhook/metrics.py), kube-apiserver's VAP counter (k8s.io/apiserver@v0.36.5
# pkg/admission/plugin/policy/validating/metrics/metrics.go) and Kueue's (kueue@v0.19.2 pkg/metrics/metrics.go).
UPSTREAM_LABELS = {
    "job", "instance", "le",
    "outcome",
    "policy", "policy_binding", "error_type", "enforcement_action",
    "cluster_queue", "status", "priority_class", "replica_role",
}  # fmt: skip
CONTRACT_LABELS = {
    *contract.TRAINER_LABELS,
    *contract.SCRAPE_LABELS,
    *(label for metric in contract.METRICS for label in metric.labels),
}

PROMTOOL_HINT = (
    "promtool is not on PATH: install Debian's prometheus package (apt-get install prometheus); "
    "make test and make test-fast install it"
)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(PROMTOOL_HINT, pytrace=False)
    return found


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


# --------------------------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def rule_objects() -> dict[str, dict]:
    """The PrometheusRules of base/monitoring/rules as kustomize renders them, by name."""
    objects: dict[str, dict] = {}
    for doc, _origin in build_folder(RULES, "base/monitoring/rules"):
        name = doc.get("metadata", {}).get("name")
        assert name not in objects, f"two objects named {name}"
        objects[name] = doc
    assert objects, "base/monitoring/rules renders no object"
    return objects


def alerting_rules(objects: dict[str, dict]) -> list[dict]:
    return [
        rule
        for obj in objects.values()
        for group in obj["spec"]["groups"]
        for rule in group.get("rules", [])
        if "alert" in rule
    ]


def write_rule_files(objects: dict[str, dict], into: Path) -> dict[str, Path]:
    """Each PrometheusRule's spec.groups as a Prometheus rule file ``<name>.rules.yaml``."""
    into.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, obj in objects.items():
        path = into / f"{name}.rules.yaml"
        path.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}, sort_keys=False), encoding="utf-8")
        files[name] = path
    return files


def unit_test_files() -> list[Path]:
    files = sorted(UNIT_TESTS.glob("*.yaml"))
    assert files, f"no promtool unit tests in {UNIT_TESTS}"
    return files


def copy_unit_tests(into: Path) -> list[str]:
    names = []
    for path in unit_test_files():
        shutil.copy(path, into / path.name)
        names.append(path.name)
    return names


@pytest.fixture
def workdir(rule_objects, tmp_path) -> Path:
    """The rendered rule files beside copies of the unit tests."""
    write_rule_files(rule_objects, tmp_path)
    copy_unit_tests(tmp_path)
    return tmp_path


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    found = set()
    for line in markdown.splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).lower())
            found.add(text.replace(" ", "-"))
    return found


# ----------------------------------------------------------------------------------------- manifests


def test_every_object_is_a_prometheus_rule_of_the_platform(rule_objects):
    for name, obj in rule_objects.items():
        where = f"PrometheusRule {name}"
        assert obj["apiVersion"] == "monitoring.coreos.com/v1", where
        assert obj["kind"] == "PrometheusRule", where
        assert obj["metadata"].get("namespace") == PLATFORM_NAMESPACE, where
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "trainyard", where
        groups = obj["spec"]["groups"]
        assert groups, f"{where} has no groups"
        for group in groups:
            assert set(group) <= GROUP_FIELDS, f"{where} group {group.get('name')}: {set(group) - GROUP_FIELDS}"
            for rule in group["rules"]:
                assert set(rule) <= RULE_FIELDS, f"{where} rule {rule.get('alert')}: {set(rule) - RULE_FIELDS}"


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook(rule_objects):
    doc_anchors = anchors(DOCS.read_text(encoding="utf-8"))
    rules = alerting_rules(rule_objects)
    assert len({r["alert"] for r in rules}) == len(rules), "an alert name is used twice"
    for rule in rules:
        name = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity one of {SEVERITIES}"
        notes = rule.get("annotations", {})
        assert notes.get("summary"), f"{name} has no summary"
        assert "$labels." in notes.get("description", ""), f"{name}: its description names no label"
        runbook = notes.get("runbook_url", "")
        path, _, anchor = runbook.partition("#")
        assert path == RUNBOOKS and anchor, f"{name}: runbook_url {runbook!r} is not {RUNBOOKS}#<anchor>"
        assert anchor in doc_anchors, f"{name}: {RUNBOOKS} has no heading with the anchor #{anchor}"


IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def contract_series() -> set[str]:
    names = {contract.WEBHOOK_REVIEWS, contract.WEBHOOK_REVIEW_SECONDS}
    names |= {contract.WEBHOOK_REVIEW_SECONDS + suffix for suffix in HISTOGRAM_SERIES}
    for metric in contract.METRICS:
        names.add(metric.name)
        if metric.kind == "histogram":
            names |= {metric.name + suffix for suffix in HISTOGRAM_SERIES}
    return names


def trainyard_series(expr: str) -> set[str]:
    # label values sit in quotes; drop them so a value is never read as a name
    return {name for name in IDENTIFIER.findall(re.sub(r'"[^"]*"', '""', expr)) if name.startswith("trainyard_")}


def test_every_trainyard_series_in_the_rules_is_in_the_contract(rule_objects):
    known = contract_series()
    used = set()
    for rule in alerting_rules(rule_objects):
        names = trainyard_series(rule["expr"])
        unknown = names - known
        assert not unknown, f"{rule['alert']} names {sorted(unknown)}, not in trainyard/contract/metrics.py"
        used |= names
    assert used, "the rules name no trainyard series: the check above proves nothing"


def test_the_series_check_sees_a_misspelt_name():
    assert trainyard_series(
        'rate(trainyard_trainer_stepz[5m]) > on (job_name) trainyard_webhook_x{a="trainyard_no"}'
    ) == {
        "trainyard_trainer_stepz",
        "trainyard_webhook_x",
    }
    assert not {"trainyard_trainer_stepz"} <= contract_series()


def test_the_series_the_rules_read_are_what_the_exporters_serve(rule_objects):
    """The contract's names against the real exposition of the trainer's and the webhook's
    registries (prometheus_client), so a name changed on one side fails here."""
    from prometheus_client import generate_latest

    from trainer.metrics import Exporter
    from trainyard.contract import reports
    from webhook.metrics import Metrics

    # a trainer of node rank 0 that has stepped and committed a checkpoint: every series it has
    trainer = Exporter(samples_per_step=1, tokens_per_step=1, checkpoint_every=10)
    trainer.observe(
        reports.Step(step=1, loss=1.0, lr=0.1, tokens_per_s=1.0, step_ms=5.0, checkpoint_ms=None, world_size=1)
    )
    trainer.observe(reports.Committed(step=1, mode="sync", blocking_ms=1.0, total_ms=1.0))
    trainer.transport("IB", "IB")
    served = generate_latest(trainer.registry).decode() + Metrics().render().decode()
    exposed = {line.split("{")[0].split(" ")[0] for line in served.splitlines() if line and not line.startswith("#")}
    used = set().union(*(trainyard_series(rule["expr"]) for rule in alerting_rules(rule_objects)))
    assert used <= exposed, f"not served by trainer/metrics.py or webhook/metrics.py: {sorted(used - exposed)}"


LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")


def label_names(rule: dict) -> set[str]:
    expr = rule["expr"]
    names = {n.strip() for group in LABEL_LISTS.findall(expr) for n in group.split(",") if n.strip()}
    for matchers in MATCHERS.findall(expr):
        names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for text in rule.get("annotations", {}).values():
        names |= set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))
    return names


def test_the_rules_use_the_contract_label_names(rule_objects):
    allowed = CONTRACT_LABELS | UPSTREAM_LABELS
    for rule in alerting_rules(rule_objects):
        unknown = label_names(rule) - allowed
        assert not unknown, (
            f"{rule['alert']} uses labels {sorted(unknown)}: neither trainyard/contract/metrics.py's nor upstream's"
        )


# ------------------------------------------------------------------------------------------ promtool


def test_promtool_checks_every_rule_file(rule_objects, tmp_path):
    files = write_rule_files(rule_objects, tmp_path)
    done = run_promtool("check", "rules", *map(str, files.values()), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", done.stdout))
    assert found == sum(len(g["rules"]) for obj in rule_objects.values() for g in obj["spec"]["groups"])


def test_promtool_unit_tests_pass(workdir):
    names = [p.name for p in unit_test_files()]
    done = run_promtool("test", "rules", *names, cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(names), done.stdout


def load_unit_tests() -> dict[str, dict]:
    return {path.name: yaml.safe_load(path.read_text(encoding="utf-8")) for path in unit_test_files()}


def alertnames(suite: dict) -> set[str]:
    return {case["alertname"] for test in suite["tests"] for case in test.get("alert_rule_test", [])}


def test_every_alert_has_a_firing_and_a_quiet_unit_test(rule_objects):
    alerts = {rule["alert"] for rule in alerting_rules(rule_objects)}
    rule_files = {f"{name}.rules.yaml" for name in rule_objects}
    firing: set[str] = set()
    quiet: set[str] = set()
    for name, suite in load_unit_tests().items():
        assert set(suite.get("rule_files", [])) <= rule_files, f"{name}: rule_files other than {sorted(rule_files)}"
        for case in (c for test in suite["tests"] for c in test.get("alert_rule_test", [])):
            alert = case["alertname"]
            where = f"{name}: {alert} at {case['eval_time']}"
            # an alert name misspelt in a test would pass every `exp_alerts: []`
            assert alert in alerts, f"{where}: no rule defines this alert"
            expected = case.get("exp_alerts") or []
            for exp in expected:
                assert exp.get("exp_labels", {}).get("severity"), f"{where}: exp_labels without severity"
                notes = exp.get("exp_annotations", {})
                missing = {"summary", "description", "runbook_url"} - set(notes)
                assert not missing, f"{where}: exp_annotations lack {sorted(missing)}"
            (firing if expected else quiet).add(alert)
    assert not alerts - firing, f"alerts with no unit test where they fire: {sorted(alerts - firing)}"
    assert not alerts - quiet, f"alerts with no unit test where they stay quiet: {sorted(alerts - quiet)}"


NEVER = "vector(1) < 0"


def test_each_alerts_firing_test_fails_against_a_rule_that_never_fires(rule_objects, tmp_path):
    """Each alert in turn made to never fire: the unit tests must then fail and name it, so no
    firing case passes by matching nothing."""
    copy_unit_tests(tmp_path)
    suites = load_unit_tests()
    passed = []
    for alert in sorted(rule["alert"] for rule in alerting_rules(rule_objects)):
        mutant = yaml.safe_load(yaml.safe_dump(rule_objects))
        for rule in alerting_rules(mutant):
            if rule["alert"] == alert:
                rule["expr"] = NEVER
        write_rule_files(mutant, tmp_path)
        names = [name for name, suite in suites.items() if alert in alertnames(suite)]
        assert names, f"no unit test names {alert}"
        done = run_promtool("test", "rules", *names, cwd=tmp_path)
        if done.returncode == 0 or f"alertname: {alert}," not in done.stdout + done.stderr:
            passed.append(alert)
    assert not passed, f"the unit tests still pass when these alerts never fire: {passed}"


def test_a_broken_rule_fails_promtool(rule_objects, tmp_path):
    broken = yaml.safe_load(yaml.safe_dump(rule_objects))
    name = next(iter(broken))
    rule = alerting_rules({name: broken[name]})[0]
    rule["expr"] = rule["expr"] + " +"  # a binary operator with no right-hand side
    files = write_rule_files(broken, tmp_path)
    checked = run_promtool("check", "rules", str(files[name]), cwd=tmp_path)
    assert checked.returncode != 0, checked.stdout
    said = checked.stdout + checked.stderr
    assert "parse error" in said and rule["alert"] in said, said
    copy_unit_tests(tmp_path)
    tested = run_promtool("test", "rules", *[p.name for p in unit_test_files()], cwd=tmp_path)
    assert tested.returncode != 0, tested.stdout


def test_a_missing_promtool_fails_with_the_package_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="Debian's prometheus package"):
        promtool()

"""The trainer's Prometheus exporter: records in, the real HTTP endpoint scraped and parsed with
prometheus_client's own parser; bad env values, a port in use and a failing observe never stop a run.
"""

from __future__ import annotations

import http.client
import io
import json
import math
import os
import re
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.trainer.conftest import FIXTURES, Run, clean_env, trainyard
from trainer import launch, metrics
from trainer.runlog import RunLog
from trainer.transport import check_after_first_collective, own_log_path
from trainyard.cluster.processes import free_port, port_in_use, wait_for
from trainyard.contract import metrics as m
from trainyard.contract import reports
from trainyard.contract.names import ENV_FABRIC

LOCAL = "127.0.0.1"
SAMPLES, TOKENS = 16, 16 * 64


def scrape(port: int) -> dict[str, object]:
    """The families of the endpoint, by name as the parser gives it (a counter's without _total)."""
    with urllib.request.urlopen(f"http://{LOCAL}:{port}{m.METRICS_PATH}", timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(port: int) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for f in scrape(port).values() for s in f.samples}


def value(found: dict, name: str, **labels: str) -> float | None:
    want = {m.LABEL_NODE_RANK: "0", m.LABEL_FABRIC: m.NO_FABRIC, **labels}
    return found.get((name, frozenset(want.items())))


def step(n: int, loss: float | None = 2.0, checkpoint_ms: float | None = None) -> reports.Step:
    return reports.Step(
        step=n, loss=loss, lr=1e-3 * n, tokens_per_s=1.0, step_ms=10.0 * n, checkpoint_ms=checkpoint_ms, world_size=4
    )


START = reports.Start(
    world_size=4, backend="gloo", device="cpu", strategy="ddp", model="tiny", restart=2, resumed_from=10, max_steps=20
)


@pytest.fixture
def exporter():
    made = []

    def make(**kwargs) -> metrics.Exporter:
        exp = metrics.Exporter(samples_per_step=SAMPLES, tokens_per_step=TOKENS, **kwargs)
        exp.serve(0, LOCAL)
        made.append(exp)
        return exp

    yield make
    for exp in made:
        exp.close()


def committed_dir(tmp_path: Path, step_no: int, stamp: object) -> Path:
    path = tmp_path / f"step-{step_no}"
    path.mkdir()
    (path / "trainyard.json").write_text(json.dumps({"step": step_no, "time": stamp}))
    return path


def feed_a_run(exp: metrics.Exporter, tmp_path: Path) -> float:
    """Start, resume from step 10 (committed at 1700000000), three steps (the last saves), a commit."""
    exp.observe(START)
    exp.observe(reports.Resume(step=10, path=str(committed_dir(tmp_path, 10, 1_700_000_000.5)), world_size=4))
    exp.observe(step(11, loss=3.0))
    exp.observe(step(12, loss=None))  # not finite: the last finite loss stays
    exp.observe(step(13, loss=2.5, checkpoint_ms=40.0))
    exp.observe(reports.Checkpoint(step=13, mode="sync", blocking_ms=40.0))
    before = time.time()
    exp.observe(reports.Committed(step=13, mode="sync", blocking_ms=40.0, total_ms=40.0))
    exp.observe(reports.Done(step=13, loss=2.5, params_sha256=None))
    exp.transport("Socket", "IB")
    return before


# ---------------------------------------------------------------------------------- the series


def test_every_contract_metric_is_exposed_with_its_kind_help_labels_and_buckets(exporter, tmp_path):
    exp = exporter(checkpoint_every=5, preflight=[("shm", "pass")])
    feed_a_run(exp, tmp_path)
    families = scrape(exp.port)
    for metric in m.METRICS:
        name = metric.name.removesuffix("_total") if metric.kind == "counter" else metric.name
        assert name in families, metric.name
        family = families[name]
        assert (family.type, family.documentation) == (metric.kind, metric.help)
        values = [s for s in family.samples if not s.name.endswith("_created")]
        assert values, metric.name
        for s in values:
            assert set(s.labels) - {"le"} == {*m.TRAINER_LABELS, *metric.labels}, (metric.name, s.labels)
        if metric.kind == "histogram":
            bounds = [float(s.labels["le"]) for s in values if s.name.endswith("_bucket")]
            assert bounds == [*metric.buckets, math.inf]


def test_before_any_record_counters_are_0_and_no_gauge_claims_a_value(exporter):
    exp = exporter()
    got = samples(exp.port)
    assert value(got, m.STEPS.name) == 0 and value(got, m.STEP_SECONDS.name + "_count") == 0
    for gauge in (m.STEP, m.LOSS, m.LEARNING_RATE, m.WORLD_SIZE, m.CHECKPOINT_STEP, m.CHECKPOINT_TIME, m.RESTARTS):
        assert value(got, gauge.name) is None, gauge.name  # e.g. no checkpoint "committed at 1970"
    exp.observe(step(1, loss=None))
    got = samples(exp.port)
    assert value(got, m.STEP.name) == 1 and value(got, m.LOSS.name) is None


def test_the_records_set_the_values_they_carry(exporter, tmp_path):
    exp = exporter(checkpoint_every=5, preflight=[("shm", "pass"), ("webhook", "warn")])
    committed_after = feed_a_run(exp, tmp_path)
    got = samples(exp.port)
    assert value(got, m.STEP.name) == 13
    assert value(got, m.STEPS.name) == 3
    assert value(got, m.TOKENS.name) == 3 * TOKENS and value(got, m.SAMPLES.name) == 3 * SAMPLES
    assert value(got, m.LOSS.name) == 2.5
    assert value(got, m.LEARNING_RATE.name) == pytest.approx(13e-3)
    assert value(got, m.WORLD_SIZE.name) == 4
    assert value(got, m.STEP_SECONDS.name + "_count") == 3
    assert value(got, m.STEP_SECONDS.name + "_sum") == pytest.approx(0.11 + 0.12 + 0.13)
    assert value(got, m.STEP_SECONDS.name + "_bucket", le="0.1") == 0  # 110-130 ms: above 0.1 s
    assert value(got, m.STEP_SECONDS.name + "_bucket", le="0.25") == 3
    assert value(got, m.CHECKPOINT_BLOCKING.name + "_count") == 1  # from the Step, not also the Checkpoint
    assert value(got, m.CHECKPOINT_BLOCKING.name + "_bucket", le="0.05") == 1
    assert value(got, m.CHECKPOINT_BLOCKING.name + "_bucket", le="0.01") == 0
    assert value(got, m.RESTARTS.name) == 2
    assert value(got, m.RESUMES.name) == 1 and value(got, m.RESUMED_FROM.name) == 10
    assert value(got, m.CHECKPOINT_STEP.name) == 13
    assert committed_after <= value(got, m.CHECKPOINT_TIME.name) <= time.time()
    assert value(got, m.CHECKPOINT_EVERY.name) == 5
    assert value(got, m.INFO.name, model="tiny", strategy="ddp", backend="gloo", device="cpu") == 1
    assert value(got, m.PREFLIGHT.name, check="shm", status="pass") == 1
    assert value(got, m.PREFLIGHT.name, check="webhook", status="warn") == 1
    assert value(got, m.TRANSPORT.name, used="Socket", expected="IB") == 1


def test_a_resume_takes_the_checkpoint_time_from_its_info_file(exporter, tmp_path):
    exp = exporter()
    exp.observe(reports.Resume(step=10, path=str(committed_dir(tmp_path, 10, 1_700_000_000.5)), world_size=4))
    got = samples(exp.port)
    assert value(got, m.CHECKPOINT_STEP.name) == 10
    assert value(got, m.CHECKPOINT_TIME.name) == 1_700_000_000.5
    assert value(got, m.CHECKPOINT_EVERY.name) is None  # no --checkpoint-dir given: no interval


@pytest.mark.parametrize("stamp", ["yesterday", None, True, -5, [1], {"t": 1}, 1e400])
def test_a_resume_with_no_usable_commit_time_leaves_the_timestamp_unset(exporter, tmp_path, stamp):
    exp = exporter()
    exp.observe(reports.Resume(step=7, path=str(committed_dir(tmp_path, 7, stamp)), world_size=4))
    exp.observe(reports.Resume(step=8, path=str(tmp_path / "missing"), world_size=4))
    got = samples(exp.port)
    assert value(got, m.CHECKPOINT_STEP.name) == 8 and value(got, m.CHECKPOINT_TIME.name) is None


def test_a_garbage_info_file_is_no_timestamp_and_no_crash(tmp_path):
    path = tmp_path / "step-1"
    path.mkdir()
    for content in (b"\xff\xfe not json", b"[" * 100_000, b"{}", b"1" * (1 << 20)):
        (path / "trainyard.json").write_bytes(content)
        assert metrics.commit_time(path) is None


def test_only_the_committing_rank_exports_checkpoints(exporter, tmp_path):
    exp = exporter(commits=False)  # the pod of node rank 1: global rank 0 commits, elsewhere
    exp.observe(reports.Resume(step=10, path=str(committed_dir(tmp_path, 10, 1_700_000_000)), world_size=4))
    got = samples(exp.port)
    assert value(got, m.RESUMED_FROM.name) == 10
    assert value(got, m.CHECKPOINT_STEP.name) is None and value(got, m.CHECKPOINT_TIME.name) is None


@pytest.mark.parametrize(
    ("used", "expected", "series"),
    [("IB", "IB", 0), ("Socket", "IB", 1), (None, "IB", None), ("IB", None, None), ('IB"} 1\n#', "IB", None)],
)
def test_the_transport_series_is_set_only_when_both_ends_are_known_words(exporter, used, expected, series):
    exp = exporter()
    exp.transport(used, expected)
    found = [s for s in scrape(exp.port)[m.TRANSPORT.name].samples]
    assert [s.value for s in found] == ([] if series is None else [series])


def test_the_transport_check_says_which_transport_nccl_used(tmp_path):
    pattern = str(tmp_path / "nccl.%h.%p.log")
    lines = (FIXTURES / "nccl" / "socket_fallback.log").read_text()
    own_log_path(pattern).write_text(re.sub(r"^([^:\s]+):211:", rf"\g<1>:{os.getpid()}:", lines, flags=re.M))
    check = check_after_first_collective(pattern, "IB", allow_fallback=False)
    assert (check.used, check.expected, check.verdict.level) == ("Socket", "IB", "error")
    missing = check_after_first_collective(str(tmp_path / "none.%p.log"), "IB", allow_fallback=False)
    assert (missing.used, missing.verdict.level) == (None, "warning")


# ------------------------------------------------------------------------------- the environment


def started(env: dict[str, str], **kwargs):
    out, err = io.StringIO(), io.StringIO()
    exp = metrics.start(
        env, rank=0, samples_per_step=SAMPLES, tokens_per_step=TOKENS, checkpoint_every=None, addr=LOCAL,
        out=out, err=err, **kwargs,
    )  # fmt: skip
    return exp, out.getvalue(), err.getvalue()


def test_the_env_gives_the_port_and_the_labels():
    port = free_port()
    env = {m.ENV_METRICS_PORT: str(port), "GROUP_RANK": "3", "PET_NODE_RANK": "9", ENV_FABRIC: "roce-a"}
    exp, out, err = started(env)
    try:
        assert exp.serving and exp.port == port and err == ""
        assert f"http://{LOCAL}:{port}{m.METRICS_PATH}" in out
        exp.observe(step(1))
        assert value(samples(port), m.STEPS.name, node_rank="3", fabric="roce-a") == 1
    finally:
        exp.close()


@pytest.mark.parametrize(
    ("env", "labels"),
    [
        ({"PET_NODE_RANK": "2"}, ("2", m.NO_FABRIC)),
        ({}, ("0", m.NO_FABRIC)),
        ({"GROUP_RANK": " 07 ", ENV_FABRIC: "  "}, ("7", m.NO_FABRIC)),
        ({"GROUP_RANK": "-1", ENV_FABRIC: 'ib"}\n'}, (metrics.UNKNOWN, metrics.UNKNOWN)),
        ({"GROUP_RANK": "x" * 100_000, ENV_FABRIC: "Ünïcode"}, (metrics.UNKNOWN, metrics.UNKNOWN)),
    ],
)
def test_node_rank_and_fabric_labels_fall_back_and_refuse_what_is_not_one(env, labels):
    warnings: list[str] = []
    assert metrics.trainer_labels(env, warnings.append) == labels
    assert len(warnings) == sum(v == metrics.UNKNOWN for v in labels)
    assert all(len(w) < 200 for w in warnings)


@pytest.mark.parametrize("raw", ["x" * 100_000, "٩٤٠٤", "²", "-1", "65536", "1e3", "94 04", "9404;x", "0x24cc", "00"])
def test_a_port_that_is_not_one_is_a_one_line_warning_and_no_endpoint(raw):
    exp, out, err = started({m.ENV_METRICS_PORT: raw})
    assert isinstance(exp, metrics.NullExporter) and out == ""
    assert err.startswith(f"warning: metrics: {m.ENV_METRICS_PORT}=") and err.count("\n") == 1
    assert "is not a port" in err and "training goes on" in err and len(err) < 300
    exp.observe(step(1))  # and training goes on


@pytest.mark.parametrize("raw", ["0", "off", " OFF ", "no"])
def test_off_exports_nothing_and_says_so(raw):
    exp, out, err = started({m.ENV_METRICS_PORT: raw})
    assert isinstance(exp, metrics.NullExporter) and err == ""
    assert out.startswith("metrics not exported") and out.count("\n") == 1


def test_a_port_in_use_is_a_warning_naming_it_and_the_run_goes_on(tmp_path):
    with socket.socket() as taken:
        taken.bind((LOCAL, 0))
        taken.listen()
        port = taken.getsockname()[1]
        exp, out, err = started({m.ENV_METRICS_PORT: str(port)})
    assert isinstance(exp, metrics.NullExporter) and out == ""
    assert err.count("\n") == 1
    assert f"port {port} is already in use" in err and f"Set {m.ENV_METRICS_PORT} to a free port" in err
    assert f"{m.METRICS_PORT_NAME!r} port" in err
    log = RunLog(tmp_path / "metrics.jsonl", True, 0, exporter=exp)
    log.record(step(1))
    log.close()
    assert reports.decode((tmp_path / "metrics.jsonl").read_text()) == step(1)


@pytest.mark.parametrize("local_rank", ["1", "7", "x"])
def test_only_local_rank_0_serves(local_rank):
    port = free_port()
    exp, out, err = started({m.ENV_METRICS_PORT: str(port), "LOCAL_RANK": local_rank})
    assert isinstance(exp, metrics.NullExporter) and (out, err) == ("", "")
    assert not port_in_use(port)


def test_local_rank_0_or_unset_serves():
    for env in ({"LOCAL_RANK": "0"}, {}):
        port = free_port()
        exp, _, _ = started({m.ENV_METRICS_PORT: str(port), **env})
        try:
            assert exp.serving and port_in_use(port)
        finally:
            exp.close()


# --------------------------------------------------------------------------------- preflight env


@pytest.mark.parametrize(
    ("raw", "pairs", "refused"),
    [
        (None, [], 0),
        ("", [], 0),
        ("shm=pass,nccl-env=warn,gpus=skip", [("shm", "pass"), ("nccl-env", "warn"), ("gpus", "skip")], 0),
        (" shm=pass , ipc-lock=fail", [("shm", "pass"), ("ipc-lock", "fail")], 0),
        ("shm=ok,SHM=pass,=pass,shm,shm=pass=x", [], 5),
        ("shm=pass,shm=fail", [("shm", "pass")], 1),
        ("shm=pass,,", [("shm", "pass")], 2),
        ('shm=pass\n# TYPE x gauge,x"}=pass', [], 2),
        ("ünï=pass,shm=páss", [], 2),
        ("x" * 5000, [], 1),
        (",".join(f"c{i}=pass" for i in range(40)), [(f"c{i}", "pass") for i in range(32)], 1),
    ],
)
def test_preflight_env_parsing_keeps_only_check_status_words(raw, pairs, refused):
    got, problems = metrics.parse_preflight(raw)
    assert got == pairs and len(problems) == refused
    assert all(len(p) < 200 for p in problems)


def test_a_bad_preflight_value_is_one_warning_and_the_good_checks_are_exported():
    port = free_port()
    exp, _, err = started({m.ENV_METRICS_PORT: str(port), m.ENV_PREFLIGHT: "shm=pass,bogus=maybe,x=" + "y" * 999})
    try:
        assert err.count("\n") == 1 and f"{m.ENV_PREFLIGHT}: ignored 2 item(s)" in err and len(err) < 300
        found = scrape(port)[m.PREFLIGHT.name].samples
        assert [(s.labels["check"], s.labels["status"], s.value) for s in found] == [("shm", "pass", 1)]
    finally:
        exp.close()


def test_launch_passes_this_pods_preflight_results_on_and_drops_a_forged_value():
    from trainer import preflight

    env = clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="1", **{m.ENV_PREFLIGHT: "shm=pass,forged=pass"})
    the_plan = launch.plan(env, ["--max-steps", "1"])
    checks = preflight.run_checks(env)
    passed = launch.worker_env(env, the_plan, checks)
    pairs, problems = metrics.parse_preflight(passed[m.ENV_PREFLIGHT])
    assert pairs == [(c.name, c.status) for c in checks] and problems == []  # the real names are words
    assert "forged" not in passed[m.ENV_PREFLIGHT]
    assert m.ENV_PREFLIGHT not in launch.worker_env(env, the_plan, None)  # --skip-preflight: nothing to trust


# --------------------------------------------------------------------------------- the run log


class Recorder:
    def __init__(self) -> None:
        self.seen: list[reports.Record] = []

    def observe(self, record: reports.Record) -> None:
        self.seen.append(record)


def test_the_run_log_hands_every_record_to_the_exporter_on_every_rank(tmp_path):
    recorder = Recorder()
    log = RunLog(tmp_path / "metrics.jsonl", is_main=False, rank=3, exporter=recorder)
    log.record(START)
    log.record(step(1))
    log.close()
    assert recorder.seen == [START, step(1)]
    assert not (tmp_path / "metrics.jsonl").exists()  # the file stays rank 0's


def test_an_exception_inside_observe_warns_once_and_training_goes_on(exporter, tmp_path, capsys):
    exp = exporter()
    log = RunLog(tmp_path / "metrics.jsonl", True, 0, exporter=exp)
    bad = reports.Step(step=1, loss=1.0, lr="fast", tokens_per_s=1.0, step_ms=1.0, checkpoint_ms=None, world_size=1)  # type: ignore[arg-type]
    log.record(bad)
    log.record(bad)
    log.record(step(2))
    log.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exporting a Step record failed (ValueError" in err
    assert "training goes on" in err
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    assert value(samples(exp.port), m.LEARNING_RATE.name) == pytest.approx(2e-3)


def test_observing_a_step_costs_microseconds(exporter):
    exp = exporter()
    record = step(5, checkpoint_ms=3.0)
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        exp.observe(record)
    per_step = (time.perf_counter() - t0) / n
    assert per_step < 100e-6, per_step  # generous for a loaded CI machine; bench/trainer_metrics.py measures


# ------------------------------------------------------------------------- a real torchrun run


@pytest.mark.torchrun
@pytest.mark.timeout(180)
def test_a_launched_pod_serves_its_training_on_the_metrics_port(tmp_path):
    port = free_port()
    ckpt = tmp_path / "ckpt"
    env = clean_env(
        PET_NNODES="1", PET_NPROC_PER_NODE="2", NCCL_SOCKET_IFNAME="lo", TRAINYARD_FABRIC="test-fabric",
        **{m.ENV_METRICS_PORT: str(port)},
    )  # fmt: skip
    args = ["--model", "tiny", "--max-steps", "100000", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5"]
    run = Run(trainyard("launch", "--", *args), env, tmp_path / "run.log")
    labels = {"fabric": "test-fabric"}

    def progressed():
        try:
            got = samples(port)
        except OSError:  # not serving yet
            return None
        done = value(got, m.CHECKPOINT_STEP.name, **labels) or 0
        return got if done >= 5 and (value(got, m.STEPS.name, **labels) or 0) >= 6 else None

    try:
        got = wait_for(progressed, 150, "a committed checkpoint on the metrics endpoint", run.proc)
    finally:
        run.kill()
    steps_total = value(got, m.STEPS.name, **labels)
    # tokens and samples count the GLOBAL batch (16 samples of 64 tokens, the tiny model's context)
    assert value(got, m.SAMPLES.name, **labels) == 16 * steps_total
    assert value(got, m.TOKENS.name, **labels) == 16 * 64 * steps_total
    assert value(got, m.WORLD_SIZE.name, **labels) == 2 and value(got, m.CHECKPOINT_EVERY.name, **labels) == 5
    assert value(got, m.INFO.name, model="tiny", strategy="ddp", backend="gloo", device="cpu", **labels) == 1
    assert value(got, m.PREFLIGHT.name, check="webhook", status="pass", **labels) == 1
    assert value(got, m.RESTARTS.name, **labels) == 0
    out = run.output()
    assert out.count(f"metrics: serving http://0.0.0.0:{port}{m.METRICS_PATH}") == 1  # local rank 0 only
    assert "warning: metrics" not in out


def test_a_finished_run_nobody_scrapes_does_not_wait(exporter):
    exp = exporter()
    exp.observe(step(1))
    assert exp.linger(most=30) == 0.0
    assert metrics.NullExporter().linger() == 0.0


def test_a_finished_run_waits_until_the_next_scrape_has_its_last_step(exporter):
    """With Prometheus scraping, the last step reaches it before the pod ends: linger returns once
    a scrape that began after the last step has been answered in full, so closing the endpoint
    right after it cuts nothing, even when the answer takes a while to render."""
    import threading

    class Slow:  # rendered after the trainer's series: the answer leaves well after they are read
        def describe(self) -> list:
            return []

        def collect(self) -> list:
            time.sleep(0.3)
            return []

    exp = exporter()
    exp.registry.register(Slow())  # type: ignore[arg-type]
    seen: list[float | None] = []
    stop = threading.Event()

    def prometheus() -> None:
        while not stop.wait(0.2):
            try:
                seen.append(value(samples(exp.port), m.STEP.name))
            except (OSError, http.client.HTTPException):  # the endpoint closed: the pod ended
                return

    exp.observe(step(1))
    scraper = threading.Thread(target=prometheus, daemon=True)
    scraper.start()
    try:
        wait_for(lambda: len(seen) >= 2, timeout=10, what="two scrapes")
        exp.observe(step(7))  # the run's last step, then the run ends
        waited = exp.linger(most=30)
        exp.close()  # the pod ends at once
        scraper.join(10)  # its next scrape finds the endpoint closed
    finally:
        stop.set()
        scraper.join()
    assert 0 < waited < 30
    assert seen[-1] == 7.0  # the answer linger waited for arrived whole

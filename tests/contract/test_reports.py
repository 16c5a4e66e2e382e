"""The run log and preflight schema: what the trainer writes, every reader reads back."""

from __future__ import annotations

import json

import pytest

from trainyard.contract import reports
from trainyard.contract.reports import ReportError


@pytest.mark.parametrize(
    "record",
    [
        reports.Step(step=3, loss=1.5, lr=1e-3, tokens_per_s=100.0, step_ms=2.5, checkpoint_ms=None, world_size=2),
        reports.Start(
            world_size=2,
            backend="gloo",
            device="cpu",
            strategy="ddp",
            model="tiny",
            restart=1,
            resumed_from=50,
            max_steps=100,
        ),
        reports.Resume(step=50, path="/c/step-50", world_size=2),
        reports.Checkpoint(step=50, mode="async", blocking_ms=3.0),
        reports.Committed(step=50, mode="sync", blocking_ms=3.0, total_ms=9.0),
        reports.Stopped(signal="SIGTERM", step=7, checkpoint=None),
        reports.Done(step=100, loss=0.25, params_sha256="ab" * 32),
    ],
)
def test_every_record_reads_back_as_written(record):
    line = reports.encode(record, now=123.0)
    back = reports.decode(line)
    if isinstance(record, reports.Step):
        assert back == record and "event" not in json.loads(line)
    else:
        assert back == reports.Timed(record, 123.0)
        assert json.loads(line)["event"] == record.EVENT


def test_a_loss_that_is_not_a_number_is_written_as_null():
    line = reports.encode(reports.Done(step=1, loss=float("nan"), params_sha256=None), now=1.0)
    assert json.loads(line)["loss"] is None
    assert reports.decode(line).record.loss is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"event": "done", "step": "7", "loss": 1, "params_sha256": null, "time": 1}', "Done.step is '7'"),
        ('{"event": "done", "step": 7, "loss": 1, "time": 1}', "Done has no 'params_sha256'"),
        ('{"event": "done", "step": true, "loss": 1, "params_sha256": null, "time": 1}', "Done.step is True"),
        ('{"event": "resumed", "time": 1}', "unknown event 'resumed'"),
        ('{"event": "resume", "step": 1, "path": "p", "world_size": 1}', "no numeric 'time'"),
        ('{"event": "checkpoint", "step": 1, "mode": "lazy", "blocking_ms": 1, "time": 1}', "Checkpoint.mode"),
        ('{"step": 1}', "Step has no 'loss'"),
        ("[1, 2]", "expected a JSON object"),
        ('{"step": 1, "loss"', "not a JSON line"),
        ("[" * 100_000, "not a JSON line"),  # nesting deeper than the parser allows: refused, not a crash
    ],
)
def test_a_line_off_the_schema_names_the_field(line, message):
    with pytest.raises(ReportError, match=message.replace("(", r"\(").replace("'", "'")):
        reports.decode(line, "metrics.jsonl:3")


def test_preflight_document_round_trip():
    checks = [
        reports.CheckResult("shm", "pass", "4 GiB"),
        reports.CheckResult("interface", "fail", "no net1", "check the NAD"),
    ]
    doc = json.dumps(reports.preflight_json(checks, 1))
    assert json.loads(doc)["ok"] is False
    assert reports.read_preflight(doc) == (checks, 1)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ('{"checks": [{"name": "shm", "status": "great", "detail": ""}], "exit_code": 0}', "status is 'great'"),
        ('{"checks": {}, "exit_code": 0}', "a 'checks' list"),
        ('{"checks": [], "exit_code": "0"}', "'exit_code' must be an integer"),
        ('{"checks": [1], "exit_code": 0}', r"checks\[0\] must be an object"),
        ("preflight passed", "not JSON"),
    ],
)
def test_a_preflight_document_off_the_schema_is_refused(doc, message):
    with pytest.raises(ReportError, match=message):
        reports.read_preflight(doc)


def test_timing_fields_read_back_and_lines_written_before_them_still_read():
    start = reports.Start(
        world_size=2, backend="gloo", device="cpu", strategy="ddp", model="tiny", restart=1, resumed_from=50,
        max_steps=100, process_started=10.5, group_ready=12.25, setup_ms=150.0,
    )  # fmt: skip
    assert reports.decode(reports.encode(start, now=13.0)).record == start
    older = '{"event": "resume", "step": 50, "path": "/c/step-50", "world_size": 2, "time": 1}'
    assert reports.decode(older).record == reports.Resume(step=50, path="/c/step-50", world_size=2, load_ms=None)
    with pytest.raises(ReportError, match=r"Resume.load_ms is 'slow'"):
        reports.decode(older.replace('"time"', '"load_ms": "slow", "time"'))

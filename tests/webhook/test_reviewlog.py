from __future__ import annotations

import os

import orjson

from tests.webhook.conftest import example, example_names
from webhook.review import Answer, Record, decide
from webhook.reviewlog import ReviewLog, line


def test_lines_are_batched_and_none_is_lost_at_close(tmp_path):
    path = tmp_path / "log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    log = ReviewLog(fd=fd, interval=3600)  # no timed flush during the test
    for i in range(1000):
        log.write(Record(outcome="patched", uid=f"u{i}", pod="p", ops=3, warnings=["w"]), 0.0012)
    assert path.read_bytes() == b""  # nothing written per line
    log.close()
    os.close(fd)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [line["uid"] for line in lines] == [f"u{i}" for i in range(1000)]
    assert lines[0]["logger"] == "trainyard.webhook.review" and lines[0]["ms"] == 1.2 and lines[0]["ops"] == 3


def test_a_full_buffer_is_written_at_once(tmp_path):
    path = tmp_path / "log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    log = ReviewLog(fd=fd, interval=3600, max_lines=5)
    for i in range(20):
        log.write(Record(outcome="skipped", uid=f"u{i}"), 0.0)
    assert len(path.read_bytes().splitlines()) >= 5
    log.close()
    os.close(fd)
    assert len(path.read_bytes().splitlines()) == 20


def test_a_line_holds_the_records_fields_and_times_to_thousandths(policies):
    answers = [decide(example(name), policies, "roce", "ml") for name in example_names()]
    answers.append(Answer.of(True, "skipped", reason='no "trainer" container', profile="tcp"))
    for answer in answers:
        record = Record(uid="u-1", namespace="ml", pod="p\u00e9")
        answer.fill(record)
        for ts, elapsed, want_ts, want_ms in (
            (1764000000.1234, 0.0012, 1764000000.123, 1.2),
            (1.0005, 0.0123456, 1.001, 12.346),
        ):
            got = orjson.loads(line(ts, record, elapsed))
            assert (got["ts"], got["ms"], got["level"], got["logger"]) == (
                want_ts,
                want_ms,
                "info",
                "trainyard.webhook.review",
            )
            fields = ("uid", "namespace", "pod", "profile", "outcome", "ops", "warnings", "reason")
            assert {f: got[f] for f in fields} == {f: getattr(record, f) for f in fields}

from __future__ import annotations

import os

import orjson

from webhook.review import Record
from webhook.reviewlog import ReviewLog


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

"""The GPU benchmark script also runs on CPU: check that it measures what the README says."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.trainer.conftest import PYTHON, REPO, clean_env

pytestmark = pytest.mark.torchrun


@pytest.mark.timeout(180)
def test_bench_runs_on_cpu_and_reports_sync_and_async(tmp_path):
    out = subprocess.run(
        [PYTHON, "bench/trainer_gpu.py", "--device", "cpu", "--steps", "16", "--checkpoint-every", "8", "--json",
         "--out", str(tmp_path), "--table", str(tmp_path / "table.md")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env(),
        timeout=170,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    table = [line for line in out.stdout.splitlines() if line.startswith("| sync") or line.startswith("| async")]
    assert len(table) == 2
    data = json.loads(out.stdout[out.stdout.index("{") :])
    by_mode = {r["mode"]: r for r in data["results"]}
    assert set(by_mode) == {"sync", "async"}
    for r in by_mode.values():
        assert r["checkpoints"] == 2 and r["tokens_per_s_median"] > 0 and r["stall_ms_median"] > 0
    # a synchronous save blocks for the whole write; an async one only until it is staged
    assert by_mode["sync"]["stall_ms_median"] == pytest.approx(by_mode["sync"]["save_total_ms_median"], rel=0.05)
    assert (tmp_path / "async" / "step-16" / ".metadata").is_file()
    assert (tmp_path / "table.md").read_text().count("\n| ") == 3  # header and the two modes


@pytest.mark.timeout(120)
def test_recovery_bench_splits_a_restart_into_phases(tmp_path):
    table = tmp_path / "recovery.md"
    out = subprocess.run(
        [PYTHON, "bench/recovery.py", "--runs", "1", "--out", str(table)],
        capture_output=True, text=True, cwd=REPO, env=clean_env(), timeout=110,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in table.read_text().splitlines()[6:]}
    phases = ["detection", "restart", "start-up", "rendezvous", "model build", "checkpoint load", "first step"]
    assert list(rows) == [*phases, "total"]
    median = {k: float(v[0]) for k, v in rows.items()}
    assert all(median[p] >= 0 for p in phases) and 0 < median["detection"] < 5
    assert median["total"] == pytest.approx(sum(median[p] for p in phases), abs=0.05)

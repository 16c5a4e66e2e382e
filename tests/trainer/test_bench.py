"""The GPU benchmark script also runs on CPU: check that it measures what the README says."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.trainer.conftest import PYTHON, REPO, clean_env


@pytest.mark.timeout(180)
def test_bench_runs_on_cpu_and_reports_sync_and_async(tmp_path):
    out = subprocess.run(
        [PYTHON, "bench/trainer_gpu.py", "--device", "cpu", "--steps", "16", "--checkpoint-every", "8", "--json",
         "--out", str(tmp_path)],
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

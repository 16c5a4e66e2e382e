"""``trainyard validate`` time: the repository as it is, and copies grown to N jobs.

For each N, a copy of the repository gets N generated job folders in the dev cluster (written
by ``trainyard new-job``'s own writer, a mix of 2-node TrainJobs, PyTorchJobs and TFJobs; a 2-node
MPIJob's launcher and workers need more than the dev namespace's ResourceQuota, which validate
refuses), and ``trainyard validate --cluster dev`` runs in a fresh process (kustomize included):
once with ``--no-cache`` (every folder built by kustomize) and, with the build cache filled by a
first run, 3 times; the median counts. A least-squares line through (N, seconds) gives the cost per job; R² near
1 and equal per-job costs over the lower and upper halves say the growth is linear.

    .venv/bin/python bench/validate.py [--jobs 0,50,100,150,200] [--out bench/results/validate.md]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish  # noqa: E402

from trainyard.repo.jobs.newjob import JobRequest, create  # noqa: E402
from trainyard.repo.model import repository  # noqa: E402

COPIED = ("base", "clusters", "overlays", "policies")
KINDS = ("trainjob", "pytorch", "trainjob", "tf")


def grow(root: Path, jobs: int) -> None:
    repo = repository.load(root)
    for i in range(jobs):
        kind = KINDS[i % len(KINDS)]
        create(repo, JobRequest(name=f"bench-{kind}-{i:03d}", cluster="dev", kind=kind, nodes=2, gpus=1))


def timed_validate(root: Path, cluster: str | None, cache: Path | None) -> float:
    """Seconds of one ``trainyard validate`` in a fresh process; ``cache``: its build cache
    folder (None: ``--no-cache``)."""
    command = [sys.executable, "-m", "trainyard.cli", "validate", "--quiet"]
    command += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    if cluster:
        command += ["--cluster", cluster]
    start = time.perf_counter()
    r = subprocess.run(command, cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"validate failed in {root}:\n{r.stdout}\n{r.stderr}")
    return elapsed


def cold_and_warm(root: Path, cluster: str | None, repeat: int, cache: Path) -> tuple[float, float]:
    """Median seconds without the build cache, and with it filled (by one run first)."""
    cold = statistics.median(timed_validate(root, cluster, None) for _ in range(repeat))
    timed_validate(root, cluster, cache)
    warm = statistics.median(timed_validate(root, cluster, cache) for _ in range(repeat))
    return cold, warm


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """Slope, intercept and R² of the least-squares line."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    intercept = my - slope * mx
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in points)
    ss_tot = sum((y - my) ** 2 for y in ys)
    return slope, intercept, 1 - ss_res / ss_tot if ss_tot else 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="0,50,100,150,200", help="job counts to measure (default 0,50,100,150,200)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "validate.md"))
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.jobs.split(","))
    if len(counts) < 3:
        parser.error("--jobs needs at least 3 counts to tell a line from a curve")

    clusters = sorted(p.name for p in (ROOT / "clusters").iterdir() if p.is_dir())
    all_jobs = [j for c in clusters for j in (ROOT / "overlays" / c / "jobs").glob("*/kustomization.yaml")]
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-cache-") as cache:
        whole_cold, whole_warm = cold_and_warm(ROOT, None, args.repeat, Path(cache))
    print(f"repository, all clusters: {whole_cold:.2f} s without the build cache, {whole_warm:.2f} s with it")
    cold_points, warm_points = [], []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="trainyard-bench-validate-") as tmp:
            root = Path(tmp)
            for name in COPIED:
                shutil.copytree(ROOT / name, root / name)
            grow(root, n)
            jobs = len([d for d in (root / "overlays" / "dev" / "jobs").iterdir() if d.is_dir()])
            cold, warm = cold_and_warm(root, "dev", args.repeat, root / ".trainyard-cache")
        cold_points.append((jobs, cold))
        warm_points.append((jobs, warm))
        print(f"dev with {jobs:4} jobs: {cold:6.2f} s without the build cache, {warm:6.2f} s with it", flush=True)
    lines = [
        f"`trainyard validate` wall time, fresh process, median of {args.repeat}: without the build cache "
        "(`--no-cache`: kustomize builds every folder) and with it filled (no folder changed since the last run).",
        "",
        f"Repository as it is ({len(clusters)} clusters, {len(all_jobs)} jobs): **{whole_cold:.2f} s** without the "
        f"build cache, **{whole_warm:.2f} s** with it.",
        "",
        "| jobs in dev | seconds, no cache | per job (vs previous row) | seconds, cache filled | per job |",
        "|---:|---:|---:|---:|---:|",
    ]
    for i, ((jobs, cold), (_, warm)) in enumerate(zip(cold_points, warm_points, strict=True)):
        steps = ["", ""]
        if i:
            prev = jobs - cold_points[i - 1][0]
            steps = [
                f"{(cold - cold_points[i - 1][1]) / prev * 1000:.1f} ms",
                f"{(warm - warm_points[i - 1][1]) / prev * 1000:.1f} ms",
            ]
        lines.append(f"| {jobs} | {cold:.2f} | {steps[0]} | {warm:.2f} | {steps[1]} |")
    lines.append("")
    for label, points in (("no cache", cold_points), ("cache filled", warm_points)):
        slope, intercept, r2 = fit(points)
        half = len(points) // 2
        low = (points[half][1] - points[0][1]) / (points[half][0] - points[0][0])
        high = (points[-1][1] - points[half][1]) / (points[-1][0] - points[half][0])
        lines.append(
            f"Least squares, {label}: {intercept:.2f} s + **{slope * 1000:.1f} ms per job**, R² = {r2:.4f}; "
            f"per job over the lower half {low * 1000:.1f} ms, upper half {high * 1000:.1f} ms."
        )
        lines.append("")
    table = "\n".join(lines)
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``trainyard validate`` time: the repository as it is, and copies grown to N jobs.

For each N, a copy of the repository gets N generated job folders in the dev cluster (written
by ``trainyard new-job``'s own writer, a mix of 2-node PyTorchJobs, MPIJobs and TFJobs), and
``trainyard validate --cluster dev`` runs in a fresh process (kustomize included), 3 times;
the median counts. A least-squares line through (N, seconds) gives the cost per job; R² near
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

from trainyard.repo import repository  # noqa: E402
from trainyard.repo.newjob import JobRequest, create  # noqa: E402

COPIED = ("base", "clusters", "overlays", "policies")
KINDS = ("pytorch", "pytorch", "mpi", "tf")


def grow(root: Path, jobs: int) -> None:
    repo = repository.load(root)
    for i in range(jobs):
        kind = KINDS[i % len(KINDS)]
        create(repo, JobRequest(name=f"bench-{kind}-{i:03d}", cluster="dev", kind=kind, nodes=2, gpus=1))


def timed_validate(root: Path, cluster: str | None) -> float:
    command = [sys.executable, "-m", "trainyard.cli", "validate", "--quiet"]
    if cluster:
        command += ["--cluster", cluster]
    start = time.perf_counter()
    r = subprocess.run(command, cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"validate failed in {root}:\n{r.stdout}\n{r.stderr}")
    return elapsed


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
    whole = statistics.median(timed_validate(ROOT, None) for _ in range(args.repeat))
    print(f"repository, all clusters: {whole:.2f} s", flush=True)
    points = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="trainyard-bench-validate-") as tmp:
            root = Path(tmp)
            for name in COPIED:
                shutil.copytree(ROOT / name, root / name)
            grow(root, n)
            jobs = len([d for d in (root / "overlays" / "dev" / "jobs").iterdir() if d.is_dir()])
            seconds = statistics.median(timed_validate(root, "dev") for _ in range(args.repeat))
        points.append((jobs, seconds))
        print(f"dev with {jobs:4} jobs: {seconds:6.2f} s", flush=True)
    slope, intercept, r2 = fit(points)
    half = len(points) // 2
    low = (points[half][1] - points[0][1]) / (points[half][0] - points[0][0])
    high = (points[-1][1] - points[half][1]) / (points[-1][0] - points[half][0])
    lines = [
        f"`trainyard validate` wall time, fresh process, kustomize included, median of {args.repeat}.",
        "",
        f"Repository as it is ({len(clusters)} clusters, {len(all_jobs)} jobs): **{whole:.2f} s**.",
        "",
        "| jobs in dev | seconds | seconds per job (vs previous row) |",
        "|---:|---:|---:|",
    ]
    for i, (jobs, seconds) in enumerate(points):
        step = "" if i == 0 else f"{(seconds - points[i - 1][1]) / (jobs - points[i - 1][0]) * 1000:.0f} ms"
        lines.append(f"| {jobs} | {seconds:.2f} | {step} |")
    lines += [
        "",
        f"Least squares: {intercept:.2f} s + **{slope * 1000:.0f} ms per job**, R² = {r2:.4f}; "
        f"per job over the lower half {low * 1000:.0f} ms, upper half {high * 1000:.0f} ms.",
        "",
    ]
    table = "\n".join(lines)
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

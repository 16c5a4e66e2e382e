"""``trainyard validate`` and ``trainyard render`` time and memory: the repository as it is, and
copies grown to N jobs (and, with ``--nodes``, a dev cluster of that many nodes).

For each N, a copy of the repository gets N generated job folders in the dev cluster (written
by ``trainyard new-job``'s own writer, a mix of 2-node TrainJobs, PyTorchJobs and TFJobs; a 2-node
MPIJob's launcher and workers need more than the dev namespace's ResourceQuota, which validate
refuses), and ``trainyard validate --cluster dev`` runs in a fresh process (kustomize included):
once with ``--no-cache`` (every folder built by kustomize) and, with the build cache filled by a
first run, 3 times; the median counts. A least-squares line through (N, seconds) gives the cost per job; R² near
1 and equal per-job costs over the lower and upper halves say the growth is linear.

``--nodes N`` makes the copies' dev cluster declare N nodes (its pool's count in
clusters/dev/cluster.yaml, the generated queues and quotas written again by ``trainyard generate``),
and each copy is also rendered (``trainyard render --cluster dev --out``, cache filled); every
process's peak resident memory is read from the kernel's accounting of the finished child
(``os.wait4``), and each row gives the largest of each command.

    .venv/bin/python bench/validate.py [--jobs 0,50,100,150,200] [--nodes 1024] [--out bench/results/validate.md]
"""

from __future__ import annotations

import argparse
import os
import re
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

from trainyard.repo.generate import files  # noqa: E402
from trainyard.repo.jobs.newjob import JobRequest, create  # noqa: E402
from trainyard.repo.model import declared, repository  # noqa: E402

COPIED = ("base", "clusters", "overlays", "policies")
KINDS = ("trainjob", "pytorch", "trainjob", "tf")


def set_nodes(root: Path, nodes: int) -> None:
    """The dev cluster declares ``nodes`` nodes: its one pool's count."""
    facts = root / "clusters" / "dev" / declared.FILE
    text, count = re.subn(r"(?m)^(\s+count:) \d+", rf"\1 {nodes}", facts.read_text(encoding="utf-8"))
    if count != 1:
        raise SystemExit(f"{facts}: expected one node pool to scale, found {count}")
    facts.write_text(text, encoding="utf-8")


def grow(root: Path, jobs: int, nodes: int | None) -> None:
    if nodes is not None:
        set_nodes(root, nodes)
    repo = repository.load(root)
    files.write(repo)  # the queues and quotas follow the facts
    for i in range(jobs):
        kind = KINDS[i % len(KINDS)]
        create(repo, JobRequest(name=f"bench-{kind}-{i:03d}", cluster="dev", kind=kind, nodes=2, gpus=1))


# the largest peak resident memory of any process timed, by kind (MiB)
PEAK: dict[str, float] = {}


def timed(root: Path, what: str, command: list[str]) -> float:
    """Seconds of one trainyard command in a fresh process; its peak memory kept in PEAK."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed in {root}:\n{out.decode(errors='replace')[-4000:]}")
    PEAK[what] = max(PEAK.get(what, 0.0), usage.ru_maxrss / 1024)  # KiB on Linux
    return elapsed


def timed_validate(root: Path, cluster: str | None, cache: Path | None) -> float:
    """Seconds of one ``trainyard validate`` in a fresh process; ``cache``: its build cache
    folder (None: ``--no-cache``)."""
    command = [sys.executable, "-m", "trainyard.cli", "validate", "--quiet"]
    command += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    if cluster:
        command += ["--cluster", cluster]
    return timed(root, "validate", command)


def timed_render(root: Path, out: Path, cache: Path) -> float:
    """Seconds of one ``trainyard render --cluster dev --out`` (the build cache at ``cache``)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "trainyard.cli", "render", "--cluster", "dev", "--out", str(out)]
    return timed(root, "render", [*command, "--cache-dir", str(cache)])


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
    parser.add_argument("--nodes", type=int, help="the dev cluster of the copies declares this many nodes")
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
    cold_points, warm_points, render_points = [], [], []
    memory: list[tuple[float, float]] = []  # each row's peak MiB: validate, render
    for n in counts:
        PEAK.clear()
        with tempfile.TemporaryDirectory(prefix="trainyard-bench-validate-") as tmp:
            root = Path(tmp)
            for name in COPIED:
                shutil.copytree(ROOT / name, root / name)
            grow(root, n, args.nodes)
            jobs = len([d for d in (root / "overlays" / "dev" / "jobs").iterdir() if d.is_dir()])
            cache = root / ".trainyard-cache"
            cold, warm = cold_and_warm(root, "dev", args.repeat, cache)
            rendered = statistics.median(timed_render(root, Path(tmp) / "render", cache) for _ in range(args.repeat))
        cold_points.append((jobs, cold))
        warm_points.append((jobs, warm))
        render_points.append((jobs, rendered))
        memory.append((PEAK["validate"], PEAK["render"]))
        print(
            f"dev with {jobs:4} jobs: {cold:6.2f} s without the build cache, {warm:6.2f} s with it, "
            f"render {rendered:6.2f} s; peak memory {memory[-1][0]:.0f} and {memory[-1][1]:.0f} MiB",
            flush=True,
        )
    nodes = f"{args.nodes} nodes declared" if args.nodes else "its own nodes"
    lines = [
        f"`trainyard validate` wall time, fresh process, median of {args.repeat}: without the build cache "
        "(`--no-cache`: kustomize builds every folder) and with it filled (no folder changed since the last run); "
        f"`trainyard render --cluster dev --out DIR` with the cache filled. The dev cluster of the copies: {nodes}.",
        "",
        f"Repository as it is ({len(clusters)} clusters, {len(all_jobs)} jobs): **{whole_cold:.2f} s** without the "
        f"build cache, **{whole_warm:.2f} s** with it.",
        "",
        "| jobs in dev | seconds, no cache | per job (vs previous row) | seconds, cache filled | per job "
        "| render, seconds | peak MiB, validate | peak MiB, render |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, ((jobs, cold), (_, warm), (_, rendered), (v_mib, r_mib)) in enumerate(
        zip(cold_points, warm_points, render_points, memory, strict=True)
    ):
        steps = ["", ""]
        if i:
            prev = jobs - cold_points[i - 1][0]
            steps = [
                f"{(cold - cold_points[i - 1][1]) / prev * 1000:.1f} ms",
                f"{(warm - warm_points[i - 1][1]) / prev * 1000:.1f} ms",
            ]
        cells = [f"{cold:.2f}", steps[0], f"{warm:.2f}", steps[1], f"{rendered:.2f}", f"{v_mib:.0f}", f"{r_mib:.0f}"]
        lines.append(f"| {jobs} | {' | '.join(cells)} |")
    lines.append("")
    lines.append("Peak memory: the largest resident set of any one process of that row (`os.wait4`).")
    lines.append("")
    for label, points in (("no cache", cold_points), ("cache filled", warm_points), ("render", render_points)):
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

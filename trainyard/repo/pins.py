"""``trainyard pins``: every upstream component each cluster installs, as the render finds it, and
the versions the repository builds, tests and ships with.

The versions, sources, reasons, known issues and the newest version each registry served when it
was last probed are the release table's (:mod:`trainyard.repo.model.releases`: recorded, so this
runs offline); which cluster installs what, through which Application, and the images its objects
run come from rendering the clusters, so the table shows what Argo CD will apply, not what a file
claims.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trainyard.repo.model import declared, releases
from trainyard.repo.model.rendered import containers, pod_templates
from trainyard.repo.model.repository import Repository
from trainyard.repo.upstream import app_render


class PinsFailed(Exception):
    pass


@dataclass
class Row:
    release: releases.Release
    clusters: list[str] = field(default_factory=list)
    applications: set[str] = field(default_factory=set)
    images: set[str] = field(default_factory=set)
    objects: dict[str, int] = field(default_factory=dict)  # cluster -> objects it renders

    def as_dict(self) -> dict:
        r = self.release
        source = (
            {"chart": r.chart.name, "chart_repository": r.chart.repo, "chart_version": r.chart.version}
            if r.chart
            else {}
        )
        return {
            "component": r.key,
            "name": r.name,
            "version": r.version,
            "git": r.git,
            "tag": r.git_tag,
            **source,
            "go_module": f"{r.module}@{r.version}",
            "clusters": self.clusters,
            "applications": sorted(self.applications),
            "objects": self.objects,
            "images": sorted(self.images),
            "why": r.why,
            "supported": r.supported,
            **_probe(r.version, r.probe),
            "known_issues": _issues(r.issues),
        }


def _probe(version: str, probe: releases.Probe) -> dict:
    return {
        "newest": probe.newest,
        "gap": releases.gap(version, probe.newest),
        "probed": probe.on,
        "probed_how": probe.how,
        **({"held": probe.held} if probe.held else {}),
    }


def _issues(issues: tuple[releases.Issue, ...]) -> list[dict]:
    return [
        {"ref": i.ref, "what": i.what, "mitigation": i.mitigation, **({"fixed_in": i.fixed_in} if i.fixed_in else {})}
        for i in issues
    ]


def _tool(pin: releases.Pin) -> dict:
    return {
        "component": pin.key,
        "name": pin.name,
        "version": pin.version,
        "pinned_in": pin.pinned_in,
        "why": pin.why,
        **_probe(pin.version, pin.probe),
        "known_issues": _issues(pin.issues),
    }


def collect(repo: Repository, clusters: list[str] | None = None) -> list[Row]:
    """One row per release, in the table's order, with what each cluster's render takes from it."""
    names = [repo.require_cluster(c) for c in clusters] if clusters else repo.clusters()
    rows = {r.key: Row(r) for r in releases.RELEASES}
    for cluster in names:
        render = app_render.render_cluster(repo, cluster)
        failed = [str(p) for p in render.errors()]
        if failed:
            raise PinsFailed(f"{cluster} does not render, so its pins are unknown:\n" + "\n".join(failed))
        rows["argocd"].clusters.append(cluster)  # installed before the bootstrap, on every cluster
        if declared.load(repo, cluster).prometheus_operator:  # installed outside, where the facts say so
            rows["prometheus-operator"].clusters.append(cluster)
        for r in render.resources():
            release = releases.of_upstream(r)
            if release is None:
                continue
            row = rows[release.key]
            if cluster not in row.clusters:
                row.clusters.append(cluster)
            row.objects[cluster] = row.objects.get(cluster, 0) + 1
            if r.app:
                row.applications.add(r.app)
            for _, tpl in pod_templates(r.doc):
                for _, c in containers(tpl):
                    if isinstance(c.get("image"), str):
                        row.images.add(c["image"])
    return [row for row in rows.values() if row.clusters]


def as_json(rows: list[Row]) -> str:
    out = {"components": [r.as_dict() for r in rows], "tools": [_tool(p) for p in releases.TOOLS]}
    return json.dumps(out, indent=2) + "\n"


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]


def _probe_lines(version: str, probe: releases.Probe) -> list[str]:
    lines = [f"  newest:    {probe.newest} ({releases.gap(version, probe.newest)}; probed {probe.on}: {probe.how})"]
    if probe.held:
        lines.append(f"  held:      {probe.held}")
    return lines


def _issue_lines(issues: tuple[releases.Issue, ...]) -> list[str]:
    lines = []
    for i in issues:
        fixed = f" (fixed in {i.fixed_in})" if i.fixed_in else ""
        lines.append(f"  issue:     {i.ref}{fixed}: {i.what}")
        lines.append(f"             mitigation: {i.mitigation}")
    return lines


def as_table(rows: list[Row]) -> str:
    head = ("COMPONENT", "VERSION", "NEWEST", "GAP", "CLUSTERS", "SOURCE", "ISSUES")
    table = [head]
    for row in rows:
        r = row.release
        source = f"chart {r.chart.name} {r.chart.version} ({r.chart.repo})" if r.chart else f"{r.github}@{r.git_tag}"
        gap = releases.gap(r.version, r.probe.newest)
        table.append((r.key, r.version, r.probe.newest, gap, ",".join(row.clusters), source, str(len(r.issues))))
    for p in releases.TOOLS:
        gap = releases.gap(p.version, p.probe.newest)
        table.append((p.key, p.version, p.probe.newest, gap, "-", p.pinned_in.split(" ")[0], str(len(p.issues))))
    lines = _columns(table)
    lines.append("")
    for row in rows:
        r = row.release
        lines.append(f"{r.name} {r.version}")
        lines.append(f"  why:       {r.why}")
        lines.append(f"  supported: {r.supported}")
        lines.append(f"  module:    {r.module}@{r.version} (kube/releases/go.sum)")
        if row.applications:
            counts = sorted(set(row.objects.values()))
            each = f"{counts[0]} objects" if len(counts) == 1 else ", ".join(f"{c} {n}" for c, n in row.objects.items())
            lines.append(f"  installed: {', '.join(sorted(row.applications))} ({each})")
        for image in sorted(row.images):
            lines.append(f"  image:     {image}")
        lines += _probe_lines(r.version, r.probe)
        lines += _issue_lines(r.issues)
        lines.append("")
    for p in releases.TOOLS:
        lines.append(f"{p.name} {p.version}")
        lines.append(f"  why:       {p.why}")
        lines.append(f"  pinned in: {p.pinned_in}")
        lines += _probe_lines(p.version, p.probe)
        lines += _issue_lines(p.issues)
        lines.append("")
    return "\n".join(lines)

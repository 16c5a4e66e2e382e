"""``trainyard pins``: every upstream component each cluster installs, as the render finds it.

The versions, sources, reasons and known issues are the release table's
(:mod:`trainyard.repo.model.releases`); which cluster installs what, through which Application,
and the images its objects run come from rendering the clusters, so the table shows what Argo CD
will apply, not what a file claims.
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
            "known_issues": [{"ref": i.ref, "what": i.what, "mitigation": i.mitigation} for i in r.issues],
            "reviewed": releases.REVIEWED,
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
            release = releases.of_origin(r.origin) if r.extra.get("upstream") else None
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
    return json.dumps({"reviewed": releases.REVIEWED, "components": [r.as_dict() for r in rows]}, indent=2) + "\n"


def as_table(rows: list[Row]) -> str:
    head = ("COMPONENT", "VERSION", "CLUSTERS", "SOURCE", "ISSUES")
    table = [head]
    for row in rows:
        r = row.release
        source = f"chart {r.chart.name} {r.chart.version} ({r.chart.repo})" if r.chart else f"{r.github}@{r.git_tag}"
        table.append((r.key, r.version, ",".join(row.clusters), source, str(len(r.issues))))
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
    lines.append("")
    for row in rows:
        r = row.release
        lines.append(f"{r.name} {r.version}  (reviewed {releases.REVIEWED})")
        lines.append(f"  why:       {r.why}")
        lines.append(f"  supported: {r.supported}")
        lines.append(f"  module:    {r.module}@{r.version} (kube/releases/go.sum)")
        if row.applications:
            counts = sorted(set(row.objects.values()))
            each = f"{counts[0]} objects" if len(counts) == 1 else ", ".join(f"{c} {n}" for c, n in row.objects.items())
            lines.append(f"  installed: {', '.join(sorted(row.applications))} ({each})")
        for image in sorted(row.images):
            lines.append(f"  image:     {image}")
        for i in r.issues:
            lines.append(f"  issue:     {i.ref}: {i.what}")
            lines.append(f"             mitigation: {i.mitigation}")
        lines.append("")
    return "\n".join(lines)

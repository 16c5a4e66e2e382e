"""``trainyard render | pins | generate | validate | preview | new-job``: the GitOps repository's commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainyard.contract.argv import AddParser

if TYPE_CHECKING:  # the commands import the repository's modules when they run, not at start-up
    from trainyard.repo.model.repository import Repository


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "render",
        help="render what Argo CD would apply to each cluster, per Application",
        description="Build clusters/<cluster>/ with kustomize, then follow every Application and ApplicationSet "
        "whose source is this repository (base/repo/repo.env), as Argo CD would, and print the objects as YAML, "
        "Application by Application in sync-wave order (--out: one file per Application). Upstream sources "
        "(Kubeflow Trainer, Kueue, the v1 Training Operator, Multus, cert-manager, Whereabouts, the RDMA device "
        "plugin) are rendered from the Go module of their pinned release (kube/releases/go.sum) with the kustomize "
        "and Helm Argo CD bundles.",
    )
    p.add_argument("--cluster", action="append", default=[], metavar="C", help="a cluster (repeatable; default all)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/<cluster>/NN-<application>.yaml and an INDEX.txt instead of printing YAML",
    )
    _cache_flags(p)
    p.set_defaults(func=_render)

    p = add_parser(
        "pins",
        help="list every upstream component and tool pinned: version, newest served, gap, source, known issues",
        description="Render the clusters and list each upstream release they install (trainyard/repo/model/"
        "releases.py): its version and git tag or chart, the Go module CI reads it from, the clusters and "
        "Applications that install it, the images its objects run, why this version, the known issues with their "
        "mitigation (and the version that fixes each), and the newest version the registry served when it was last "
        "probed (recorded: runs offline), with the gap. Then the same for the versions pinned outside the "
        "Applications: Kubernetes and etcd of the tests, kustomize, Helm, torch and NCCL of the trainer image.",
    )
    p.add_argument("--cluster", action="append", default=[], metavar="C", help="a cluster (repeatable; default all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_pins)

    p = add_parser(
        "generate",
        help="write the manifests derived from policies/ and the clusters' facts (runtimes, Kueue queues)",
        description="Write base/runtimes/<profile>/ (one ClusterTrainingRuntime per FabricProfile in policies/) and "
        "overlays/<cluster>/platform/kueue/ (Kueue Topology, ResourceFlavors, ClusterQueue and LocalQueue from "
        "clusters/<cluster>/cluster.yaml), and delete generated files whose source is gone. Commit the result: Argo "
        "CD syncs these files from git, and trainyard validate fails while one differs from its source.",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 listing the files that are out of date")
    p.set_defaults(func=_generate)

    p = add_parser(
        "validate",
        help="check every cluster: schemas, operator rules, fabric, waves, images, NCCL env, admission",
        description="Render every cluster, upstream releases included (from their pinned Go modules), and check "
        "it: built-in kinds against the Kubernetes 1.30 schemas "
        "(strict), TrainJobs against Kubeflow Trainer's admission rules and their runtime, JobSet and Kueue, v1 "
        "jobs against the Training Operator's admission rules, generated files against their sources, the "
        "webhook's profile and its "
        "network, sync waves, images pinned to a version, commit or digest (upstream ones too, naming the release), "
        "kinds served by the CRDs the cluster installs, bindings and webhooks that reach what they name, "
        "the NCCL env lint, unique job names, and each job's pods against the "
        "ValidatingAdmissionPolicy (CEL) before and after the webhook engine (on a cluster with admission: policy, "
        "its MutatingAdmissionPolicies, with a warning for each rule they cannot express). Exit 1 if anything is "
        "wrong.",
    )
    p.add_argument("--cluster", action="append", default=[], metavar="C", help="a cluster (repeatable; default all)")
    p.add_argument("--previews", metavar="DIR", help="write each job's pod preview to DIR/<cluster>/<job>.txt")
    p.add_argument("--quiet", action="store_true", help="print errors only, no warnings or summary")
    p.add_argument(
        "--changed-since",
        metavar="REF",
        help="check the job folders changed since the git ref REF (git diff REF...HEAD plus uncommitted changes), "
        "in their clusters, and print which and why; every cluster and job when base/, policies/, clusters/, a "
        "cluster's overlays/<c>/platform/ or the tooling changed. A bad ref exits 2",
    )
    _cache_flags(p)
    p.set_defaults(func=_validate)

    p = add_parser(
        "preview",
        help="show the pods a job folder becomes and what the webhook injects into each",
        description="Render a job folder (overlays/<cluster>/jobs/<job>), expand its job into the pods its "
        "controllers create (TrainJob: runtime, Kueue's admission, JobSet, Jobs, pods; v1 kinds: the Training "
        "Operator), run each through the webhook engine with the cluster's default profile and print what was "
        "injected and what the admission policy decides.",
    )
    p.add_argument("path", metavar="PATH", help="a job folder, overlays/<cluster>/jobs/<job>")
    p.add_argument("--diff", action="store_true", help="add a unified diff of each pod, as created -> as admitted")
    p.add_argument("--pods", action="store_true", help="print the admitted pods as YAML instead of the summary")
    p.set_defaults(func=_preview)

    p = add_parser(
        "new-job",
        help="scaffold overlays/<cluster>/jobs/<name>/ and validate the cluster with it",
        description="Write overlays/CLUSTER/jobs/NAME/ (a kustomization on base/jobs/<kind> and a small JSON "
        "patch), refusing to overwrite, then validate the cluster. The default kind is a TrainJob (Kubeflow Trainer "
        "v2) on the cluster's runtime trainyard-<fabric>, queued by Kueue; --kind pytorch|mpi|tf writes a job for "
        "the legacy v1 Training Operator. Arguments after -- go to the trainer (default: --model tiny --data "
        "synthetic; --checkpoint-dir /checkpoints/NAME is added when missing). Your own code: --command runs "
        "your command instead (on a trainer image through `trainyard launch --run`, with the fabric; "
        "arguments after -- are appended to it), --image another image (docs/bring-your-job.md).",
        usage="trainyard new-job NAME --cluster C [--kind trainjob|pytorch|mpi|tf] --nodes N --gpus G "
        "[--elastic MIN:MAX] [--image-tag T | --image REF] [--command 'CMD ARGS'] [-- TRAINER ARGS | -- MORE ARGS]",
    )
    p.add_argument("name", metavar="NAME", help="job name: a DNS-1035 label (lower case, digits, '-')")
    p.add_argument("--cluster", required=True, metavar="C", help="cluster folder under clusters/ and overlays/")
    p.add_argument(
        "--kind",
        default="trainjob",
        choices=["trainjob", "pytorch", "mpi", "tf"],
        help="job kind (default trainjob; pytorch, mpi and tf are the v1 kinds)",
    )
    p.add_argument("--nodes", type=int, required=True, metavar="N", help="pods (nodes) of the job")
    p.add_argument("--gpus", type=int, required=True, metavar="G", help="GPUs per pod (processes per node)")
    p.add_argument("--elastic", metavar="MIN:MAX", help="--kind pytorch only: elastic between MIN and MAX nodes")
    p.add_argument("--image-tag", metavar="T", help="trainer image tag (default: the base's pinned tag)")
    p.add_argument(
        "--image",
        metavar="REF",
        help="the image, a full reference with a release tag or digest: the trainer image, one built FROM it that "
        "the platform declares (the fabric), or any other (no fabric; needs --command)",
    )
    p.add_argument(
        "--command",
        metavar="'CMD ARGS'",
        help="your training command, split as a shell splits words and run without a shell, e.g. "
        "'python train.py --epochs 3' or 'python -m mypkg.train'; its checkpoint folder is $TRAINYARD_CHECKPOINT_DIR",
    )
    p.set_defaults(func=_new_job, takes_passthrough=True)


def _cache_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="keep each folder's kustomize build and each upstream render in DIR, keyed by the content of every "
        "file it reads and the tools' versions (default: $TRAINYARD_CACHE_DIR, else .trainyard-cache/ at the "
        "repository root)",
    )
    p.add_argument("--no-cache", action="store_true", help="build every folder with kustomize; read and write no cache")


def _use_cache(args: argparse.Namespace, repo: Repository) -> None:
    from trainyard.repo.model import build_cache, kustomize

    if not args.no_cache:
        kustomize.use_disk_cache(Path(args.cache_dir) if args.cache_dir else build_cache.default_directory(repo.root))


def _print_problems(problems: list, *, quiet: bool) -> None:
    for p in problems:
        if quiet and p.severity != "error":
            continue
        print(str(p), file=sys.stderr if p.severity == "error" else sys.stdout)


def _render(args: argparse.Namespace) -> int:
    from trainyard.repo import render
    from trainyard.repo.model import repository

    repo = repository.load()
    _use_cache(args, repo)
    text, _ = render.render(repo, args.cluster or None, Path(args.out) if args.out else None)
    sys.stdout.write(text)
    return 0


def _pins(args: argparse.Namespace) -> int:
    from trainyard.contract.errors import CheckFailed
    from trainyard.repo import pins
    from trainyard.repo.model import repository

    repo = repository.load()
    try:
        rows = pins.collect(repo, args.cluster or None)
    except pins.PinsFailed as exc:
        raise CheckFailed(str(exc)) from None
    sys.stdout.write(pins.as_json(rows) if args.json else pins.as_table(rows))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from trainyard.repo import validate
    from trainyard.repo.generate import files
    from trainyard.repo.model import repository

    repo = repository.load()
    if args.check:
        stale = files.stale(repo)
        for path, problem in stale:
            print(f"{path}: {problem}", file=sys.stderr)
        if stale:
            raise validate.ValidationFailed(f"{len(stale)} generated file(s) out of date; run trainyard generate")
        print("every generated file is up to date")
        return 0
    changed = files.write(repo)
    for path in changed:
        print(f"wrote {path}" if (repo.root / path).exists() else f"deleted {path}")
    if not changed:
        print("every generated file is up to date")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from trainyard.repo import validate
    from trainyard.repo.model import repository

    repo = repository.load()
    _use_cache(args, repo)
    clusters = [repo.require_cluster(c) for c in args.cluster] or None
    jobs = None
    if args.changed_since is not None:
        from trainyard.repo.model import changes

        scope = changes.scope(repo, changes.changed_files(repo.root, args.changed_since))
        for line in scope.describe(args.changed_since):
            print(line)
        jobs = None if scope.everything else scope.jobs
    report = validate.validate(repo, clusters, jobs)
    _print_problems(report.problems, quiet=args.quiet)
    if args.previews:
        written = validate.write_previews(report, Path(args.previews))
        if not args.quiet:
            print(f"wrote {len(written)} preview files under {args.previews}/")
    if not args.quiet:
        print(validate.summary(report))
    errors = report.errors()
    if errors:
        files = len({p.where for p in errors})
        raise validate.ValidationFailed(f"validation found {len(errors)} error(s) in {files} file(s); see above")
    return 0


def _preview(args: argparse.Namespace) -> int:
    from trainyard.repo.jobs import preview
    from trainyard.repo.model import repository

    repo = repository.load()
    jobs = preview.preview_path(repo, args.path)
    failed = False
    for jp in jobs:
        if args.pods:
            sys.stdout.write(preview.pods_yaml(jp))
        else:
            sys.stdout.write(preview.format_job(jp, diff=args.diff))
        failed = failed or bool(jp.problems())
    if failed:
        from trainyard.repo.validate import ValidationFailed

        raise ValidationFailed(f"{args.path}: some pods would not be admitted; see the errors above")
    return 0


def _new_job(args: argparse.Namespace) -> int:
    from trainyard.repo import validate
    from trainyard.repo.jobs import newjob, preview
    from trainyard.repo.model import repository

    repo = repository.load()
    req = newjob.JobRequest(
        name=args.name,
        cluster=args.cluster,
        kind=args.kind,
        nodes=args.nodes,
        gpus=args.gpus,
        elastic=newjob.parse_elastic(args.elastic) if args.elastic else None,
        image_tag=args.image_tag,
        # with --command the words after -- are the command's; without, the trainer's arguments
        trainer_args=list(args.passthrough or []) if args.command is None else [],
        image=args.image,
        command=newjob.parse_command(args.command, args.passthrough) if args.command is not None else None,
    )
    written = newjob.create(repo, req)
    for path in written:
        print(f"wrote {repo.rel(path)}")
    report = validate.validate(repo, [req.cluster])
    _print_problems(report.problems, quiet=True)
    folder = repo.rel(written[0].parent)
    # the new folder's own warnings too (what a job on its own image loses, an unscraped port)
    mine = (f"{folder} ", f"{folder}/")
    _print_problems([p for p in report.warnings() if p.where == folder or p.where.startswith(mine)], quiet=False)
    for jp in report.previews.get(req.cluster, []):
        if jp.job.source == folder:
            sys.stdout.write("\n" + preview.format_job(jp))
    errors = report.errors()
    # An error is the new folder's when it points into it; the rest were there before it was written.
    own = [p for p in errors if p.where == folder or p.where.startswith(f"{folder}/")]
    others = sorted({p.where.split(":")[0] for p in errors if p not in own})
    if own:
        raise validate.ValidationFailed(
            f"{folder} was written but does not validate on cluster {req.cluster} ({len(own)} error(s) above); "
            "fix the folder or delete it"
        )
    if others:
        raise validate.ValidationFailed(
            f"{folder} was written and has no error of its own, but cluster {req.cluster} does not validate: "
            f"{len(errors)} error(s) above in {', '.join(others)}, which failed before {folder} was written"
        )
    print(f"\ncluster {req.cluster} validates with {folder}; commit it and open a pull request")
    return 0

"""``trainyard demo`` and ``trainyard kubelet``: the sandbox's commands (``make demo`` runs the first
without arguments; ``trainyard cluster up`` starts the second)."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainyard.contract.argv import AddParser


def _at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "demo",
        help="one job end to end on this machine: a local control plane with the real controllers, the sandbox as "
        "kubelet, a kill and a resume",
        description="Start the cluster's control plane and controllers (trainyard cluster up), register its declared "
        "nodes with the sandbox as their kubelet, and follow the job from git to its end as kube-apiserver holds it, "
        "with the repository's Argo CD health checks: Kueue admission, Trainer's JobSet, the Job controller's pods, "
        "the fabric webhook, scheduling, the pods in network namespaces with eth0 and net1; a worker's container is "
        "killed after a committed checkpoint and the job resumes. --offline: the path without Kubernetes (the job's "
        "pods from the offline expansion, sent to the webhook over TLS, run and trained). Everything it creates is "
        "removed on success, failure and Ctrl-C.",
    )
    p.add_argument("--cluster", default="dev", help="cluster to take the job from (default dev)")
    p.add_argument("--job", default="smoke-ddp", help="job folder under overlays/CLUSTER/jobs (default smoke-ddp)")
    p.add_argument(
        "--offline",
        action="store_true",
        help="without Kubernetes: expand the job offline, send its pods to the webhook, run them (no Go needed; "
        "make demo OFFLINE=1)",
    )
    p.add_argument("--no-fault", action="store_true", help="do not kill a training process halfway")
    p.add_argument(
        "--lose-node",
        action="store_true",
        help="on the control plane: instead of killing a container, lose the worker's node halfway (its Node "
        "deleted, its pods dead); Kueue evicts and requeues the job, the node returns, the job resumes",
    )
    p.add_argument(
        "--no-netns",
        action="store_true",
        help="run the pods as plain local processes on 127.0.0.1 (what happens without root or iproute2)",
    )
    p.add_argument(
        "--max-steps", type=_at_least(2), metavar="N", help="override the job's --max-steps (a shorter run; >= 2)"
    )
    p.add_argument("--checkpoint-every", type=_at_least(1), metavar="K", help="override the job's --checkpoint-every")
    p.add_argument("--timeout", type=float, default=300, help="give up after this many seconds (default 300)")
    p.add_argument("--workdir", help="keep the run's files (logs, checkpoints) here instead of a temp dir")
    p.add_argument("--summary", metavar="FILE", help="also write the report as JSON")
    p.add_argument(
        "--report-dir",
        default="demo-report",
        metavar="DIR",
        help="on the control plane: write the report and the plot of loss and throughput, as Prometheus scraped "
        "them, here (default demo-report/)",
    )
    p.add_argument(
        "--admission",
        choices=("webhook", "policy"),
        default="webhook",
        help="policy: instead of the webhook and the pods, send the job's pods through the "
        "MutatingAdmissionPolicies (their CEL, offline) and compare with the engine; seconds, no root "
        "(default webhook: the whole path)",
    )
    p.set_defaults(func=_demo)

    k = add_parser(
        "kubelet",
        help="be the kubelet of a local cluster's nodes (trainyard cluster up starts it)",
        description="Register the nodes the cluster running in DIR declares, Ready with their Leases, and run "
        "the pods bound to them as make demo does: each in a network namespace with eth0 and its Multus networks, "
        "the trainer image as trainyard launch. Runs until SIGTERM (trainyard cluster down sends it), then stops "
        "its pods and removes their namespaces. Needs root.",
    )
    k.add_argument("--dir", required=True, type=Path, help="the folder given to trainyard cluster up")
    k.set_defaults(func=_kubelet)


def _kubelet(args: argparse.Namespace) -> int:
    from trainyard.sandbox import kubeletd

    return kubeletd.serve(args.dir)


def _demo(args: argparse.Namespace) -> int:
    from trainyard.contract.errors import UserError
    from trainyard.sandbox import clusterdemo, demo

    if args.offline or args.admission == "policy":
        if args.lose_node:
            raise UserError("--lose-node: only on the control plane (without --offline and --admission policy)")
        return demo.main(args)
    if args.lose_node and args.no_fault:
        raise UserError("--lose-node and --no-fault: choose one")
    offline_only = [flag for flag, value in (("--no-netns", args.no_netns), ("--max-steps", args.max_steps),
                    ("--checkpoint-every", args.checkpoint_every), ("--summary", args.summary)) if value]  # fmt: skip
    if offline_only:
        raise UserError(
            f"{', '.join(offline_only)}: only with --offline (on the control plane the job runs as git says)"
        )
    return clusterdemo.main(args)

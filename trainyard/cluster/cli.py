"""``trainyard cluster up|down|build``: the local control plane's commands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainyard.contract.argv import AddParser, bounded_int

if TYPE_CHECKING:
    from trainyard.cluster.controlplane import Started


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "cluster",
        help="a local Kubernetes control plane with a cluster of this repository synced into it",
        description="Kubernetes built from its Go modules (kube/go.mod) and run on 127.0.0.1: etcd, "
        "kube-apiserver, kube-controller-manager and kube-scheduler emulating the cluster's declared version, "
        "the cluster's admission (the fabric webhook or the MutatingAdmissionPolicies), the upstream "
        "controllers (Kueue, JobSet, Kubeflow Trainer, the training operator; kube/controllers/go.mod), and "
        "the repository applied as Argo CD would. The first run builds the components (minutes, progress "
        "shown); later runs start in seconds.",
    )
    sub = p.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)

    u = sub.add_parser(
        "up",
        help="start a cluster in DIR and sync the repository into it",
        description="Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler in DIR, start and "
        "register the cluster's fabric webhook (or apply its MutatingAdmissionPolicies), apply the cluster's "
        "rendered output as Argo CD would, installing and starting each upstream controller from its release "
        "when its wave comes (root needed: each runs in a mount namespace of its own), start `trainyard kubelet` "
        "(the sandbox as the kubelet of the declared nodes, so what is synced runs; root needed), write "
        "DIR/kubeconfig and return once ready. The repository is rendered from DIR/repo.git, a git repository "
        "you clone, commit to and push to, and Argo CD itself (its application controller, repo-server and "
        "ApplicationSet controller, with Redis) runs from then on: a push to main is what changes the cluster. "
        "The processes keep running until `trainyard cluster down --dir DIR`.",
    )
    u.add_argument("--cluster", default="dev", help="cluster of clusters/ to run (default dev)")
    u.add_argument("--dir", required=True, type=Path, help="folder for the cluster's state, PKI, data and logs")
    u.add_argument(
        "--port",
        type=bounded_int(1, 65535, "a port number"),
        default=0,
        help="kube-apiserver's port on 127.0.0.1 (default: a free one)",
    )
    u.add_argument(
        "--no-controllers",
        action="store_true",
        help="do not run the upstream controllers (their CRDs are still installed); with --no-argocd and "
        "--no-kubelet, no root is needed",
    )
    u.add_argument(
        "--no-argocd",
        action="store_true",
        help="render the working tree and do not run Argo CD (no DIR/repo.git; nothing follows a push; Argo CD's "
        "upstream sources listen on port 443, which needs root)",
    )
    u.add_argument(
        "--no-kubelet",
        action="store_true",
        help="do not register the declared nodes with the sandbox as their kubelet (`trainyard kubelet`, "
        "root needed): without it nothing scheduled runs, and Kueue admits nothing",
    )
    u.set_defaults(func=_up)

    d = sub.add_parser(
        "down",
        help="stop the cluster in DIR",
        description="Stop every process `up` started in DIR and remove its data; the logs stay in DIR/logs.",
    )
    d.add_argument("--dir", required=True, type=Path, help="the folder given to `up`")
    d.set_defaults(func=_down)

    b = sub.add_parser(
        "build",
        help="build the pinned Kubernetes components (done on first use by the other commands)",
        description="Build the named targets (default: all) from their Go modules, cached by content: kube "
        "(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from kube/go.mod, kustomize "
        "from kube/kustomize/go.mod, helm from kube/helm/go.mod, the controllers (kueue, jobset, "
        "trainer-controller-manager, training-operator.v1) from kube/controllers/go.mod and argocd "
        "(argocd-application-controller, argocd-repo-server, argocd-applicationset-controller) from "
        "kube/argocd/go.mod. A component's name builds its target. With --into, link the named components "
        "into a folder instead.",
    )
    b.add_argument("names", nargs="*", help="targets or components to build, or with --into to link "
                   "(default: every target; with --into, kustomize kubectl)")  # fmt: skip
    b.add_argument("--into", type=Path, help="folder to put links in (make uses .venv/bin)")
    b.set_defaults(func=_build)


def _say(line: str) -> None:
    print(line, flush=True)


def _up(args: argparse.Namespace) -> int:
    from trainyard.cluster.up import up
    from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE
    from trainyard.repo.model.repository import load

    started = up(
        load(),
        args.cluster,
        args.dir,
        port=args.port,
        run_controllers=not args.no_controllers,
        argocd=not args.no_argocd,
        progress=_say,
    )
    folder = started.folder
    for note in started.state.notes:
        _say(note)
    kubelet = not args.no_kubelet and _start_kubelet(started)
    _say(f"cluster {args.cluster} is up. To use it:")
    _say(f"  export KUBECONFIG={folder / 'kubeconfig'} PATH={folder / 'bin'}:$PATH")
    _say("  kubectl get applications -n argocd")
    if started.served is not None:
        _say(f"  git clone {started.served.url} && cd repo   # Argo CD syncs what you push to main")
        _say(f"  trainyard new-job my-job --cluster {args.cluster} --nodes 2 --gpus 1 && git add -A && "
             "git commit -m 'my job' && git push")  # fmt: skip
    if kubelet:
        _say(f"  kubectl get trainjobs,pytorchjobs,workloads,pods -n {TRAINING_NAMESPACE}   # the synced jobs, run")
    _say(f"Stop it with: trainyard cluster down --dir {args.dir}")
    return 0


KUBELET = "kubelet"
KUBELET_READY = " nodes Ready: "  # the line trainyard kubelet logs once its nodes are registered
LOG_HEAD = 1 << 20  # what of its log is read for that line


def _start_kubelet(started: Started) -> bool:
    """``trainyard kubelet`` for the cluster in ``started.folder``, recorded with its processes (so
    ``down`` stops it first); back once it has registered the nodes. ClusterError with the end of
    its log when it exits or stalls instead, the cluster left running."""
    from trainyard.cluster.controlplane import wait_ready
    from trainyard.cluster.processes import spawn

    folder = started.folder
    if os.geteuid() != 0:
        _say("kubelet: not started: the pods' network namespaces need root (nothing scheduled runs)")
        return False
    argv = [sys.executable, "-m", "trainyard.cli", "kubelet", "--dir", str(folder)]
    daemon = spawn(KUBELET, argv, folder / "logs" / f"{KUBELET}.log")
    started.state.daemons.append(daemon)
    started.state.save(folder)
    wait_ready(daemon, lambda: KUBELET_READY in daemon.log_tail(LOG_HEAD), "the nodes registered", timeout=120)
    # the pods it starts at once may log past the end's default size: the line is in its first lines
    line = next(s for s in daemon.log_tail(LOG_HEAD).splitlines() if KUBELET_READY in s)
    _say(f"kubelet (the sandbox, pid {daemon.pid}, log {daemon.log}): {line.split(' ', 1)[-1]}")
    return True


def _down(args: argparse.Namespace) -> int:
    from trainyard.cluster.controlplane import down

    stopped = down(args.dir)
    kept = f"logs kept in {args.dir / 'logs'}"
    if (args.dir / "repo.git").is_dir():
        kept += f", the repository with what was pushed to it in {args.dir / 'repo.git'}"
    _say(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}; {kept}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from trainyard.cluster import components

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.into:
        for link in components.link_into(args.into, args.names or ["kustomize", "kubectl"], progress=progress):
            _say(f"{link} -> {link.resolve()}")
    else:
        for target in components.targets_of(args.names):
            _say(str(components.build(target, progress=progress)))
    return 0

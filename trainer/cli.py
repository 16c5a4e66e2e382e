"""``trainyard train | preflight | nccl-report | launch``: the trainer image's commands.

torch is imported only inside ``train``, so ``trainyard --help`` stays fast and the commands that
check a pod (preflight, nccl-report, launch) run before torch loads.
"""

from __future__ import annotations

import argparse
import json
import sys

from trainer import launch, options
from trainyard.contract.argv import bounded_int, parse_command_line
from trainyard.contract.errors import UserError, run
from trainyard.contract.names import ENV_SHM_PATH, TRANSPORTS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train (one rank; run it under torchrun, or through `launch`)",
        description="The training loop of the trainer image: DDP or FSDP2, checkpoints with "
        "torch.distributed.checkpoint under --checkpoint-dir (resumed automatically), SIGTERM saves and "
        "exits 0, and on GPUs a check that NCCL uses the transport in TRAINYARD_EXPECT_TRANSPORT. "
        'Rank 0 writes JSON lines to DIR/metrics.jsonl; the last is {"event": "done", ...}.',
    )
    options.add_arguments(p)
    p.set_defaults(func=_train)

    p = sub.add_parser(
        "preflight",
        help="check that the pod's fabric settings are live (shm, net1, IPC_LOCK, NCCL env, GPUs)",
        description="Start-up checks of a trainer pod: /dev/shm is at least TRAINYARD_SHM_BYTES; the "
        "NCCL_SOCKET_IFNAME interface exists, is up and has an address; IPC_LOCK and memlock when "
        "TRAINYARD_EXPECT_TRANSPORT=IB; the NCCL env passes the lint; visible GPUs match the request. "
        "Exit 0: all passed; 1: a check failed; 2: the configuration itself is unusable.",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--shm-path",
        metavar="PATH",
        help=f"the shared-memory mount to check (default: ${ENV_SHM_PATH}, else /dev/shm)",
    )
    p.add_argument(
        "--gpus",
        type=bounded_int(0, None, "a number of GPUs"),
        metavar="N",
        help="GPUs the pod requested (default: counted from NVIDIA_VISIBLE_DEVICES, set by the device plugin)",
    )
    p.set_defaults(func=_preflight)

    p = sub.add_parser(
        "nccl-report",
        help="summarise NCCL_DEBUG=INFO logs: transport per rank, GPUDirect, shm/RDMA warnings",
        description="Parse NCCL_DEBUG=INFO logs (pod logs or NCCL_DEBUG_FILE files): NCCL version, the "
        "network each process chose (IB, RoCE, or Socket), GPUDirect RDMA, intra-node paths, ranks and "
        "Init COMPLETE, and known warnings explained. Exit 1 when --expect is not met.",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="log files")
    p.add_argument("--expect", choices=TRANSPORTS, help="fail (exit 1) unless every process uses this transport")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_nccl_report)

    p = sub.add_parser(
        "launch",
        help="image entrypoint: preflight, then torchrun -m trainer train",
        description="Entrypoint of the trainer image: run preflight, then exec torchrun with `-m trainer train`, "
        "mapping the Training Operator's env (PET_*, MASTER_ADDR/PORT, WORLD_SIZE, RANK) to torchrun's "
        "arguments. Launch's options come first; everything after `--` goes to `train` "
        "(see `trainyard train --help`).",
        usage="trainyard launch [LAUNCH OPTIONS] [-- TRAIN ARGS...]",
    )
    launch.add_arguments(p)
    p.set_defaults(func=_launch, takes_passthrough=True)


def _train(args: argparse.Namespace) -> int:
    cfg = options.from_args(args)
    from trainer import loop

    return loop.run(cfg)


def _preflight(args: argparse.Namespace) -> int:
    from trainer import preflight

    checks = preflight.run_checks(shm_path=args.shm_path, gpus=args.gpus)
    if args.json:
        print(json.dumps(preflight.to_json(checks), indent=2))
    else:
        print(preflight.render(checks))
    return preflight.exit_code(checks)


def _nccl_report(args: argparse.Namespace) -> int:
    from trainer import nccl_log

    for path in args.logs:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise UserError(f"cannot read NCCL log {path}: {exc.strerror}") from exc
    report = nccl_log.parse_files(args.logs)
    if args.json:
        print(json.dumps(nccl_log.to_json(report, args.expect), indent=2))
    else:
        print(nccl_log.render(report, args.expect))
    if args.expect and nccl_log.expectation_failures(report, args.expect):
        return 1
    return 0


def _launch(args: argparse.Namespace) -> int:
    return launch.main(args, args.passthrough or [])


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer COMMAND``: the same commands without the rest of the trainyard CLI."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description="The trainer image's commands.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub)
    args = parse_command_line(parser, dict(sub.choices), sys.argv[1:] if argv is None else argv)
    return run(lambda: args.func(args))

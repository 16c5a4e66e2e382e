"""``trainyard train | preflight | nccl-report | nccl-ras | launch``: the trainer image's commands.

torch is imported only inside ``train``, so ``trainyard --help`` stays fast and the commands that
check a pod (preflight, nccl-report, launch) run before torch loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainer import launch, nccl_log, nccl_ras, options
from trainyard.contract.argv import AddParser, bounded_int, parse_command_line
from trainyard.contract.errors import UserError, run
from trainyard.contract.names import ENV_SHM_PATH, TRANSPORTS


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "train",
        help="train (one rank; run it under torchrun, or through `launch`)",
        description="The training loop of the trainer image: DDP or FSDP2, checkpoints with "
        "torch.distributed.checkpoint under --checkpoint-dir (resumed automatically), SIGTERM saves and "
        "exits 0, and on GPUs a check that NCCL uses the transport in TRAINYARD_EXPECT_TRANSPORT. "
        'Rank 0 writes JSON lines to DIR/metrics.jsonl; the last is {"event": "done", ...}.',
    )
    options.add_arguments(p)
    p.set_defaults(func=_train)

    p = add_parser(
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

    p = add_parser(
        "nccl-report",
        help="summarise NCCL_DEBUG=INFO logs (any release 2.4-2.30) or NCCL RAS JSON: transport, GPUDirect, hangs",
        description="Parse NCCL_DEBUG=INFO logs (pod logs, pasted or edited, or NCCL_DEBUG_FILE files; - reads "
        "standard input, e.g. `kubectl logs POD | trainyard nccl-report -`): NCCL version, the network each process "
        "chose (IB, RoCE, or Socket), GPUDirect RDMA, intra-node paths, ranks and Init COMPLETE, and known warnings "
        "explained. Input that is the JSON of `ncclras -f json` (NCCL 2.28.7+) is read as a RAS report instead: "
        "which ranks are missing or behind in a hung job. Exit 1 when --expect is not met or RAS finds a problem; "
        "2 when the input holds no NCCL lines.",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="log files, or - for standard input")
    p.add_argument("--expect", choices=TRANSPORTS, help="fail (exit 1) unless every process uses this transport")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_nccl_report)

    p = add_parser(
        "nccl-ras",
        help="ask a running job's NCCL (RAS, 2.28.7+) which ranks are missing or behind: diagnose a hang",
        description="Connect to the NCCL RAS service of the job this pod belongs to (every NCCL 2.24+ process "
        "runs one; JSON needs 2.28.7+), fetch the status of every communicator and say which ranks are missing, "
        "dead, in error, or behind in their collective counts. Run it in a pod of the hung job "
        "(kubectl exec POD -- trainyard nccl-ras). Exit 1 when it finds a problem.",
    )
    p.add_argument(
        "--addr", metavar="HOST:PORT", help=f"the RAS service (default: $NCCL_RAS_ADDR, else {nccl_ras.DEFAULT_ADDR})"
    )
    p.add_argument(
        "--timeout",
        type=bounded_int(1, 3600, "a number of seconds"),
        default=5,
        help="how long RAS may take to gather the data (default 5)",
    )
    p.add_argument("--json", action="store_true", help="print RAS's JSON as received")
    p.set_defaults(func=_nccl_ras)

    p = add_parser(
        "launch",
        help="image entrypoint: preflight, then torchrun with the trainer or (--run) your own command",
        description="Entrypoint of the trainer image: run preflight, then torchrun, mapping the Training "
        "Operator's and Kubeflow Trainer's env (PET_*, MASTER_ADDR/PORT, WORLD_SIZE, RANK) to torchrun's "
        "arguments. Launch's options come first. Without --run, everything after `--` goes to trainyard's "
        "loop (see `trainyard train --help`), checked by train's parser before anything starts (exit 2). "
        "With --run, what follows `--` is your own command, run in every worker: `python SCRIPT ARGS`, "
        "`python -m MODULE ARGS`, or any executable; your loop reads RANK, LOCAL_RANK, WORLD_SIZE as under "
        "torchrun and its checkpoint folder from TRAINYARD_CHECKPOINT_DIR, and launch checks the NCCL "
        "transport in the workers' NCCL logs and serves the preflight and transport metrics "
        "(docs/bring-your-job.md).",
        usage="trainyard launch [LAUNCH OPTIONS] [-- TRAIN ARGS...]\n"
        "       trainyard launch [LAUNCH OPTIONS] --run -- COMMAND [ARGS...]",
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


def _first_bytes(path: str) -> bytes:
    """The start of an input, to tell RAS JSON from a log (standard input is peeked, not consumed)."""
    if path == nccl_log.STDIN:
        return sys.stdin.buffer.peek(64)[:64]
    try:
        with open(path, "rb") as fh:
            return fh.read(64)
    except OSError as exc:
        raise UserError(f"cannot read NCCL log {path}: {exc.strerror}") from exc


def _nccl_report(args: argparse.Namespace) -> int:
    if args.logs.count(nccl_log.STDIN) > 1:
        raise UserError("standard input (-) can be read once; name it once")
    starts = {path: _first_bytes(path) for path in args.logs}
    ras = [p for p, start in starts.items() if nccl_ras.looks_like_ras(start.decode(errors="replace"))]
    if ras:
        if len(args.logs) > 1:
            raise UserError(f"{ras[0]} is NCCL RAS JSON: pass it alone, not with other inputs")
        path = ras[0]
        fh = sys.stdin.buffer if path == nccl_log.STDIN else open(path, "rb")  # noqa: SIM115
        with fh:
            text = fh.read(nccl_ras.MAX_REPLY).decode(errors="replace")
        return _ras_report(nccl_ras.parse(text, "<stdin>" if path == nccl_log.STDIN else path), args.json)
    report = nccl_log.parse_files(args.logs)
    empty = nccl_log.no_lines_message(report)
    if empty:
        raise UserError(empty)
    if args.json:
        print(json.dumps(nccl_log.to_json(report, args.expect), indent=2))
    else:
        print(nccl_log.render(report, args.expect))
    if args.expect and nccl_log.expectation_failures(report, args.expect):
        return 1
    return 0


def _ras_report(report: nccl_ras.RasReport, as_json: bool) -> int:
    findings = nccl_ras.diagnose(report)
    if as_json:
        print(json.dumps({"statuses": report.statuses, "events": report.events, "findings": findings}, indent=2))
    else:
        print(nccl_ras.render(report))
    return 1 if findings else 0


def _nccl_ras(args: argparse.Namespace) -> int:
    addr = args.addr or os.environ.get("NCCL_RAS_ADDR") or nccl_ras.DEFAULT_ADDR
    text = nccl_ras.query(addr, timeout=args.timeout)
    if args.json:
        print(text.rstrip("\n"))
        return 0
    if not nccl_ras.looks_like_ras(text):
        raise UserError(
            f"NCCL's RAS service at {addr} did not answer in JSON (NCCL before 2.28.7?); its text report:\n{text}"
        )
    return _ras_report(nccl_ras.parse(text, f"RAS at {addr}"), as_json=False)


def _launch(args: argparse.Namespace) -> int:
    if args.run and args.passthrough is None:
        raise UserError(
            "trainyard launch --run: no command; it follows --: `trainyard launch --run -- python train.py --epochs 3`"
        )
    return launch.main(args, args.passthrough or [])


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer COMMAND``: the same commands without the rest of the trainyard CLI."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description="The trainer image's commands.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub.add_parser)
    args = parse_command_line(parser, dict(sub.choices), sys.argv[1:] if argv is None else argv)
    return run(lambda: args.func(args))

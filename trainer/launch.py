"""``trainyard launch``: the image's entrypoint. Preflight, then torchrun with the trainer
(``-m trainer train``, exec'd) or, with ``--run -- COMMAND...``, with the user's own command
(:mod:`trainer.command`: torchrun stays launch's child, so that launch can check the NCCL transport
and serve metrics for a loop that does neither).

How the pod's env becomes torchrun's arguments (:func:`plan`):

- Processes per pod: ``--nproc-per-node``, else PET_NPROC_PER_NODE (the Training Operator sets it
  from nprocPerNode), else the number of GPUs visible, else 1.
- Pods: PET_NNODES (a number, or ``min:max`` for elastic jobs), else WORLD_SIZE as older operators
  set it (one process per pod), else 1.
- Rendezvous, always torchrun's c10d backend so that a worker that dies takes the whole group
  through a restart together:
  - PET_RDZV_ENDPOINT (elastic jobs): used as given, with PET_RDZV_BACKEND/ID/CONF;
  - one pod: ``--standalone``;
  - otherwise MASTER_ADDR:MASTER_PORT (PET_MASTER_ADDR/PORT also accepted) as the endpoint. The pod
    whose node rank (PET_NODE_RANK, else RANK) is 0 hosts the rendezvous store (``is_host=true``),
    so this works without the pod's host name resolving to its own address.
- ``--local-addr``: the address this pod is reached at, taken as the source address of the route
  to the rendezvous host (what other pods can connect to), unless PET_LOCAL_ADDR is set.
- Restarts: ``--max-restarts``, else PET_MAX_RESTARTS, else 3.
- GLOO_SOCKET_IFNAME follows NCCL_SOCKET_IFNAME when unset, so gloo (CPU jobs, checkpoint
  coordination) uses the fabric interface too.
- The preflight results go to the workers as TRAINYARD_PREFLIGHT ("name=status,..."), which the
  metrics exporter publishes; with --skip-preflight the variable is removed rather than trusted.
- PET_MODULE, PET_NO_PYTHON and PET_RUN_PATH are removed from torchrun's env: torchrun reads them
  as its -m, --no-python and --run-path flags (torch/distributed/argparse_util.py check_env), and
  launch alone decides how the program starts.
- TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless set: each restart of the worker group gets a store of
  its own, served by its rank 0, instead of the agent's store that outlives restarts. The trainer
  is safe under either (``trainer.rounds``); a store per round simply holds nothing stale.

Standard library only: it runs before torch is imported.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trainer import command, options
from trainer.interfaces import gloo_ifname, route_source
from trainer.preflight import visible_gpus
from trainyard.contract.errors import UserError
from trainyard.contract.metrics import ENV_PREFLIGHT
from trainyard.contract.names import ENV_EXPECT_TRANSPORT, ENV_SHM_PATH
from trainyard.contract.nccl import GLOO_SOCKET_IFNAME, SOCKET_IFNAME
from trainyard.contract.reports import CheckResult

DEFAULT_MAX_RESTARTS = 3
DEFAULT_PORT = 29500
DEFAULT_RDZV_ID = "trainyard"


@dataclass(slots=True)
class Plan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # variables to add to the environment
    notes: list[str] = field(default_factory=list)
    unset: list[str] = field(default_factory=list)  # variables of the pod's env torchrun must not see

    def render(self) -> str:
        lines = [f"# {n}" for n in self.notes]
        lines += [f"unset {k}" for k in self.unset]
        lines += [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        lines.append(shlex.join(self.argv))
        return "\n".join(lines)


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = (env.get(name) or "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise UserError(f"{name}={value!r} is not an integer; the Training Operator sets it to one") from exc


def _host_port(value: str) -> tuple[str, str | None]:
    if value.startswith("["):  # [v6]:port
        host, _, rest = value[1:].partition("]")
        return host, rest.lstrip(":") or None
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, port or None
    return value, None


def _endpoint(host: str, port: str | int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _processes(env: Mapping[str, str], given: str | None, notes: list[str], gpus: int | None = None) -> str:
    """Processes per pod: the flag, PET_NPROC_PER_NODE, the GPUs visible, else 1."""
    nproc = given or (env.get("PET_NPROC_PER_NODE") or "").strip()
    if not nproc:
        gpus = visible_gpus(env) if gpus is None else gpus
        nproc = str(gpus or 1)
        notes.append(f"{nproc} process(es) per pod: {'one per visible GPU' if gpus else 'no GPU visible'}")
    if not (nproc.isdigit() and int(nproc) > 0) and nproc not in ("auto", "gpu", "cpu", "xpu"):
        raise UserError(f"processes per pod {nproc!r} is neither a positive integer nor auto|gpu|cpu")
    return nproc


def _nodes(env: Mapping[str, str], notes: list[str]) -> str:
    """Pods: PET_NNODES (N or min:max), else WORLD_SIZE as older operators set it, else 1."""
    nnodes = (env.get("PET_NNODES") or "").strip()
    if not nnodes:
        ws = _int(env, "WORLD_SIZE")
        nnodes = str(ws) if ws else "1"
        if ws:
            notes.append(f"PET_NNODES unset: {nnodes} pod(s) from WORLD_SIZE (one process per pod, older operators)")
    lo, _, hi = nnodes.partition(":")
    if not lo.isdigit() or (hi and not hi.isdigit()):
        raise UserError(f"PET_NNODES={nnodes!r} is neither a number of pods nor min:max")
    return nnodes


def _rendezvous(env: Mapping[str, str], nnodes: str, notes: list[str]) -> tuple[list[str], str | None]:
    """torchrun's rendezvous arguments, and the host that runs the store (None: this pod alone)."""
    if env.get("PET_RDZV_ENDPOINT"):
        endpoint = env["PET_RDZV_ENDPOINT"].strip()
        argv = ["--rdzv-backend", env.get("PET_RDZV_BACKEND") or "c10d", "--rdzv-endpoint", endpoint]
        argv += ["--rdzv-id", env.get("PET_RDZV_ID") or DEFAULT_RDZV_ID]
        if env.get("PET_RDZV_CONF"):
            argv += ["--rdzv-conf", env["PET_RDZV_CONF"]]
        notes.append(f"elastic rendezvous at {endpoint} (PET_RDZV_ENDPOINT)")
        return argv, _host_port(endpoint)[0]
    if nnodes in ("1", "1:1"):
        notes.append("one pod: standalone rendezvous on this pod")
        return ["--standalone"], None
    addr = (env.get("MASTER_ADDR") or env.get("PET_MASTER_ADDR") or "").strip()
    if not addr:
        raise UserError(
            f"{nnodes} pods but no MASTER_ADDR (or PET_MASTER_ADDR / PET_RDZV_ENDPOINT) in the environment; "
            "the Training Operator sets it: is this a PyTorchJob pod?"
        )
    port = (env.get("MASTER_PORT") or env.get("PET_MASTER_PORT") or str(DEFAULT_PORT)).strip()
    if not port.isdigit():
        raise UserError(f"MASTER_PORT={port!r} is not a port number")
    node_rank = _int(env, "PET_NODE_RANK")
    if node_rank is None:
        node_rank = _int(env, "RANK") or 0
    is_host = node_rank == 0
    conf = [c for c in (env.get("PET_RDZV_CONF") or "").split(",") if c and not c.startswith("is_host=")]
    conf.append(f"is_host={'true' if is_host else 'false'}")
    argv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", _endpoint(addr, port)]
    argv += ["--rdzv-id", env.get("PET_RDZV_ID") or DEFAULT_RDZV_ID, "--rdzv-conf", ",".join(conf)]
    notes.append(
        f"rendezvous at {_endpoint(addr, port)}, node rank {node_rank}: "
        + ("this pod hosts the store" if is_host else "the pod of node rank 0 hosts the store")
    )
    return argv, addr


def world_shape(env: Mapping[str, str], nproc_per_node: str | None = None, *, gpus: int) -> tuple[str, str]:
    """(pods, processes per pod) as launch gives them to torchrun (``--nnodes``, ``--nproc-per-node``)
    in a pod with environment ``env`` that sees ``gpus`` GPUs: what a check before the pod exists
    (trainyard validate) needs. Raises UserError where launch would."""
    notes: list[str] = []
    return _nodes(env, notes), _processes(env, nproc_per_node, notes, gpus)


def plan(
    env: Mapping[str, str],
    train_args: Sequence[str] = (),
    *,
    run: Sequence[str] | None = None,
    nproc_per_node: str | None = None,
    max_restarts: int | None = None,
    local_addr: str | None = None,
    python: str = sys.executable,
) -> Plan:
    """The torchrun command (and env additions) for a pod with environment ``env``: the trainer with
    ``train_args``, or the user's command ``run`` (:func:`trainer.command.program`)."""
    notes: list[str] = []
    # the user's command first: a command torchrun cannot run is refused before the env is read
    program = command.program(run, python=python) if run is not None else None
    extra_env: dict[str, str] = {}
    nproc = _processes(env, nproc_per_node, notes)
    nnodes = _nodes(env, notes)
    restarts = max_restarts if max_restarts is not None else _int(env, "PET_MAX_RESTARTS")
    if restarts is None:
        restarts = DEFAULT_MAX_RESTARTS

    argv = [python, "-m", "torch.distributed.run", "--nnodes", nnodes, "--nproc-per-node", nproc]
    rdzv, rdzv_host = _rendezvous(env, nnodes, notes)
    argv += rdzv
    addr_local = local_addr or (env.get("PET_LOCAL_ADDR") or "").strip() or None
    if addr_local is None and rdzv_host is not None:
        addr_local = route_source(rdzv_host)
        if addr_local:
            notes.append(f"local address {addr_local}: the source address of the route to {rdzv_host}")
        else:
            notes.append(f"{rdzv_host} does not resolve yet: torchrun advertises this pod's host name")
    if addr_local:
        argv += ["--local-addr", addr_local]
    argv += ["--max-restarts", str(restarts)]

    if "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env:
        # torchrun otherwise hands every restart of the workers the same store, still holding the
        # keys of earlier rounds; train sets its group up in a namespace of its own round either way.
        extra_env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if env.get(SOCKET_IFNAME) and not env.get(GLOO_SOCKET_IFNAME):
        gloo = gloo_ifname(env[SOCKET_IFNAME])
        if gloo:
            extra_env[GLOO_SOCKET_IFNAME] = gloo
    unset = [k for k in command.PROGRAM_ENV if k in env]
    if unset:
        notes.append(f"{', '.join(unset)} removed: launch decides how torchrun starts the program")
    if program is None:
        argv += ["-m", "trainer", "train", *train_args]
    else:
        notes.append(f"runs {program.how}")
        notes.append(command.checkpoint_note(env))
        argv += program.argv
    return Plan(argv=argv, env=extra_env, notes=notes, unset=unset)


def worker_env(env: Mapping[str, str], the_plan: Plan, checks: Sequence[CheckResult] | None) -> dict[str, str]:
    """The environment torchrun (and so every worker) starts with: the pod's, the plan's additions,
    and the preflight ``checks`` as ENV_PREFLIGHT (None: preflight was skipped, so none is passed on,
    whatever the pod's env said)."""
    new_env = dict(env)
    new_env.update(the_plan.env)
    for name in (*the_plan.unset, ENV_PREFLIGHT):
        new_env.pop(name, None)
    if checks is not None:
        new_env[ENV_PREFLIGHT] = ",".join(f"{c.name}={c.status}" for c in checks)
    return new_env


# ------------------------------------------------------------------------------------- CLI glue


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Launch's own options; the train arguments (with --run: the user's command) follow ``--``."""
    p.add_argument(
        "--run",
        action="store_true",
        help="what follows -- is your own command (python train.py ..., python -m pkg ..., or any executable), "
        "run by torchrun in every worker instead of trainyard's loop",
    )
    p.add_argument(
        "--allow-transport-fallback",
        action="store_true",
        help="with --run: warn, not stop the job, when NCCL falls back to sockets on an IB fabric",
    )
    p.add_argument(
        "--nproc-per-node", metavar="N", help="processes per pod (default: PET_NPROC_PER_NODE, else GPUs, else 1)"
    )
    p.add_argument(
        "--max-restarts", type=int, metavar="N", help="worker group restarts (default: PET_MAX_RESTARTS, else 3)"
    )
    p.add_argument("--local-addr", metavar="ADDR", help="address other pods reach this one at (default: derived)")
    p.add_argument(
        "--shm-path", metavar="PATH", help=f"where preflight checks shm (default: ${ENV_SHM_PATH} or /dev/shm)"
    )
    p.add_argument("--skip-preflight", action="store_true", help="start torchrun even if preflight fails (debugging)")
    p.add_argument("--dry-run", action="store_true", help="print the torchrun command and exit")


def main(opts: argparse.Namespace, train_args: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    if opts.run:
        return _main_run(opts, train_args, env)
    if opts.allow_transport_fallback:
        raise UserError(
            "trainyard launch: --allow-transport-fallback is for --run; trainyard's loop takes it as a train "
            "argument (after --)"
        )
    # Refuse train arguments here, once, with exit 2: in the workers each rank would print the error
    # and torchrun would restart the group on it until --max-restarts is spent.
    prog = "trainyard launch: train arguments (after --)"
    cfg = options.parse(train_args, prog=prog)
    the_plan = plan(
        env,
        train_args,
        nproc_per_node=opts.nproc_per_node,
        max_restarts=opts.max_restarts,
        local_addr=opts.local_addr,
    )
    # The world size is known here unless the job is elastic (PET_NNODES min:max) or torchrun picks
    # the processes per pod (auto|gpu|cpu): then the trainer checks the batch when training starts.
    nnodes, nproc = world_shape(env, opts.nproc_per_node, gpus=visible_gpus(env))
    if nnodes.isdigit() and nproc.isdigit():
        problem = options.batch_problem(cfg, int(nnodes) * int(nproc))
        if problem:
            raise UserError(f"{prog}: {problem} ({nnodes} pod(s) x {nproc} process(es) per pod)")
    if opts.dry_run:
        print(the_plan.render())
        return 0
    checks, code = _preflight(opts, env)
    if code:
        return code
    _announce(the_plan, "exec")
    new_env = worker_env(env, the_plan, checks)
    os.execve(the_plan.argv[0], the_plan.argv, new_env)
    return 0  # not reached


def _main_run(opts: argparse.Namespace, run: Sequence[str], env: Mapping[str, str]) -> int:
    """``--run``: the user's command under torchrun, which stays launch's child (trainer.command)."""
    the_plan = plan(
        env,
        run=run,
        nproc_per_node=opts.nproc_per_node,
        max_restarts=opts.max_restarts,
        local_addr=opts.local_addr,
    )
    new_env = dict(env)
    pattern = command.nccl_pattern(new_env)  # NCCL_DEBUG=INFO to files, where a transport is promised
    if pattern:
        the_plan.notes.append(f"NCCL logs to {pattern} (NCCL_DEBUG=INFO): launch checks the transport in them")
        the_plan.env.update({k: new_env[k] for k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS")
                             if k in new_env and new_env[k] != env.get(k)})  # fmt: skip
    if opts.dry_run:
        print(the_plan.render())
        return 0
    checks, code = _preflight(opts, env)
    if code:
        return code
    _announce(the_plan, "run")
    worker = worker_env(env, the_plan, checks)
    from trainer import metrics

    exporter = metrics.start_launch(worker)
    if exporter is not None:
        print(f"launch: metrics (preflight, NCCL transport) on port {exporter.port}", flush=True)
    expect = (env.get(ENV_EXPECT_TRANSPORT) or "").strip() or None
    watch = command.TransportWatch(pattern, expect, opts.allow_transport_fallback) if pattern else None
    return command.supervise(the_plan.argv, worker, watch=watch, exporter=exporter)


def _preflight(opts: argparse.Namespace, env: Mapping[str, str]) -> tuple[list[CheckResult] | None, int]:
    """The preflight checks (None: skipped) and preflight's exit code (not 0: nothing may start)."""
    if opts.skip_preflight:
        return None, 0
    from trainer import preflight

    checks = preflight.run_checks(env, shm_path=opts.shm_path)
    code = preflight.exit_code(checks)
    print(preflight.render(checks), file=sys.stderr if code else sys.stdout, flush=True)
    if code:
        print("launch: preflight failed; not starting training (--skip-preflight to override)", file=sys.stderr)
    return checks, code


def _announce(the_plan: Plan, verb: str) -> None:
    for note in the_plan.notes:
        print(f"launch: {note}", flush=True)
    print(f"launch: {verb} {shlex.join(the_plan.argv)}", flush=True)

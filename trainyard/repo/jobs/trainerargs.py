"""The trainer's arguments in a job's pods, judged before merge by the trainer's own parser.

A container's command line is the one the kubelet runs: ``command`` + ``args`` with ``$(VAR)``
expanded from the container's env, or the image's entrypoint (the trainer image's is
``trainyard launch``, trainer/Dockerfile) followed by ``args``. The trainer is found in it as

- ``trainyard launch [LAUNCH OPTIONS] -- TRAIN ARGS`` (the runtimes and v1 job bases; launch's
  options are parsed with launch's own parser, the train arguments with train's:
  :func:`trainer.options.parse`, which launch runs first thing in the pod); with ``--run`` what
  follows ``--`` is the user's own command, judged by launch's rules
  (:func:`trainer.command.program`) and not by train's parser,
- ``trainyard train ARGS`` or ``python -m trainer train ARGS``,
- either of those inside ``sh -c SCRIPT`` (the MPI launcher's ``mpirun ... sh -c``), the script
  split as a shell would, up to its first ``;``, ``&&``, ``||`` or ``|``.

Arguments the shell would still expand (``$VAR``, or a ``$(VAR)`` Kubernetes leaves as written) are
not judged. With the arguments parsed, the global batch must divide by the world size times
``--grad-accum`` (the trainer stops at start otherwise): the world is what launch gives torchrun
(:func:`trainer.launch.world_shape`: pods from ``PET_NNODES``, processes per pod from
``--nproc-per-node``, ``PET_NPROC_PER_NODE`` or the container's GPUs), or ``mpirun -np N``. An
elastic job (``PET_NNODES=min:max``) must divide at the size it starts with (an error) and at every
size it may shrink or grow to (a warning).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import shlex
from dataclasses import dataclass, field
from typing import NoReturn

from trainer import command, launch, options
from trainyard.contract.argv import split_passthrough
from trainyard.contract.errors import UserError
from trainyard.contract.k8s import expand
from trainyard.contract.names import TRAINER_ENTRYPOINT
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo.model.rendered import as_dict, as_list

SHELLS = ("sh", "bash", "dash", "ash")
SHELL_OPERATORS = (";", "&&", "||", "|", "&", "(", ")")
MPIRUN = ("mpirun", "mpiexec", "orterun")
MAX_ELASTIC_SIZES = 64  # sizes of an elastic range to try (a range is at most a few dozen nodes)


@dataclass
class Invocation:
    how: str  # "trainyard launch", "trainyard train", "python -m trainer train", ...
    train_args: list[str]
    launch_options: list[str] = field(default_factory=list)
    ranks: int | None = None  # mpirun -np N around it


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def command_line(container: dict, trainer_image: bool) -> list[str] | None:
    """What the kubelet runs in ``container`` (None: the image's own command, unknown here)."""
    env = {
        str(e["name"]): str(e["value"])
        for e in as_list(container.get("env"))
        if isinstance(e, dict) and "name" in e and isinstance(e.get("value"), str)
    }
    command = [expand(str(a), env) for a in as_list(container.get("command"))]
    args = [expand(str(a), env) for a in as_list(container.get("args"))]
    if command:
        return command + args
    return [*TRAINER_ENTRYPOINT, *args] if trainer_image else None


def find(argv: list[str], ranks: int | None = None) -> Invocation | None:
    """The trainer's invocation in ``argv``, if there is one."""
    for i, token in enumerate(argv):
        base = os.path.basename(token)
        rest = argv[i + 1 :]
        if base == "trainyard" and rest[:1] in (["launch"], ["train"]):
            return _invocation(f"trainyard {rest[0]}", rest[1:], ranks)
        if token == "-m" and rest[:2] in (["trainer", "launch"], ["trainer", "train"]):
            return _invocation(f"python -m trainer {rest[1]}", rest[2:], ranks)
        if base in MPIRUN:
            ranks = _np(rest) or ranks
        if base in SHELLS and rest[:1] == ["-c"] and len(rest) > 1:
            return find(_shell_words(rest[1]), ranks)
    return None


def _invocation(how: str, rest: list[str], ranks: int | None) -> Invocation:
    if how.endswith("launch"):
        before, after = split_passthrough(rest)
        return Invocation(how, after or [], before, ranks)
    return Invocation(how, rest, [], ranks)


def _np(argv: list[str]) -> int | None:
    for flag, value in itertools.pairwise(argv):
        if flag in ("-np", "-n", "--np", "-c") and value.isdigit() and len(value) < 8:
            return int(value)
    return None


def _shell_words(script: str) -> list[str]:
    """The first simple command of ``script`` (up to an operator), split as sh would."""
    lexer = shlex.shlex(script[:65536], posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    words: list[str] = []
    try:
        for word in lexer:
            if word in SHELL_OPERATORS or set(word) <= set(";&|()"):
                break
            words.append(word)
    except ValueError:  # an unclosed quote: sh would refuse the script too
        return []
    return words


class _Refusing(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"trainyard launch: {message}")


@functools.lru_cache(maxsize=1)
def _launch_parser() -> _Refusing:
    parser = _Refusing(prog="trainyard launch", add_help=False)
    launch.add_arguments(parser)
    return parser


def _launch_options(argv: list[str]) -> argparse.Namespace:
    opts, extras = _launch_parser().parse_known_args(argv)
    if extras:
        raise UserError(
            f"trainyard launch: unrecognized arguments: {' '.join(extras)[:200]} (train arguments go after --)"
        )
    return opts


def check(container: dict, *, trainer_image: bool, replicas: int | None = None) -> Findings:
    """What the trainer would say about ``container``'s arguments, and the world-size arithmetic.
    ``replicas``: the pods an elastic job starts with."""
    out = Findings()
    argv = command_line(container, trainer_image)
    found = find(argv) if argv else None
    if found is None:
        return out
    if any("$" in a for a in [*found.train_args, *found.launch_options]):
        return out  # the shell or the kubelet would substitute something first
    opts = None
    try:
        if found.how.endswith("launch"):
            opts = _launch_options(found.launch_options)
        if opts is not None and opts.run:  # the user's own command: launch's rules, no train arguments
            command.program(found.train_args)
            return out
        cfg = options.parse(found.train_args, prog=f"{found.how}: train arguments")
    except UserError as exc:
        out.errors.append(f"{exc}; the trainer would stop with this usage error (exit 2) before training")
        return out
    env = {str(e["name"]): str(e["value"]) for e in as_list(container.get("env"))
           if isinstance(e, dict) and "name" in e and isinstance(e.get("value"), str)}  # fmt: skip
    sizes, start = _worlds(found, opts, env, _gpus(container), replicas)
    step = cfg.grad_accum
    if start is not None and cfg.batch_size % (start * step):
        shape = sizes.get(start, f"{start} rank(s)")
        out.errors.append(
            f"--batch-size {cfg.batch_size} is not a multiple of {shape} x --grad-accum {step} = {start * step}: "
            "the trainer stops at start (--batch-size is the GLOBAL batch); use --batch-size "
            f"{_multiple(cfg.batch_size, start * step)}"
        )
    failing = [w for w in sizes if w != start and cfg.batch_size % (w * step)]
    if failing:
        out.warnings.append(
            f"--batch-size {cfg.batch_size} does not divide at {', '.join(sizes[w] for w in failing)} x --grad-accum "
            f"{step}, sizes this elastic job may shrink or grow to: it would stop there; a multiple of "
            f"{math.lcm(*(w * step for w in sizes))} divides at every size"
        )
    return out


def _worlds(
    found: Invocation, opts: argparse.Namespace | None, env: dict[str, str], gpus: int, replicas: int | None
) -> tuple[dict[int, str], int | None]:
    """The world sizes the job may run at (size -> in words) and the one it starts with."""
    if found.ranks is not None:
        return {found.ranks: f"{found.ranks} MPI rank(s)"}, found.ranks
    if found.how == "trainyard launch":
        try:
            nnodes, nproc = launch.world_shape(env, opts.nproc_per_node if opts else None, gpus=gpus)
        except UserError:
            return {}, None
        per = gpus if nproc in ("auto", "gpu") and gpus else int(nproc) if nproc.isdigit() else None
        lo, _, hi = nnodes.partition(":")
        if per is None or not lo.isdigit() or (hi and not hi.isdigit()):
            return {}, None
        low, high = int(lo), int(hi or lo)
        start = min(max((replicas or high) if hi else low, low), high)
        nodes = range(low, min(high, low + MAX_ELASTIC_SIZES) + 1)
        return {n * per: f"{n} pod(s) x {per} process(es)" for n in nodes}, start * per
    return {}, None  # a bare `train` outside torchrun and mpirun: one rank, whatever the job


def _gpus(container: dict) -> int:
    res = as_dict(container.get("resources"))
    for section in ("limits", "requests"):
        value = as_dict(res.get(section)).get("nvidia.com/gpu")
        if value is not None:
            try:
                amount = parse_quantity(value)
            except QuantityError:
                return 0
            return int(amount) if amount == int(amount) and 0 <= amount < 10**6 else 0
    return 0


def _multiple(value: int, unit: int) -> int:
    return max(unit, (value + unit - 1) // unit * unit)

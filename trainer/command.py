"""A user's own training command under ``trainyard launch --run -- COMMAND...``.

:func:`program` reads the command as torchrun's three ways of starting a worker
(torch 2.15.0, torch/distributed/run.py ``get_args_parser`` and ``config_from_args``):

- ``python SCRIPT ARGS`` or ``SCRIPT.py ARGS``: torchrun's ``training_script``, which it runs as
  ``$PYTHON_EXEC`` (default: torchrun's own ``sys.executable``) ``-u SCRIPT ARGS``;
- ``python -m MODULE ARGS``: torchrun's ``-m MODULE ARGS`` (``python -u -m MODULE ARGS``);
- anything else (an executable, a shell script, ``python`` with interpreter options such as
  ``-X`` or ``-c``): torchrun's ``--no-python COMMAND ARGS``, run exactly as given.

Only ``python`` and ``python3`` (or this interpreter's own path) are taken for the interpreter, so a
command that names another one (``python3.10``) keeps it through ``--no-python``. torchrun passes
every worker ``--local-rank=N`` only when ``use_env`` is false, which is never the case for
torchrun itself (``get_use_env``): the workers read LOCAL_RANK, RANK and WORLD_SIZE from their env.

What the worker's loop gets besides torchrun's env is its checkpoint folder in
``ENV_CHECKPOINT_DIR`` (the job sets it; ``trainyard new-job`` writes it) and the preflight results
in TRAINYARD_PREFLIGHT. What launch does around it, because a foreign loop cannot report to it:
:class:`Supervisor` keeps torchrun as a child rather than exec-ing it, forwards the pod's signals,
reads the NCCL_DEBUG logs the workers write (:mod:`trainer.transport` makes NCCL write them) to
check the transport the fabric promises, and serves the preflight and transport series on the
metrics port (:class:`trainer.metrics.LaunchExporter`).
"""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainyard.contract.errors import UserError

# Where the job's checkpoints live, for a loop that is not trainyard's (trainyard's own loop takes
# --checkpoint-dir). The job sets it in the container's env.
ENV_CHECKPOINT_DIR = "TRAINYARD_CHECKPOINT_DIR"

# torchrun reads these from its env as if the flags were given (torch/distributed/argparse_util.py
# check_env: PET_<FLAG>): launch decides how the program starts, so the pod's env may not.
PROGRAM_ENV = ("PET_MODULE", "PET_NO_PYTHON", "PET_RUN_PATH")

USAGE = "trainyard launch --run -- python train.py --epochs 3"
PYTHONS = frozenset({"python", "python3"})
# Launchers that start torchrun's workers themselves: under launch they would start a second group.
NESTED_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
NESTED_PROGRAMS = frozenset({"torchrun"})
MAX_WORD = 131072  # Linux MAX_ARG_STRLEN (32 pages): execve refuses a longer argument with E2BIG
MAX_TOTAL = 1 << 20  # half of the usual ARG_MAX (2 MiB), which the environment shares
MAX_SHOWN = 60
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _show(word: str) -> str:
    text = repr(word)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 4] + "...'"


def _refuse(message: str) -> UserError:
    return UserError(f"trainyard launch --run: {message}")


def check_words(command: Sequence[str]) -> None:
    """Refuse what no program can be given (execve): NUL bytes, an argument or a command line too
    long; and an empty command."""
    if not command:
        raise _refuse(f"no command after --; give the command that trains, e.g. `{USAGE}`")
    total = 0
    for i, word in enumerate(command):
        if "\x00" in word:
            raise _refuse(f"word {i + 1} ({_show(word)}) contains a NUL byte, which no program can receive")
        size = len(word.encode("utf-8", "surrogateescape"))
        if size > MAX_WORD:
            raise _refuse(
                f"word {i + 1} is {size} bytes long; the kernel passes at most {MAX_WORD} bytes per argument "
                "(put long settings in a file the command reads)"
            )
        total += size + 1
    if total > MAX_TOTAL:
        raise _refuse(f"the command is {total} bytes long (at most {MAX_TOTAL}); put its settings in a file")
    if not command[0].strip():
        raise _refuse("the program (the first word after --) is empty")
    if command[0].startswith("-"):
        raise _refuse(
            f"the command starts with {_show(command[0])}, an option, not a program; launch's own options go "
            f"before --run, the command after -- (`{USAGE}`)"
        )


def _is_python(word: str, python: str) -> bool:
    return word in PYTHONS or word == python or (os.path.basename(word) in PYTHONS and "/" in word)


def _nested(command: Sequence[str], python: str) -> str | None:
    base = os.path.basename(command[0])
    if base in NESTED_PROGRAMS:
        return f"{base} starts its own worker group"
    if base == "trainyard" and command[1:2] == ["launch"]:
        return "trainyard launch would run inside itself"
    if _is_python(command[0], python) and command[1:2] == ["-m"] and len(command) > 2:
        module = command[2]
        if module in NESTED_MODULES:
            return f"python -m {module} is torchrun"
        if module == "trainer" and command[3:4] == ["launch"]:
            return "python -m trainer launch would run inside itself"
    return None


# Before the program: argparse (torchrun's parser) then takes every later word as the program's, a
# `--` among them included; without it, a `--` right after the program is dropped
# (training_script_args is nargs=REMAINDER; tests/trainer/test_launch_run.py shows it).
SEPARATOR = "--"
NO_PYTHON = "your command as given in each worker (torchrun --no-python)"


@dataclass(frozen=True, slots=True)
class Program:
    argv: list[str]  # what follows torchrun's own options
    how: str  # one line for launch's notes


def program(command: Sequence[str], *, python: str = sys.executable) -> Program:
    """torchrun's arguments for ``command`` (a UserError naming the fix when it cannot be run)."""
    command = list(command)
    check_words(command)
    nested = _nested(command, python)
    if nested:
        raise _refuse(
            f"{_show(' '.join(command[:3]))}: {nested}; launch already runs torchrun with the pod's rendezvous, "
            "so give the script torchrun would run (`trainyard launch --run -- python train.py ARGS`)"
        )
    first, rest = command[0], command[1:]
    if _is_python(first, python):
        if not rest:
            raise _refuse(f"{_show(first)} alone names no script; give `python SCRIPT ARGS` or `python -m MODULE`")
        if rest[0] == "-m":
            if len(rest) < 2 or not _MODULE.fullmatch(rest[1]):
                got = _show(rest[1]) if len(rest) > 1 else "nothing"
                raise _refuse(f"python -m takes a module name (such as mypackage.train), not {got}")
            return Program(["-m", SEPARATOR, *rest[1:]], f"your module {rest[1]} in each worker (torchrun -m)")
        if not rest[0].startswith("-"):
            return Program([SEPARATOR, *rest], f"your script {_show(rest[0])} in each worker (torchrun's python -u)")
        return Program(["--no-python", SEPARATOR, *command], NO_PYTHON)
    if first.endswith(".py"):
        return Program([SEPARATOR, *command], f"your script {_show(first)} in each worker (torchrun's python -u)")
    return Program(["--no-python", SEPARATOR, *command], NO_PYTHON)


# ------------------------------------------------------------------------------------- supervision


class Exporter(Protocol):
    def transport(self, used: str | None, expected: str | None) -> None: ...

    def close(self) -> None: ...


@dataclass
class TransportWatch:
    """The NCCL transport of each worker process, read from the NCCL_DEBUG_FILE logs they write.

    A log file present before the workers started (a previous container run) is not judged."""

    pattern: str  # NCCL_DEBUG_FILE, with NCCL's %h and %p
    expect: str | None
    allow_fallback: bool = False
    judged: set[tuple[str, int]] = field(default_factory=set)
    before: set[str] = field(default_factory=set)
    said: set[tuple[str, str | None]] = field(default_factory=set)
    seen_lines: bool = False

    def files(self) -> list[str]:
        return sorted(glob.glob(glob.escape(self.pattern).replace("%h", "*").replace("%p", "*")))

    def start(self) -> None:
        self.before = set(self.files())

    def poll(self, say: Callable[[str], None], exporter: Exporter | None) -> str | None:
        """Judge every process whose transport the logs now show; the error that must stop the
        job (IB promised, sockets used, no --allow-transport-fallback), else None."""
        from trainer.nccl_log import parse_lines, transport_verdict

        for path in self.files():
            if path in self.before:
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    procs = parse_lines(fh, source=path)
            except OSError:
                continue  # removed or unreadable between the listing and the open: next round
            for proc in procs.values():
                self.seen_lines = True
                key = (path, proc.pid or 0)
                if key in self.judged or proc.transport is None:
                    continue
                self.judged.add(key)
                verdict = transport_verdict(proc, self.expect, self.allow_fallback)
                if exporter is not None:
                    exporter.transport(proc.transport, self.expect)
                if verdict.level == "error":
                    return verdict.message
                if (verdict.level, proc.transport) not in self.said:  # once per outcome, not per rank
                    self.said.add((verdict.level, proc.transport))
                    say(f"NCCL transport: {verdict.message}" if verdict.level == "ok" else verdict.message)
        return None


FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def exit_status(returncode: int) -> int:
    """A child's return code as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    watch: TransportWatch | None,
    exporter: Exporter | None = None,
    interval: float = 2.0,
    say: Callable[[str], None] | None = None,
) -> int:
    """Run torchrun (``argv``) to its end and return its exit status. The pod's signals go to it (the
    kubelet's SIGTERM reaches torchrun, which passes it to the workers); ``watch`` judges the NCCL
    logs every ``interval`` seconds and stops the job on a transport error."""
    say = say or (lambda line: print(f"launch: {line}", flush=True))
    if watch is not None:
        watch.start()
    child = subprocess.Popen(list(argv), env=dict(env))
    previous = {}

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)  # nothing once it has exited (Popen.send_signal polls first)

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    failure = None
    try:
        while True:
            try:
                child.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                pass
            if watch is not None and failure is None:
                failure = watch.poll(say, exporter)
                if failure is not None:
                    say(f"error: {failure}")
                    say("stopping the workers: NCCL does not use the fabric's transport")
                    child.send_signal(signal.SIGTERM)
        if watch is not None and failure is None:
            failure = watch.poll(say, exporter)
            if failure is not None:
                say(f"error: {failure}")
            elif watch.expect and not watch.seen_lines:
                say("the NCCL transport was not checked: no worker wrote NCCL log lines (no NCCL communicator)")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # an exception here: torchrun stops its workers on SIGTERM
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if exporter is not None:
            exporter.close()
    code = exit_status(child.returncode)
    return (code or 1) if failure is not None else code


def nccl_pattern(env: dict[str, str]) -> str | None:
    """Make the workers' NCCL write INFO lines with INIT and NET to files launch can read (only where
    the fabric promises a transport); the NCCL_DEBUG_FILE pattern, or None."""
    from trainer.transport import prepare_nccl_log

    return prepare_nccl_log(env)


def checkpoint_note(env: Mapping[str, str]) -> str:
    folder = (env.get(ENV_CHECKPOINT_DIR) or "").strip()
    if folder:
        return f"{ENV_CHECKPOINT_DIR}={folder}: your loop saves and resumes its checkpoints there"
    return f"{ENV_CHECKPOINT_DIR} is not set: your loop has no checkpoint folder from the job"

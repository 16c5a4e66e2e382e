"""The errors a user can meet, their exit statuses, and the one place that turns them into both.

Every command of every floor raises one of these for something the user can fix; :func:`run`
prints it as one ``error: ...`` line (no traceback) and returns its exit status. The statuses are
part of the CLI contract (README):

- 0: done;
- 1: a check found a problem (validation failed, a pod denied, a preflight check failed);
- 2: bad input or usage (a file, a flag, a missing tool);
- 3: NCCL does not use the transport the fabric promises;
- 130: interrupted (Ctrl-C);
- 143: terminated (SIGTERM): what the command started is stopped and removed first, as on Ctrl-C.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_TRANSPORT = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so the cleanup that Ctrl-C runs (``finally``, ``with``,
    ``except BaseException``) runs for it too: without a handler Python dies at once and leaves
    what a command started (a control plane, network namespaces) running."""


class UserError(Exception):
    """Something the user can fix: bad input, a missing tool, a failed check.

    The message says what was wrong, where, and what to do; the CLI prints it without a
    traceback and exits with ``exit_code``.
    """

    exit_code = EXIT_USAGE


class CheckFailed(UserError):
    """A check ran and found a problem (validation, admission, preflight): exit 1."""

    exit_code = EXIT_CHECK_FAILED


class TransportMismatch(UserError):
    """NCCL does not use the transport the fabric promises: exit 3."""

    exit_code = EXIT_TRANSPORT


def field_path(loc: Sequence[object]) -> str:
    """A field's location as a person writes it: ``spec.env[2].name``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(document)"


def describe_fields(problems: Sequence[Mapping[str, Any]], where: str, kind: str) -> str:
    """One line per problem of a document checked against its schema (the ``errors()`` list of a
    pydantic ValidationError: plain dicts with ``loc``, ``msg`` and ``type``), each naming the file
    and the field: ``where: spec.env[2].name: message``."""
    lines = []
    for err in problems:
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = f"unknown field (check its spelling against the {kind} reference)"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        lines.append(f"{where}: {field_path(err.get('loc', ()))}: {msg}")
    return "\n".join(lines)


def run(call: Callable[[], int | None], missing_hint: str | None = None) -> int:
    """Run a command; map what it raises to a one-line message on stderr and an exit status.

    ``missing_hint``: what to say when a Python package the command needs is not installed
    (the single CLI leaves out the extras an image does not carry).
    """
    # a command that serves (the webhook, the trainer) installs its own handler over this one
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(call() or EXIT_OK)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        if missing_hint is None:
            raise
        print(f"error: needs the Python package {exc.name!r}, which is not installed; {missing_hint}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        word, status = interruption(exc)
        print(word, file=sys.stderr)
        return status
    except BrokenPipeError:  # the reader went away (| head): not an error
        return EXIT_OK


def interruption(exc: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped a command and its exit status: ("terminated", 143) for SIGTERM, else
    ("interrupted", 130) for Ctrl-C."""
    return ("terminated", EXIT_TERMINATED) if isinstance(exc, Terminated) else ("interrupted", EXIT_INTERRUPTED)


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM while cleaning up ends the process
    raise Terminated

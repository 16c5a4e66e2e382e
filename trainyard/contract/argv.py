"""How trainyard reads a command line: the split at ``--`` (what comes after goes to another
program) and whole-number flags with a range.

``trainyard new-job NAME ... -- TRAINER ARGS`` and ``trainyard launch [OPTIONS] -- TRAIN ARGS``
both pass everything after the first ``--`` through untouched (a second ``--`` included).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

SEPARATOR = "--"

# What a command group's ``register`` receives: the ``add_parser`` method of the single CLI's
# subcommands, so that no module needs argparse's private subparsers type.
AddParser = Callable[..., argparse.ArgumentParser]


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(the arguments before the first ``--``, those after it, or None when there is no ``--``)."""
    items = list(argv)
    if SEPARATOR not in items:
        return items, None
    cut = items.index(SEPARATOR)
    return items[:cut], items[cut + 1 :]


def parse_command_line(
    parser: argparse.ArgumentParser, commands: Mapping[str, argparse.ArgumentParser], argv: Sequence[str]
) -> argparse.Namespace:
    """Parse ``argv`` with ``parser``, whose subcommands are ``commands``.

    A command whose parser has the default ``takes_passthrough=True`` gets everything after the first
    ``--`` as ``args.passthrough`` (None when there is no ``--``), untouched by argparse; for every
    other command ``--`` keeps its usual argparse meaning (what follows is positional).
    """
    name = next((a for a in argv if not a.startswith("-")), None)
    command = commands.get(name) if name is not None else None
    tail = None
    if command is not None and command.get_default("takes_passthrough"):
        argv, tail = split_passthrough(argv)
    args, extras = parser.parse_known_args(list(argv))
    if extras:  # said by the command's own parser, so that its usage line is the one shown
        (command or parser).error(f"unrecognized arguments: {' '.join(extras)}")
    args.passthrough = tail
    return args


def bounded_int(minimum: int, maximum: int | None, what: str) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number from ``minimum`` to ``maximum`` (None: no upper
    bound); anything else is a usage error saying what the flag takes, e.g.
    ``argument --port: 99999 is not a port number (1 to 65535)``."""
    span = f"{minimum} or more" if maximum is None else f"{minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip()[:40])  # int() of a huge string is slow; no valid value is that long
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {what} ({span})") from None
        if len(text.strip()) > 40 or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{text[:40]} is not {what} ({span})")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse

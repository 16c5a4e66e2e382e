"""The one way trainyard splits a command line at ``--``: what comes after goes to another program.

``trainyard new-job NAME ... -- TRAINER ARGS`` and ``trainyard launch [OPTIONS] -- TRAIN ARGS``
both pass everything after the first ``--`` through untouched (a second ``--`` included).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

SEPARATOR = "--"


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
    if command is not None and command.get_default("takes_passthrough"):
        head, tail = split_passthrough(argv)
        args = parser.parse_args(head)
        args.passthrough = tail
        return args
    args = parser.parse_args(list(argv))
    args.passthrough = None
    return args

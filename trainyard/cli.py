"""The single ``trainyard`` command, on top of every floor.

Thin: argument parsing and printing. Each command group lives beside the package it drives
(webhook.cli, trainer.cli, trainyard.repo.cli, trainyard.sandbox.cli) and imports its heavy
modules only when run; a group whose package an image does not carry is left out, so the webhook
image needs no torch and the trainer image no FastAPI.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from trainyard import __version__
from trainyard.contract.argv import parse_command_line
from trainyard.contract.errors import run

# Modules with a ``register(add_parser)`` function, bottom floor first.
COMMAND_MODULES = (
    "webhook.cli",
    "trainer.cli",
    "trainyard.repo.cli",
    "trainyard.cluster.cli",
    "trainyard.sandbox.cli",
    "trainyard.dev.cli",
)
MISSING_EXTRA = "install the extra it belongs to (pip install 'trainyard[webhook|trainer|repo|dev]')"


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(
        prog="trainyard",
        description="Multi-node GPU training on Kubernetes through GitOps: fabric webhook, trainer, repo tooling.",
    )
    parser.add_argument("--version", action="version", version=f"trainyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # the group's own package is absent (an image without it): leave the group out
            if exc.name == name or name.startswith(f"{exc.name}."):
                continue
            raise
        module.register(sub.add_parser)
    return parser, dict(sub.choices)


def main(argv: list[str] | None = None) -> int:
    parser, commands = build_parser()
    args = parse_command_line(parser, commands, sys.argv[1:] if argv is None else argv)
    return run(lambda: args.func(args), missing_hint=MISSING_EXTRA)


if __name__ == "__main__":
    sys.exit(main())

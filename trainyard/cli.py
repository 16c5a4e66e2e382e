"""The single ``trainyard`` command.

Thin: argument parsing and printing. Each command group lives beside the package it drives
(webhook.cli, trainer.cli, trainyard.repo_cli) and imports its heavy modules only when run, so
the webhook image needs no torch and the trainer image no FastAPI.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from trainyard import __version__
from trainyard.errors import UserError

# Modules with a ``register(subparsers)`` function; a group whose extra is not installed is
# left out of --help rather than breaking the whole command.
COMMAND_MODULES = ("webhook.cli", "trainer.cli", "trainyard.repo_cli")


def build_parser() -> argparse.ArgumentParser:
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
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        print(
            f"error: {args.command} needs the Python package {exc.name!r}, which is not installed; "
            "install the extra it belongs to (pip install 'trainyard[webhook|trainer|repo]')",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

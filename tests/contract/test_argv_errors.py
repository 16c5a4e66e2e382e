"""One way to split at ``--``, and one mapping from errors to exit statuses."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

import pytest

from trainyard.contract import errors
from trainyard.contract.argv import parse_command_line, split_passthrough


def test_split_at_the_first_separator_only():
    assert split_passthrough(["a", "--", "b", "--", "c"]) == (["a"], ["b", "--", "c"])
    assert split_passthrough(["a", "b"]) == (["a", "b"], None)
    assert split_passthrough(["--"]) == ([], [])


def parser() -> tuple[argparse.ArgumentParser, dict]:
    p = argparse.ArgumentParser(prog="t")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("wrap")
    a.add_argument("--n", type=int)
    a.set_defaults(takes_passthrough=True)
    b = sub.add_parser("files")
    b.add_argument("paths", nargs="*")
    return p, dict(sub.choices)


def test_a_passthrough_command_gets_what_follows_the_separator_untouched():
    p, commands = parser()
    args = parse_command_line(p, commands, ["wrap", "--n", "2", "--", "--n", "x"])
    assert args.n == 2 and args.passthrough == ["--n", "x"]
    assert parse_command_line(p, commands, ["wrap"]).passthrough is None


def test_for_other_commands_the_separator_keeps_its_argparse_meaning():
    p, commands = parser()
    args = parse_command_line(p, commands, ["files", "--", "-odd-name.log"])
    assert args.paths == ["-odd-name.log"] and args.passthrough is None


@pytest.mark.parametrize(
    ("raised", "status", "stderr"),
    [
        (errors.UserError("bad flag"), errors.EXIT_USAGE, "error: bad flag"),
        (errors.CheckFailed("2 errors"), errors.EXIT_CHECK_FAILED, "error: 2 errors"),
        (errors.TransportMismatch("sockets"), errors.EXIT_TRANSPORT, "error: sockets"),
        (KeyboardInterrupt(), errors.EXIT_INTERRUPTED, "interrupted"),
        (BrokenPipeError(), errors.EXIT_OK, ""),
    ],
)
def test_run_maps_errors_to_statuses(raised, status, stderr, capsys):
    def command():
        raise raised

    assert errors.run(command) == status
    assert capsys.readouterr().err.strip() == stderr


def test_a_missing_package_is_a_usage_error_with_the_hint(capsys):
    def command():
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    assert errors.run(command, missing_hint="install the trainer extra") == errors.EXIT_USAGE
    assert "'torch'" in capsys.readouterr().err
    with pytest.raises(ModuleNotFoundError):  # without a hint it is a bug, not a user error
        errors.run(command)


# A command that has started something and waits: SIGTERM must run its cleanup as Ctrl-C does.
TERMINATED_COMMAND = """
import sys, time
from pathlib import Path
from trainyard.contract.errors import run

def command():
    try:
        print("started", flush=True)
        time.sleep(60)
    finally:
        Path(sys.argv[1]).write_text("cleaned up")

sys.exit(run(command))
"""


def test_sigterm_runs_the_commands_cleanup_and_exits_143(tmp_path):
    marker = tmp_path / "marker"
    argv = [sys.executable, "-c", TERMINATED_COMMAND, str(marker)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == errors.EXIT_TERMINATED == 143
    assert err == "terminated\n"
    assert marker.read_text() == "cleaned up"


def test_a_handler_already_set_is_left_in_place():
    def mine(signum, frame):
        raise AssertionError("not called")

    seen = []
    before = signal.signal(signal.SIGTERM, mine)
    try:
        assert errors.run(lambda: seen.append(signal.getsignal(signal.SIGTERM))) == errors.EXIT_OK
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == [mine]

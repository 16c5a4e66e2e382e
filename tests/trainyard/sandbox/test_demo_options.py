"""``trainyard demo``'s options that belong to one path only are refused, naming it, before anything
starts."""

from __future__ import annotations

import pytest

from trainyard.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--lose-node", "--offline"], "--lose-node: only on the control plane"),
        (["--lose-node", "--admission", "policy"], "--lose-node: only on the control plane"),
        (["--lose-node", "--no-fault"], "--lose-node and --no-fault: choose one"),
        (["--max-steps", "10"], "--max-steps: only with --offline"),
    ],
)
def test_options_of_the_other_path_are_refused(argv, message, capsys):
    assert main(["demo", *argv]) != 0
    assert message in capsys.readouterr().err

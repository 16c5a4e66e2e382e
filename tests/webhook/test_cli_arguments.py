"""The webhook commands' flags out of range: a usage error naming the flag and its range, exit 2."""

from __future__ import annotations

import pytest

from tests.webhook.test_cli import trainyard
from trainyard.contract.errors import UserError
from webhook.certs import generate


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["certs", "--days", "-5"], "argument --days: -5 is not a number of days (1 to 36500)"),
        (["certs", "--days", "0"], "argument --days: 0 is not a number of days (1 to 36500)"),
        (["certs", "--days", "9" * 5000], "is not a number of days (1 to 36500)"),
        (["certs", "--days", "soon"], "argument --days: 'soon' is not a number of days (1 to 36500)"),
        (
            ["serve", "--policies", "policies", "--profile", "tcp", "--tls-dir", ".", "--port", "99999"],
            "argument --port: 99999 is not a port number (1 to 65535)",
        ),
        (
            ["serve", "--policies", "policies", "--profile", "tcp", "--tls-dir", ".", "--port", "0"],
            "argument --port: 0 is not a port number (1 to 65535)",
        ),
    ],
)
def test_out_of_range_flags_are_usage_errors(tmp_path, args, message):
    if args[0] == "certs":
        args = [*args, "--out", str(tmp_path / "tls")]
    r = trainyard(*args)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"trainyard {args[0]}: error: ") and message in last
    assert "Traceback" not in r.stderr and not (tmp_path / "tls").exists()


def test_generate_refuses_a_validity_out_of_range(tmp_path):
    with pytest.raises(UserError, match="--days -5: a certificate must be valid for 1 to 36500 days"):
        generate(tmp_path, days=-5)
    assert not any(tmp_path.iterdir())

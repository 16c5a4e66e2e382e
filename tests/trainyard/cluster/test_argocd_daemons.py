"""What trainyard reads of Argo CD's Application status, whatever is written there."""

from __future__ import annotations

import datetime as dt
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.cluster import argocd_daemons
from trainyard.contract.errors import UserError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-12-07T04:33:14Z", dt.datetime(2026, 12, 7, 4, 33, 14, tzinfo=dt.UTC)),
        ("2026-12-07T04:33:14+01:00", dt.datetime(2026, 12, 7, 3, 33, 14, tzinfo=dt.UTC)),
        ("2026-12-07T04:33:14", None),  # no zone: cannot be compared with the call's time
        ("yesterday", None),
        ("", None),
        (None, None),
        (1765081994, None),
        ("2026-12-07T04:33:14Z" + "0" * 100, None),
    ],
)
def test_a_conditions_time_is_read_or_left_unknown(raw, expected):
    assert argocd_daemons._transition_time({"lastTransitionTime": raw}) == expected


class Answers:
    """kube.get answering one Application, as kube-apiserver returns it."""

    def __init__(self, app: dict) -> None:
        self.app = app

    def get(self, path: str) -> dict:
        return self.app


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=2)))
def test_waiting_for_a_sync_never_raises_on_a_hostile_condition(raw):
    app = {"status": {"conditions": [{"type": "ComparisonError", "message": "m", "lastTransitionTime": raw}]}}
    with (
        mock.patch.object(argocd_daemons.time, "sleep", lambda _s: None),  # the status is read a few times
        pytest.raises(UserError, match=r"did not sync app at 0123456789ab within 0\.01 s"),
    ):
        argocd_daemons.wait_synced(Answers(app), "app", "0123456789abcdef", 0.01)


def test_a_comparison_error_since_the_call_ends_the_wait_with_argo_cds_words():
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "ComparisonError", "message": "kustomize build failed: job.yaml", "lastTransitionTime": later}
    app = {"status": {"conditions": [condition]}}
    with pytest.raises(UserError, match="cannot render app at 0123456789ab") as exc:
        argocd_daemons.wait_synced(Answers(app), "app", "0123456789abcdef", 5)
    assert "kustomize build failed: job.yaml" in str(exc.value)


def test_a_comparison_error_from_before_the_call_counts_when_it_is_since_the_push():
    """The push hook has Argo CD compare before `git push` returns: the error a caller waits for may
    be older than the call, and counts from the push on; one older than the push does not."""
    pushed = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)
    at = (pushed + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    app = {"status": {"conditions": [{"type": "ComparisonError", "message": "m", "lastTransitionTime": at}]}}
    with pytest.raises(UserError, match="cannot render app at 0123456789ab"):
        argocd_daemons.wait_synced(Answers(app), "app", "0123456789abcdef", 5, since=pushed)
    with pytest.raises(UserError, match="did not sync app"):  # the call's own time: that error is older
        argocd_daemons.wait_synced(Answers(app), "app", "0123456789abcdef", 0.01)
    stale = (pushed - dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    app["status"]["conditions"][0]["lastTransitionTime"] = stale  # a broken push before this one
    with pytest.raises(UserError, match="did not sync app"):
        argocd_daemons.wait_synced(Answers(app), "app", "0123456789abcdef", 0.01, since=pushed)

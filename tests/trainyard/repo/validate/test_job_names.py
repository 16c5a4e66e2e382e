"""Job folder names are checked as what the job ApplicationSet makes of them: the Application's name
and labels rendered by the repository's own template, against kube-apiserver's rules."""

from __future__ import annotations

import re
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import errors_of
from trainyard.repo import validate
from trainyard.repo.upstream import appset
from trainyard.repo.validate.job_names import folder_name_problems

# The rules as kubernetes/apimachinery@v0.36.5 writes them (pkg/util/validation/validation.go
# dns1123SubdomainFmt, DNS1123SubdomainMaxLength; pkg/api/validate/content/kube.go labelValueFmt,
# LabelValueMaxLength), compiled as Go's regexp compiles "^" + fmt + "$" (\Z: Go's $ is the end of the
# text, never before a last newline); lengths are Go's len, in bytes.
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
GO_SUBDOMAIN = re.compile(r"\A" + _LABEL + r"(\." + _LABEL + r")*\Z")
GO_LABEL_VALUE = re.compile(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")


def kube_accepts(name: str, labels: dict[str, str]) -> bool:
    return (
        GO_SUBDOMAIN.match(name) is not None
        and len(name.encode()) <= 253
        and all(GO_LABEL_VALUE.match(v) is not None and len(v.encode()) <= 63 for v in labels.values())
    )


@pytest.fixture(scope="module")
def job_appset(report):
    render = report.renders["dev"]
    found = [r for r in render.resources() if r.kind == "ApplicationSet" and r.name == "trainyard-jobs"]
    assert len(found) == 1
    return found[0]


# Folder names as people (and attackers) write them: mostly valid characters, with upper case,
# '_', '.', spaces, non-ASCII letters and digits, a newline; lengths around the 63 limit.
CHARS = st.sampled_from(list("abcxyz0189-") * 4 + list("ABZ_. \u00e9\u0131\u0660\u212a\n\t"))
NAMES = st.one_of(
    st.text(CHARS, min_size=1, max_size=12),
    st.builds(lambda s, n: (s * 70)[:n], st.text(CHARS, min_size=1, max_size=3), st.integers(55, 70)),
).filter(lambda n: not n.startswith(".") and "/" not in n)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(NAMES)
def test_a_folder_name_is_refused_exactly_when_kube_apiserver_would_refuse_its_application(repo, job_appset, name):
    (app,) = appset.generate_applications(job_appset, repo, [f"overlays/dev/jobs/{name}"])
    # the repository's template, run by the emulation: the name and label come from the folder
    assert app.name == f"dev-job-{name}"
    assert app.labels == {"trainyard.dev/job": name}
    problems = folder_name_problems(app.doc)
    assert (not problems) == kube_accepts(app.name, app.labels), (name, problems)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("Smoke", "Application name 'dev-job-Smoke' (13 characters) is not a DNS-1123 subdomain"),
        ("smoke_ddp", "is not a DNS-1123 subdomain"),
        ("smoke ddp", "label trainyard.dev/job: label value 'smoke ddp'"),
        ("sm\u00f6ke", "is not a DNS-1123 subdomain"),
        ("-smoke", "label value '-smoke'"),  # dev-job--smoke is a valid name; the label is not
        ("smoke.", "is not a DNS-1123 subdomain"),
        ("smoke..ddp", "is not a DNS-1123 subdomain"),
        ("s" * 64, "(64 characters): at most 63"),
    ],
)
def test_the_refusal_names_the_folder_the_application_and_the_rule(name, said):
    problems = folder_name_problems({"metadata": {"name": f"dev-job-{name}", "labels": {"trainyard.dev/job": name}}})
    assert any(said in p for p in problems), problems


def test_a_template_change_is_followed(repo, job_appset):
    """The names come from the template, not from a pattern written here: a template that puts the
    folder name in a longer prefix makes a 60-character folder too long for a label."""
    import copy

    changed = copy.deepcopy(job_appset)
    changed.doc["spec"]["template"]["metadata"]["labels"] = {"trainyard.dev/job": "job-of-{{ .path.basename }}"}
    name = "a" * 60
    (app,) = appset.generate_applications(changed, repo, [f"overlays/dev/jobs/{name}"])
    assert any("(67 characters): at most 63" in p for p in folder_name_problems(app.doc))
    (app,) = appset.generate_applications(job_appset, repo, [f"overlays/dev/jobs/{name}"])
    assert folder_name_problems(app.doc) == []


def _rename(repo, old: str, new: str) -> None:
    shutil.move(repo.root / "overlays/dev/jobs" / old, repo.root / "overlays/dev/jobs" / new)


def test_validate_refuses_a_badly_named_job_folder(repo_copy):
    _rename(repo_copy, "smoke-ddp", "Smoke_DDP")
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    mine = [e for e in errors if "job folder name 'Smoke_DDP'" in e]
    assert mine, errors
    assert "overlays/dev/jobs/Smoke_DDP" in mine[0] and "Application dev-job-Smoke_DDP" in mine[0]
    assert "is not a DNS-1123 subdomain" in mine[0] and "rename the folder" in mine[0]


def test_a_well_named_folder_passes(repo_copy):
    """Positive control: a folder name with digits, '-' and '.' at the longest a label allows."""
    name = "smoke-ddp.v2-" + "x" * (63 - len("smoke-ddp.v2-"))
    _rename(repo_copy, "smoke-ddp", name)
    assert errors_of(validate.validate(repo_copy, ["dev"]), "dev") == []


def test_a_hidden_job_folder_is_refused_not_silently_skipped(repo_copy):
    """Argo CD's git generator skips a folder whose name starts with '.': no Application, no error."""
    _rename(repo_copy, "smoke-ddp", ".smoke-ddp")
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    mine = [e for e in errors if "job folder name '.smoke-ddp' starts with '.'" in e]
    assert len(mine) == 1, errors
    assert "overlays/dev/jobs/.smoke-ddp" in mine[0] and "skips hidden folders" in mine[0]

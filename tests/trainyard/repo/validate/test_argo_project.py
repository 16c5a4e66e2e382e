"""AppProject checks as Argo CD's application controller makes them (trainyard.repo.validate.argo
check_project, is_source_permitted, is_destination_permitted) and git URLs compared as it compares them
(trainyard.repo.model.giturl). The tables are ported from the upstream tests named above each. The
offline check reads literal patterns and "*" alone (what this repository's AppProjects write); a row
with any other glob must be refused by name (GlobNotRead), never answered otherwise."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import giturl, kustomize, repository
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import applications
from trainyard.repo.validate import argo

# argo-cd@v3.6.2:pkg/apis/application/v1alpha1/types_test.go TestAppProject_IsSourcePermitted (its rows
# of "**" globs, new in v3.6.2, are globs the offline check refuses by name)
SOURCE_PERMITTED = [
    (["*"], "https://github.com/argoproj/test.git", True),
    (["https://github.com/argoproj/test.git"], "https://github.com/argoproj/test.git", True),
    (["ssh://git@GITHUB.com:argoproj/test"], "ssh://git@github.com:argoproj/test", True),
    (["https://github.com/argoproj/*"], "https://github.com/argoproj/argoproj.git", True),
    (
        ["https://github.com/test1/test.git", "https://github.com/test2/test.git"],
        "https://github.com/test2/test.git",
        True,
    ),
    (["https://github.com/argoproj/test1.git"], "https://github.com/argoproj/test2.git", False),
    (["https://github.com/argoproj/*.git"], "https://github.com/argoproj1/test2.git", False),
    (["https://github.com/argoproj/foo"], "https://github.com/argoproj/foo1", False),
    (["https://gitlab.com/group/*"], "https://gitlab.com/group/repo/owner", False),
    (["https://gitlab.com/group/*/*"], "https://gitlab.com/group/repo/owner", True),
    (["https://gitlab.com/group/*/*/*"], "https://gitlab.com/group/sub-group/repo/owner", True),
    (["https://gitlab.com/group/**"], "https://gitlab.com/group/sub-group/repo/owner", True),
]
# types_test.go TestAppProject_IsNegatedSourcePermitted
NEGATED_SOURCE_PERMITTED = [
    (["!https://github.com/argoproj/test.git"], "https://github.com/argoproj/test.git", False),
    (["!ssh://git@GITHUB.com:argoproj/test"], "ssh://git@github.com:argoproj/test", False),
    (["!https://github.com/argoproj/*"], "https://github.com/argoproj/argoproj.git", False),
    (
        ["https://github.com/test1/test.git", "!https://github.com/test2/test.git"],
        "https://github.com/test2/test.git",
        False,
    ),
    (["!https://github.com/argoproj/foo*"], "https://github.com/argoproj/foo1", False),
    (["!https://gitlab.com/group/*/*"], "https://gitlab.com/group/repo/owner", False),
    (["!https://gitlab.com/group/*/*/*"], "https://gitlab.com/group/sub-group/repo/owner", False),
    (["!https://gitlab.com/group/**"], "https://gitlab.com/group/sub-group/repo/owner", False),
    (["*"], "https://github.com/argoproj/test.git", True),
    (["https://github.com/argoproj/test1.git", "*"], "https://github.com/argoproj/test2.git", True),
    (["!https://github.com/argoproj/*.git", "*"], "https://github.com/argoproj1/test2.git", True),
]
# What the rules above imply, checked against the upstream function: a deny entry that does not
# match permits; URL spellings normalise (case, one ".git", git@host:path) but a trailing / does not;
# {a,b} in an https path is escaped by net/url and no longer an alternative.
SOURCE_PERMITTED_MORE = [
    (["!https://github.com/evil/x"], "https://github.com/anything/else", True),
    ([], "https://github.com/argoproj/test", False),
    (["https://GitHub.com/ArgoProj/Test.git"], "https://github.com/argoproj/test", True),
    (["git@github.com:argoproj/test.git"], "ssh://git@github.com/argoproj/test", True),
    (["https://github.com/argoproj/test"], "https://github.com/argoproj/test/", False),
    (["https://github.com/argoproj/test.git.git"], "https://github.com/argoproj/test", False),
    (["https://github.com/argoproj/{test,other}"], "https://github.com/argoproj/test", False),
    (["https://github.com/{argoproj,other}/*"], "https://github.com/argoproj/test", False),
    (["registry.k8s.io/kueue/charts"], "registry.k8s.io/kueue/charts", True),
    (["https://*.example.com/*"], "https://git.example.com/repo", True),
]


@pytest.mark.parametrize(("repos", "url", "want"), SOURCE_PERMITTED + NEGATED_SOURCE_PERMITTED + SOURCE_PERMITTED_MORE)
def test_is_source_permitted(repos, url, want):
    try:
        got = argo.is_source_permitted(repos, url)
    except (argo.GlobNotRead, giturl.UrlNotEmulated) as exc:
        assert "cluster tier" in str(exc)
        assert _globbed(repos) or not all(_plain_url(u) for u in [*repos, url])
        return
    assert got is want


def _plain_url(url: str) -> bool:
    """A URL the offline normalisation reads (giturl._SIMPLE, after the ssh rewrite)."""
    try:
        giturl.normalize_git_url(url.removeprefix("!"))
    except giturl.UrlNotEmulated:
        return False
    return True


# types_test.go TestAppProject_IsDestinationPermitted: (project destinations, app destination, permitted)
K8S = "https://kubernetes.default.svc"
EKS = "https://eks-cluster-endpoint.ap-southeast-1.eks.amazonaws.com"
DESTINATION_PERMITTED = [
    ([{"server": K8S, "namespace": "default"}], {"server": K8S, "namespace": "default"}, True),
    ([{"server": K8S, "namespace": "default"}], {"server": K8S, "namespace": "kube-system"}, False),
    ([{"server": "https://my-cluster", "namespace": "default"}], {"server": K8S, "namespace": "default"}, False),
    ([{"server": K8S, "namespace": "*"}], {"server": K8S, "namespace": "kube-system"}, True),
    ([{"server": "https://*.default.svc", "namespace": "default"}], {"server": K8S, "namespace": "default"}, True),
    (
        [{"server": "https://team1-*", "namespace": "default"}],
        {"server": "https://test2-dev-cluster", "namespace": "default"},
        False,
    ),
    ([{"server": K8S, "namespace": "test-*"}], {"server": K8S, "namespace": "test-foo"}, True),
    ([{"server": K8S, "namespace": "test-*"}], {"server": K8S, "namespace": "test"}, False),
    ([{"server": "*", "namespace": "*"}], {"server": K8S, "namespace": "test"}, True),
    ([{"server": "", "namespace": "*", "name": "test"}], {"name": "test", "namespace": "test"}, True),
    ([{"server": "", "namespace": "*", "name": "test2"}], {"name": "test", "namespace": "test"}, False),
    (
        [
            {"name": "host-cluster", "server": K8S, "namespace": "!{kube-system,argocd}"},
            {"name": "destination-cluster-01", "server": EKS, "namespace": "*"},
        ],
        {"server": EKS, "namespace": "kube-system"},
        True,
    ),
]
# types_test.go TestAppProject_IsNegatedDestinationPermitted
NEGATED_DESTINATION_PERMITTED = [
    ([{"server": "!" + K8S, "namespace": "default"}], {"server": K8S, "namespace": "default"}, False),
    ([{"server": K8S, "namespace": "!default"}], {"server": K8S, "namespace": "kube-system"}, True),
    ([{"server": "!https://my-cluster", "namespace": "default"}], {"server": K8S, "namespace": "default"}, True),
    ([{"server": "!" + K8S, "namespace": "*"}], {"server": K8S, "namespace": "kube-system"}, False),
    ([{"server": "!https://*.default.svc", "namespace": "default"}], {"server": K8S, "namespace": "default"}, False),
    (
        [{"server": "!https://team1-*", "namespace": "default"}],
        {"server": "https://test2-dev-cluster", "namespace": "default"},
        True,
    ),
    ([{"server": K8S, "namespace": "!test-*"}], {"server": K8S, "namespace": "test-foo"}, False),
    ([{"server": K8S, "namespace": "!test-*"}], {"server": K8S, "namespace": "test"}, True),
    ([{"server": "", "namespace": "*", "name": "!test"}], {"name": "test", "namespace": "test"}, False),
    ([{"server": "", "namespace": "*", "name": "!test2"}], {"name": "test", "namespace": "test"}, True),
    (
        [{"server": "*", "namespace": "kube-system"}, {"server": "*", "namespace": "!kube-system"}],
        {"server": K8S, "namespace": "kube-system"},
        False,
    ),
    (
        [{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-system"}],
        {"server": K8S, "namespace": "kube-system"},
        False,
    ),
    (
        [{"server": K8S, "namespace": "*"}, {"server": "!" + K8S, "namespace": "*"}],
        {"server": K8S, "namespace": "kube-system"},
        False,
    ),
    (
        [{"server": "*", "namespace": "*"}, {"server": "!" + K8S, "namespace": "kube-system"}],
        {"server": K8S, "namespace": "kube-system"},
        False,
    ),
    (
        [
            {"server": "*", "namespace": "*"},
            {"server": "!" + K8S, "namespace": "kube-system"},
            {"server": "*", "namespace": "!kube-system"},
        ],
        {"server": K8S, "namespace": "kube-system"},
        False,
    ),
    (
        [
            {"server": "*", "namespace": "*"},
            {"server": "!" + K8S, "namespace": "kube-system"},
            {"server": "*", "namespace": "!kube-system"},
        ],
        {"server": K8S, "namespace": "default"},
        True,
    ),
    (
        [
            {"server": "*", "namespace": "*"},
            {"server": "!" + K8S, "namespace": "kube-system"},
            {"server": "*", "namespace": "!kube-system"},
        ],
        {"server": "https://test-dev-cluster", "namespace": "kube-system"},
        False,
    ),
    (
        [{"server": "", "namespace": "*", "name": "test"}, {"server": "", "namespace": "*", "name": "!test"}],
        {"name": "test", "namespace": "test"},
        False,
    ),
    (
        [{"server": "*", "namespace": "test"}, {"server": "!https://test-server", "namespace": "other"}],
        {"server": "https://test-server", "namespace": "test"},
        True,
    ),
    (
        [{"server": "*", "namespace": "*"}, {"server": "https://test-server", "namespace": "!other"}],
        {"server": "https://other-test-server", "namespace": "other"},
        True,
    ),
    # new in v3.6.2: a name deny applies only where the entry's namespace matches
    (
        [{"name": "*", "namespace": "*"}, {"name": "!bad", "namespace": "other"}],
        {"name": "bad", "namespace": "test"},
        True,
    ),
    (
        [{"name": "*", "namespace": "*"}, {"name": "!bad", "namespace": "test"}],
        {"name": "bad", "namespace": "test"},
        False,
    ),
]
# argo-cd@v3.6.2 types_test.go TestAppProject_IsDestinationPermitted_DenyNameOrServer: a deny pattern
# on one identifier vetoes the destination even where the entry's other identifier matches
API = "https://api.example.com"
DENY_NAME_OR_SERVER = [
    ([{"name": "!bad-cluster", "server": API, "namespace": "*"}], {"server": API, "name": "bad-cluster"}, False),
    ([{"name": "good-cluster", "server": "!" + API, "namespace": "*"}], {"server": API, "name": "good-cluster"}, False),
    ([{"name": "!other-cluster", "server": API, "namespace": "*"}], {"server": API, "name": "good-cluster"}, True),
    ([{"name": "!bad-cluster", "namespace": "*"}], {"server": API, "name": "bad-cluster"}, False),
]


@pytest.mark.parametrize(("destinations", "dest", "want"), DESTINATION_PERMITTED + NEGATED_DESTINATION_PERMITTED)
def test_is_destination_permitted(destinations, dest, want):
    try:
        got = argo.is_destination_permitted(
            destinations, dest.get("server", ""), dest.get("name", ""), dest["namespace"]
        )
    except argo.GlobNotRead as exc:
        assert _globbed(v for d in destinations for v in d.values()) and "cluster tier" in str(exc)
        return
    assert got is want


@pytest.mark.parametrize(("destinations", "dest", "want"), DENY_NAME_OR_SERVER)
def test_a_deny_pattern_on_name_or_server_vetoes_the_entry(destinations, dest, want):
    assert argo.is_destination_permitted(destinations, dest["server"], dest["name"], "default") is want


def _globbed(patterns) -> bool:
    """Whether a pattern is a glob beyond "*" alone (the rows refused by name)."""
    return any(p.startswith("!*") or (p != "*" and any(c in p for c in "*?[]{}")) for p in patterns)


def test_the_glob_forms_this_repository_does_not_write_are_refused_by_name():
    for pattern in ("https://github.com/argoproj/*", "**", "a?", "[ab]", "{a,b}", "!test-*", "!*"):
        with pytest.raises(argo.GlobNotRead, match="is a glob beyond literal text and '\\*' alone"):
            argo.glob_match(pattern, "x", True)


def test_a_namespace_deny_entry_needs_its_server_to_match():
    """isDestinationMatched's third case requires the server to match: an entry naming only the
    cluster by name and denying a namespace denies nothing (checked against the upstream function)."""
    destinations = [{"server": K8S, "namespace": "*"}, {"name": "in-cluster", "namespace": "!ml-training"}]
    assert argo.is_destination_permitted(destinations, K8S, "in-cluster", "ml-training") is True
    destinations[1] = {"server": K8S, "namespace": "!ml-training"}
    assert argo.is_destination_permitted(destinations, K8S, "in-cluster", "ml-training") is False


# types_test.go TestGlobMatch (the rows of globs beyond "*" alone are refused by name, above)
@pytest.mark.parametrize(
    ("pattern", "value", "negation", "want"),
    [
        ("foo", "foo", False, True),
        ("*", "anything", False, True),
        ("!foo", "foo", True, False),
        ("!foo", "bar", True, True),
        ("!foo", "foo", False, False),
        ("!foo", "!foo", False, True),
    ],
)
def test_glob_match(pattern, value, negation, want):
    assert argo.glob_match(pattern, value, negation) is want


# NormalizeGitURL (argo-cd@v3.6.2:util/git/git.go; outputs of the upstream function, and its
# git_test.go TestSameURL pairs): the forms this repository writes are normalised, every other URL
# (escapes, spaces, ports that are no number, net/url's odd cases) is refused (None)
@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("https://github.com/Org/Repo.git", "https://github.com/org/repo"),
        ("https://GITHUB.com/argoproj/test", "https://github.com/argoproj/test"),
        (" https://github.com/argoproj/test\n", "https://github.com/argoproj/test"),
        ("git@github.com:org/repo.git", "git@github.com/org/repo"),
        ("git@GITHUB.com:test", "git@github.com/test"),
        ("ssh://git@GITHUB.com/argoproj/test.git", "git@github.com/argoproj/test"),
        ("https://github.com:4443/TEST.git", "https://github.com:4443/test"),
        ("https://dev.azure.com/1234/myproj/_git/myrepo", "https://dev.azure.com/1234/myproj/_git/myrepo"),
        ("https://github.com/org/repo/", "https://github.com/org/repo/"),
        ("https://github.com/example/trainyard.git.git", "https://github.com/example/trainyard.git"),
        ("*", "*"),
        ("", ""),
        ("registry.k8s.io/kueue/charts", "registry.k8s.io/kueue/charts"),
        ("https://charts.jetstack.io", "https://charts.jetstack.io"),
        ("file:///tmp/x/Repository.git", "file:///tmp/x/repository"),  # the cluster tier's repository
        ("//host/x", None),
        ("ssh://git@GITHUB.com:argoproj/test", None),  # net/url: "argoproj" is no port
        ("https://github.com/org/{a,b}", None),
        ("https://github.com/org/*", None),
        ("https://github.com/a b", None),
        ("https://github.com/%zz", None),
        ("https://host:x/a", None),
        ("https://u:p@host/a", None),
        ("https://host/a?ref=x", None),
        ("https://host/a#x", None),
        ("a:b/c", None),
        ("https://gïthub.com/x", None),
        ("https://[::1]/x", None),
        ("@" * 3000, None),
        ("a@" * 1000 + "b", None),
    ],
)
def test_normalize_git_url(url, normalized):
    if normalized is None:
        with pytest.raises(giturl.UrlNotEmulated, match="cluster tier"):
            giturl.normalize_git_url(url)
        assert repository.normalize_url(url) == ""
    else:
        assert giturl.normalize_git_url(url) == normalized
        assert repository.normalize_url(url) == normalized


def test_is_this_repo_compares_as_argo_cd_does(tmp_path):
    repo = repository.Repository(root=tmp_path, url="https://github.com/example/trainyard.git", revision="main")
    assert repo.is_this_repo("https://GitHub.com/example/trainyard")
    assert repo.is_this_repo("git@github.com:example/trainyard.git") is False  # ssh and https are two repositories
    assert repo.is_this_repo("https://github.com/example/trainyard/") is False
    assert repo.is_this_repo(5) is False


# ---------------------------------------------------------------------------------------------
# check_project as ValidatePermissions and validateSyncPermissions run it


class _Ctx:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def err(self, where: str, message: str, obj: str | None = None) -> None:
        self.errors.append(message)


def _check(project_spec: dict, app_spec: dict, resources: list[dict] = ()) -> list[str]:
    app_doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a"}, "spec": app_spec}
    ar = applications.AppRender(app=applications.Application(Resource(doc=app_doc, origin="a.yaml")))
    ar.resources = [Resource(doc=d, origin="r.yaml") for d in resources]
    project = Resource(doc={"kind": "AppProject", "metadata": {"name": "p"}, "spec": project_spec}, origin="p.yaml")
    ctx = _Ctx()
    argo.check_project(ctx, ar, project)  # type: ignore[arg-type]
    return ctx.errors


OPEN = {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}
SOURCE = {"repoURL": "https://github.com/argoproj/argo-cd", "path": "."}
DEST = {"server": K8S, "namespace": "default"}


# argo-cd@v3.6.2:util/argo/argo_test.go TestValidatePermissionsEmptyDestination and TestValidatePermissions
@pytest.mark.parametrize(
    ("app_spec", "project_spec", "message"),
    [
        ({"source": SOURCE}, OPEN, "Destination server missing from app spec"),
        ({"source": {"repoURL": ""}, "destination": DEST}, OPEN, "are required"),
        (
            {"source": {"repoURL": "http://some/where", "path": "", "chart": ""}, "destination": DEST},
            OPEN,
            "are required",
        ),
        (
            {"source": {"repoURL": "http://some/where", "chart": "somechart"}, "destination": DEST},
            OPEN,
            "is required if the manifest source is a helm chart",
        ),
        (
            {"source": {"repoURL": "http://some/where", "chart": "c", "targetRevision": "1.4.1"}, "destination": DEST},
            {"sourceRepos": ["http://some/where/else"], "destinations": [{"server": "*", "namespace": "*"}]},
            "application repo http://some/where is not permitted in project 'p'",
        ),
        (
            {"source": SOURCE, "destination": {"server": K8S, "namespace": "testns"}},
            {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "default"}]},
            "application destination server 'https://kubernetes.default.svc' and namespace 'testns' do not match",
        ),
        (
            {"source": SOURCE, "destination": {"server": "https://127.0.0.1:6443", "namespace": "default"}},
            OPEN,
            "error getting cluster by server",
        ),
        (
            {"source": SOURCE, "destination": {"name": "does-not-exist", "namespace": "default"}},
            OPEN,
            "there are no clusters with this name: does-not-exist",
        ),
        (
            {"source": SOURCE, "destination": {"name": "in-cluster", "server": K8S}},
            OPEN,
            "can't have both name and server",
        ),
        (
            {"sources": [{"repoURL": "https://x/y", "ref": "values"}, {"repoURL": "https://x/z"}], "destination": DEST},
            OPEN,
            "either source.path, source.chart, or source.ref are required",
        ),
        (
            {"source": SOURCE, "destination": DEST},
            {**OPEN, "permitOnlyProjectScopedClusters": True},
            "permitOnlyProjectScopedClusters",
        ),
        ({"source": SOURCE, "destination": DEST}, {"sourceRepos": "*"}, "sourceRepos must be a list of strings"),
    ],
)
def test_check_project_conditions(app_spec, project_spec, message):
    errors = _check(project_spec, app_spec)
    assert len(errors) == 1 and message in errors[0], errors


def test_check_project_permits_the_in_cluster_by_name_and_checks_each_objects_namespace():
    project = {
        "sourceRepos": ["*"],
        "destinations": [{"name": "in-cluster", "namespace": "ok-a"}],
    }
    app = {"source": SOURCE, "destination": {"server": K8S + "/", "namespace": "ok-a"}}
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ok-a"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "kube-system"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}},
    ]
    errors = _check(project, app, objects)
    assert errors[0] == "namespace kube-system is not permitted in project 'p' (spec.destinations)"
    assert len(errors) == 2 and "does not allow core/Namespace" in errors[1]  # no clusterResourceWhitelist


def test_check_project_refuses_a_glob_it_does_not_read_by_name():
    project = {"sourceRepos": ["https://github.com/argoproj/*"], "destinations": [{"server": K8S, "namespace": "ok-*"}]}
    app = {"source": SOURCE, "destination": {"server": K8S, "namespace": "ok-a"}}
    errors = _check(project, app, [])
    assert any("spec.sourceRepos" in e and "'https://github.com/argoproj/*' is a glob" in e for e in errors), errors
    assert any("spec.destinations" in e and "'ok-*' is a glob" in e and "cluster tier" in e for e in errors), errors


def test_validate_reports_project_denials_with_argo_cds_words(repo_copy):
    edit(
        repo_copy,
        "base/apps/projects.yaml",
        "    - https://charts.jetstack.io\n",
        "    - '!https://charts.jetstack.io'\n",
    )
    edit(
        repo_copy,
        "base/apps/projects.yaml",
        "      namespace: ml-training\n",
        "      namespace: ml-training\n    - server: https://kubernetes.default.svc\n      namespace: '!ml-training'\n",
    )
    kustomize.clear_cache()
    report = validate.validate(repository.load(repo_copy.root))
    errors = "\n".join(errors_of(report))
    assert "application repo https://charts.jetstack.io is not permitted in project 'trainyard-platform'" in errors
    assert (
        "application destination server 'https://kubernetes.default.svc' and namespace 'ml-training' do not match "
        "any of the allowed destinations in project 'trainyard-jobs'"
    ) in errors
    assert "namespace ml-training is not permitted in project 'trainyard-jobs'" in errors

"""The ApplicationSet controller emulation (trainyard.repo.upstream.appset) and the path.Match it uses
(trainyard.repo.upstream.go_path), against Argo CD v3.6.2's own test tables and Go's, for what this
repository writes; everything else is refused by name, hostile input included."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainyard.repo.model import repository
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import applications, appset, go_path

FINALIZER = "resources-finalizer.argocd.argoproj.io"


# ---------------------------------------------------------------------------------------------
# The three expressions: outputs of Render.Replace (argo-cd@v3.6.2:applicationset/utils/utils.go, Go's
# text/template) on buildPathParameters (generators/repo_path_utils.go); everything else refused.


@pytest.mark.parametrize(
    ("tmpl", "path", "expected"),
    [
        ("{{ .path.path }}", "overlays/dev/jobs/a", "overlays/dev/jobs/a"),
        ("{{.path.basename}}", "overlays/dev/jobs/a", "a"),
        ("{{ index .path.segments 1 }}-job-{{ .path.basename }}", "overlays/dev/jobs/a", "dev-job-a"),
        ("{{\tindex  .path.segments\n0 }}", "overlays/x", "overlays"),
        ("no action }} here {", "a/b", "no action }} here {"),
        ("{{ .path.basename }}" * 3, "a/B_x", "B_x" * 3),
    ],
)
def test_the_expressions_this_repository_uses(tmpl, path, expected):
    assert appset.render(tmpl, path) == expected


@pytest.mark.parametrize(
    ("tmpl", "message"),
    [
        ("{{ .path.basenameNormalized }}", "'{{ .path.basenameNormalized }}' is not one trainyard renders offline"),
        ("{{ .path.segments }}", "is not one trainyard renders offline; the ones it renders: {{ .path.path }}"),
        ("{{- .path.basename }}", "not one trainyard renders"),
        ("{{ .path.basename | upper }}", "not one trainyard renders"),
        ("{{ normalize .path.basename }}", "not one trainyard renders"),
        ("{{ index .path.segments -1 }}", "not one trainyard renders"),
        ("{{ index .path.segments 01 }}", "not one trainyard renders"),
        ("{{ index .path.segments 3 }}", "index out of range: 3"),
        ("{{/* c */}}", "not one trainyard renders"),
        ("{{ .values.env }}", "not one trainyard renders"),
        ("{{ .path.path ", "unclosed action"),
        ("{{ {{ .path.path }}", "not one trainyard renders"),
        ("{{" + "x" * 10_000 + "}}", "'{{" + "x" * 78 + "...' is not one"),  # quoted, cut short
    ],
)
def test_every_other_template_is_refused_by_name(tmpl, message):
    with pytest.raises(appset.TemplateError) as exc:
        appset.render(tmpl, "jobs/a/b")
    assert message in str(exc.value) and len(str(exc.value)) < 400


def test_many_actions_render_in_one_pass():
    assert appset.render("{{ .path.basename }}-" * 20_000, "a/b") == "b-" * 20_000
    with pytest.raises(appset.TemplateError, match="unclosed action"):
        appset.render("{{" * 200_000, "a/b")


_TEMPLATE_ALPHABET = st.sampled_from(
    [*"{}-|()$.\"`'/*\\ \t\n:=,", "{{", "}}", "{{- ", " -}}", ".path", ".path.path", ".path.basename", "index",
     ".path.segments", "1", "\u00e9", "\x00"]
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(tmpl=st.one_of(st.text(), st.lists(_TEMPLATE_ALPHABET, max_size=40).map("".join)))
def test_fuzz_render_fails_only_with_template_errors(tmpl):
    try:
        out = appset.render(tmpl, "a/b")
    except appset.TemplateError:
        assert "{{" in tmpl
        return
    if "{{" not in tmpl:
        assert out == tmpl


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        # utils_test.go TestRenderTemplateParamsFinalizers, without preserveResourcesOnDeletion (refused)
        (["existing-finalizer"], ["existing-finalizer"]),
        (["resources-finalizer.argocd.argoproj.io/background"], ["resources-finalizer.argocd.argoproj.io/background"]),
        (None, [FINALIZER]),
        ([FINALIZER], [FINALIZER]),
        ([], [FINALIZER]),
    ],
)
def test_default_finalizer(existing, expected):
    template = {"metadata": {} if existing is None else {"finalizers": existing}, "spec": {"project": ""}}
    app = appset.render_template_params(template, "jobs/a")
    assert app["metadata"].get("finalizers") == expected


# ---------------------------------------------------------------------------------------------
# Go's path.Match (go 1.26 src/path/match_test.go matchTests): literal text and '*' are followed,
# any other pattern character is refused (None)

MATCH_CASES = [
    ("abc", "abc", True),
    ("*", "abc", True),
    ("*c", "abc", True),
    ("a*", "a", True),
    ("a*", "abc", True),
    ("a*", "ab/c", False),
    ("a*/b", "abc/b", True),
    ("a*/b", "a/c/b", False),
    ("a*b*c*d*e*/f", "axbxcxdxe/f", True),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/f", True),
    ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", False),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", False),
    ("a*b?c*x", "abxbbxdbxebxczzx", None),
    ("a*b?c*x", "abxbbxdbxebxczzy", None),
    ("ab[c]", "abc", None),
    ("ab[b-d]", "abc", None),
    ("ab[e-g]", "abc", None),
    ("ab[^c]", "abc", None),
    ("ab[^b-d]", "abc", None),
    ("ab[^e-g]", "abc", None),
    ("a\\*b", "a*b", None),
    ("a\\*b", "ab", None),
    ("a?b", "a☺b", None),
    ("a[^a]b", "a☺b", None),
    ("a???b", "a☺b", None),
    ("a[^a][^a][^a]b", "a☺b", None),
    ("[a-ζ]*", "α", None),
    ("*[a-ζ]", "A", None),
    ("a?b", "a/b", None),
    ("a*b", "a/b", False),
    ("[\\]a]", "]", None),
    ("[\\-]", "-", None),
    ("[x\\-]", "x", None),
    ("[x\\-]", "-", None),
    ("[x\\-]", "z", None),
    ("[\\-x]", "x", None),
    ("[\\-x]", "-", None),
    ("[\\-x]", "a", None),
    ("[]a]", "]", None),
    ("[-]", "-", None),
    ("[x-]", "x", None),
    ("[x-]", "-", None),
    ("[x-]", "z", None),
    ("[-x]", "x", None),
    ("[-x]", "-", None),
    ("[-x]", "a", None),
    ("\\", "a", None),
    ("[a-b-c]", "a", None),
    ("[", "a", None),
    ("[^", "a", None),
    ("[^bc", "a", None),
    ("a[", "a", None),
    ("a[", "ab", None),
    ("a[", "x", None),
    ("a/b[", "x", None),
    ("*x", "xxx", True),
    ("/overlays/*", "overlays/x", False),
    ("overlays/dev/jobs/*", "overlays/dev/jobs/a/b", False),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), MATCH_CASES)
def test_path_match_is_go_path_match(pattern, name, expected):
    if expected is None:
        with pytest.raises(go_path.PatternNotRead, match="that trainyard does not read offline"):
            go_path.path_match(pattern, name)
    else:
        assert go_path.path_match(pattern, name) is expected


def test_path_match_is_linear_on_hostile_patterns():
    assert not go_path.path_match("a*" * 2000 + "b", "a" * 4000)
    with pytest.raises(go_path.PatternNotRead, match="longer than 4096"):
        go_path.path_match("*" * 5000, "x")


@settings(max_examples=1000, deadline=None)
@given(pattern=st.text(alphabet="ab/*", max_size=10), name=st.text(alphabet="ab/-", max_size=8))
def test_fuzz_path_match_agrees_with_a_regular_expression(pattern, name):
    import re

    regex = "".join("[^/]*" if c == "*" else re.escape(c) for c in pattern)
    assert go_path.path_match(pattern, name) is bool(re.fullmatch(regex, name))


# ---------------------------------------------------------------------------------------------
# The ApplicationSet end to end


@pytest.fixture
def repo(tmp_path) -> repository.Repository:
    return repository.Repository(root=tmp_path, url="https://example.com/r", revision="main")


def _appset(template: dict | None = None, *, git: dict | None = None, **spec) -> Resource:
    body = {
        "goTemplate": True,
        "goTemplateOptions": ["missingkey=error"],
        "generators": [{"git": {"repoURL": "https://example.com/r.git", "revision": "main",
                                "directories": [{"path": "jobs/*"}], **(git or {})}}],
        "template": template
        or {"metadata": {"name": "{{ .path.basename }}"},
            "spec": {"project": "p", "source": {"path": "{{ .path.path }}"}}},
    }  # fmt: skip
    body.update(spec)
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "s", "namespace": "argocd"},
    }
    return Resource(doc={**doc, "spec": body}, origin="x.yaml")


DIRS = ["jobs", "jobs/a", "jobs/b_x", "jobs/.hidden", "jobs/a/deeper", ".git", "other"]


def test_generated_application_metadata_and_spec(repo):
    template = {
        "metadata": {
            "name": "{{ index .path.segments 0 }}-{{ .path.basename }}",
            "namespace": "ignored-{{ .path.basename }}",
            "labels": {"job/{{ .path.basename }}": "{{ index .path.segments 0 }}"},
            "annotations": {"a": "1"},
        },
        "spec": {"project": "", "source": {"path": "{{ .path.path }}"}, "syncPolicy": {"syncOptions": []}},
    }
    apps = appset.generate_applications(_appset(template), repo, DIRS)
    assert [a.name for a in apps] == ["jobs-a", "jobs-b_x"]
    doc = apps[1].doc
    assert doc["metadata"] == {"name": "jobs-b_x", "namespace": "argocd", "labels": {"job/b_x": "jobs"},
                               "annotations": {"a": "1"}, "finalizers": [FINALIZER]}  # fmt: skip
    # util/argo NormalizeApplicationSpec: empty project, zero syncPolicy
    assert doc["spec"] == {"project": "default", "source": {"path": "jobs/b_x"}}
    assert apps[1].extra == {"generated_by": "s"} and apps[1].source == "jobs/b_x"


def test_the_listing_of_the_working_tree_skips_hidden_folders(repo):
    for folder in ("jobs/a", "jobs/.hidden", ".git/x"):
        (repo.root / folder).mkdir(parents=True)
    assert [a.name for a in appset.generate_applications(_appset(), repo)] == ["a"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"templatePatch": "spec: {}"}, r"spec\.templatePatch .* is not rendered offline by trainyard"),
        ({"strategy": {"type": "RollingSync"}}, r"spec\.strategy \(progressive syncs"),
        ({"preservedFields": {"labels": ["a"]}}, r"spec\.preservedFields .*live Applications"),
        ({"ignoreApplicationDifferences": [{"jsonPointers": ["/spec"]}]}, r"spec\.ignoreApplicationDifferences"),
        ({"syncPolicy": {"applicationsSync": "create-only"}}, r"spec\.syncPolicy \(applicationsSync and pres"),
        ({"syncPolicy": {"preserveResourcesOnDeletion": True}}, r"spec\.syncPolicy .* is not rendered offline"),
        ({"goTemplate": "true"}, "only goTemplate: true is rendered offline"),
        ({"goTemplate": False}, r"fasttemplate, Argo CD's default, is not"),
        ({"goTemplateOptions": ["missingkey=zero"]}, "only missingkey=error"),
        ({"goTemplateOptions": ["missingkey = error"]}, "only missingkey=error"),
        ({"generators": [{"list": {"elements": []}}]}, r"spec\.generators\[0\]\.list: the list generator is not"),
        ({"generators": [{"matrix": {}}]}, "the matrix generator is not rendered offline"),
        ({"generators": [{"foo": {}}]}, "foo is not a field of an ApplicationSet generator"),
        ({"generators": [{"git": {}, "selector": {"matchLabels": {}}}]}, r"selector .* is not rendered"),
        ({"generators": []}, "at least one generator"),
        ({"generators": ["git"]}, r"generators\[0\] must be a mapping"),
        ({"template": "x"}, "spec.template is required"),
        ({"template": {"spec": {"sources": []}}}, r"spec\.template\.spec\.sources \(multiple sources\)"),
        ({"template": {"spec": {"source": {"directory": {}}}}}, r"spec\.template\.spec\.source\.directory"),
        ({"template": {"spec": {"source": {"kustomize": {}}}}}, r"source\.kustomize is not rendered offline"),
    ],
)  # fmt: skip
def test_spec_fields_not_rendered_are_refused_by_name(repo, change, message):
    with pytest.raises(applications.ArgoError, match=r"^x\.yaml: ApplicationSet s: .*" + message):
        appset.generate_applications(_appset(**change), repo, DIRS)


@pytest.mark.parametrize(
    ("git", "message"),
    [
        ({"files": [{"path": "x.json"}], "directories": None}, r"git\.files \(the git file generator\)"),
        ({"directories": []}, "must list at least one path"),
        ({"repoURL": "https://other.example.com/x.git"}, "is not this repository"),
        ({"revision": "v1"}, "revision 'v1' is not this repository's revision 'main'"),
        ({"template": {"metadata": {"labels": {"a": "b"}}}}, r"git\.template \(template\) is not rendered"),
        ({"directories": [{"path": "jobs/["}]}, r"'\[' is a pattern character of Go's path\.Match"),
        ({"directories": [{"path": "jobs/?"}]}, r"'\?' is a pattern character"),
        ({"directories": [{"path": "jobs/*", "exclude": True}]}, r"directories\[0\]\.exclude is not rendered"),
        ({"directories": [{"path": 1}]}, "must be a mapping with a string path"),
        ({"directories": [{"path": "*" * 5000}]}, "longer than 4096 characters"),
        ({"values": {"a": "b"}}, r"git\.values \(values\) is not rendered offline"),
        ({"pathParamPrefix": "p"}, r"git\.pathParamPrefix \(pathParamPrefix\) is not rendered offline"),
    ],
)  # fmt: skip
def test_git_generator_fields_not_rendered_are_refused_by_name(repo, git, message):
    with pytest.raises(applications.ArgoError, match=message):
        appset.generate_applications(_appset(git=git), repo, DIRS)


def test_harmless_fields_render_the_same(repo):
    plain = appset.generate_applications(_appset(), repo, DIRS)
    extra = _appset(applyNestedSelectors=True, syncPolicy={}, strategy=None,
                    git={"requeueAfterSeconds": 30, "template": {"metadata": {}, "spec": {}}, "revision": "HEAD",
                         "values": None})  # fmt: skip
    assert [a.doc for a in appset.generate_applications(extra, repo, DIRS)] == [a.doc for a in plain]
    # an empty generator entry makes no parameters (generator_spec_processor.go GetRelevantGenerators)
    empty = _appset()
    empty.doc["spec"]["generators"].append({})
    assert len(appset.generate_applications(empty, repo, DIRS)) == 2


def test_duplicate_names_empty_names_and_preserved_annotations_are_refused(repo):
    same = {"metadata": {"name": "one"}, "spec": {}}
    with pytest.raises(applications.ArgoError, match="two Applications named one"):
        appset.generate_applications(_appset(same), repo, DIRS)
    with pytest.raises(applications.ArgoError, match="name renders empty"):
        appset.generate_applications(_appset({"metadata": {"name": ""}, "spec": {}}), repo, DIRS)
    refresh = {"metadata": {"name": "{{ .path.basename }}", "annotations": {"argocd.argoproj.io/refresh": "hard"}},
               "spec": {}}  # fmt: skip
    with pytest.raises(applications.ArgoError, match="kept from the live Application"):
        appset.generate_applications(_appset(refresh), repo, DIRS)


def test_keys_rendering_alike_and_odd_values_are_refused(repo):
    clash = {"metadata": {"name": "{{ .path.basename }}", "labels": {"{{ .path.basename }}": "1", "a": "2"}},
             "spec": {}}  # fmt: skip
    with pytest.raises(applications.ArgoError, match=r"both render to 'a'.*at random"):
        appset.generate_applications(_appset(clash), repo, DIRS)
    for bad, message in [({1: "x"}, "the key 1 is not a string"), (object(), "a object value"),
                         ("\ud800", "not valid UTF-8")]:  # fmt: skip
        template = {"metadata": {"name": "{{ .path.basename }}"}, "spec": {"info": [bad]}}
        with pytest.raises(applications.ArgoError, match=message):
            appset.generate_applications(_appset(template), repo, DIRS)
    nulls = {"metadata": {"name": "{{ .path.basename }}", "labels": {"a": None}}, "spec": {"project": "p", "x": None}}
    assert appset.generate_applications(_appset(nulls), repo, DIRS)[0].doc["spec"] == {"project": "p"}


def test_hostile_templates_are_refused_without_a_traceback(repo):
    deep: dict = {"x": "{{ .path.basename }}"}
    for _ in range(200):
        deep = {"d": deep}
    bomb: list = ["{{ .path.basename }}"]
    for _ in range(40):  # a YAML alias bomb: 2**40 strings if expanded
        bomb = [bomb, bomb]
    for spec, message in [(deep, "nested deeper than 100 levels"), (bomb, "more than 100000 values")]:
        template = {"metadata": {"name": "{{ .path.basename }}"}, "spec": spec}
        with pytest.raises(applications.ArgoError, match=message):
            appset.generate_applications(_appset(template), repo, DIRS)
    opens = {"metadata": {"name": "{{" * 100_000}, "spec": {}}
    with pytest.raises(applications.ArgoError, match=r"spec\.template\.metadata\.name: .*unclosed action"):
        appset.generate_applications(_appset(opens), repo, DIRS)
    quoted = {"metadata": {"name": "{{ " + '"' * 100_001 + "}}"}, "spec": {}}
    with pytest.raises(applications.ArgoError, match=r"'\{\{ \"{77}\.\.\.' is not one trainyard renders"):
        appset.generate_applications(_appset(quoted), repo, DIRS)


_JSONISH = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.text(), st.lists(_TEMPLATE_ALPHABET, max_size=20).map("".join)
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_JSONISH)
def test_fuzz_generate_applications_refuses_with_argo_errors_only(tmp_path_factory, spec):
    repo = repository.Repository(root=tmp_path_factory.getbasetemp(), url="https://example.com/r", revision="main")
    template = {"metadata": {"name": "{{ .path.basename }}"}, "spec": spec}
    try:
        apps = appset.generate_applications(_appset(template), repo, DIRS)
    except applications.ArgoError:
        return
    assert [a.name for a in apps] == ["a", "b_x"]

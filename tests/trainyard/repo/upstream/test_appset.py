"""The ApplicationSet controller emulation (trainyard.repo.upstream.appset) and its templating
(trainyard.repo.upstream.gotemplate), against Argo CD v3.5.1's own test tables and against outputs of
the Go code it follows."""

from __future__ import annotations

import contextlib
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainyard.repo.model import repository
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import appset, argocd, gotemplate
from trainyard.repo.upstream.gotemplate import NotEmulated, StrMap, TemplateError

FINALIZER = "resources-finalizer.argocd.argoproj.io"


def _params(path: str, prefix: str = "", values: dict | None = None, options: list | None = None) -> dict:
    params = appset.directory_params(path, True, prefix)
    appset.append_values(values or {}, params, True, options)
    return params


def _go(tmpl: str, path: str, prefix: str, values: dict, options: list) -> str:
    return gotemplate.render(tmpl, _params(path, prefix, values, options), gotemplate.missingkey_option(options))


# ---------------------------------------------------------------------------------------------
# Go templates: outputs of Render.Replace (argo-cd@v3.5.1:applicationset/utils/utils.go, go 1.26
# text/template, Sprig v3.3.0) on the git directory generator's parameters (git.go
# generateParamsFromApps, value_interpolation.go appendTemplatedValues); None: Argo CD fails.
# (template, folder, pathParamPrefix, values, goTemplateOptions, expected)

GO_CASES = [
    ("{{ .path.path }}", "overlays/dev/jobs/mnist-ddp", "", {}, [], "overlays/dev/jobs/mnist-ddp"),
    ("{{ index .path.segments 1 }}-job-{{ .path.basename }}", "overlays/dev/jobs/mnist-ddp", "", {},
     ["missingkey=error"], "dev-job-mnist-ddp"),
    ("{{ .path.basenameNormalized }}", "a/Mnist_DDP.v2", "", {}, [], "mnist-ddp.v2"),
    ("{{ .path.basename | normalize }}", "a/\u0130stanbul_K\u212a", "", {}, [], "istanbul-kk"),
    ("{{ normalize .path.basename }}", "a/--x--", "", {}, [], "x"),
    ("{{ .path.segments }}", "a/b/c", "", {}, [], "[a b c]"),
    ("{{ . }}", "a/b", "", {"v": "1"}, [],
     "map[path:map[basename:b basenameNormalized:b path:a/b segments:[a b]] values:map[v:1]]"),
    ("{{ $.path.path }}", "a/b", "", {}, [], "a/b"),
    ("{{ $ }}", "x", "p", {}, [], "map[p:map[path:map[basename:x basenameNormalized:x path:x segments:[x]]]]"),
    ("{{ .p.path.basename }}", "a/b", "p", {}, [], "b"),
    ("{{ .path.basename }}", "a/b", "p", {}, [], "<no value>"),
    ("{{ .path.basename }}", "a/b", "p", {}, ["missingkey=error"], None),
    ("{{ .nope }}", "a/b", "", {}, [], "<no value>"),
    ("{{ .nope }}", "a/b", "", {}, ["missingkey=invalid"], "<no value>"),
    ("{{ .nope }}", "a/b", "", {}, ["missingkey=zero"], "<no value>"),
    ("{{ .nope }}", "a/b", "", {}, ["missingkey=error"], None),
    ("{{ .nope }}", "a/b", "", {}, ["missingkey=error", "missingkey=default"], "<no value>"),
    ("{{ .nope.x }}", "a/b", "", {}, [], "<no value>"),
    ("{{ .nope.x }}", "a/b", "", {}, ["missingkey=zero"], None),
    ("{{ .values.nope }}", "a/b", "", {"v": "1"}, ["missingkey=zero"], ""),
    ("{{ .values.nope }}", "a/b", "", {"v": "1"}, [], "<no value>"),
    ("{{ .values.v }}", "a/b", "", {"v": "{{ .path.basename }}-x"}, ["missingkey=error"], "b-x"),
    ("{{ .values.v }}", "a/b", "", {"v": "{{ .values.w }}", "w": "1"}, [], "<no value>"),
    ("{{ .values.v }}", "a/b", "", {"v": "{{ .values.w }}", "w": "1"}, ["missingkey=error"], None),
    ("{{ .values }}", "a/b", "", {}, [], "<no value>"),
    ('{{ index .values "nope" }}', "a/b", "", {"v": "1"}, [], ""),
    ('{{ index .path "nope" }}', "a/b", "", {}, ["missingkey=error"], "<no value>"),
    ('{{ index .path "nope" "x" }}', "a/b", "", {}, [], None),
    ("{{ index .path.segments 2 }}", "a/b", "", {}, [], None),
    ("{{ index .path.segments -1 }}", "a/b", "", {}, [], None),
    ('{{ index .path.segments "1" }}', "a/b", "", {}, [], None),
    ("{{ index .path.basename 0 }}", "a/b", "", {}, [], "98"),
    ("{{ index .path.segments 1 0 }}", "a/b", "", {}, [], "98"),
    ('{{ index . "path" "basename" }}', "a/b", "", {}, [], "b"),
    ("{{ index .path }}", "a/b", "", {}, [], "map[basename:b basenameNormalized:b path:a/b segments:[a b]]"),
    ("{{ index }}", "a/b", "", {}, [], None),
    ("{{ index .nope 0 }}", "a/b", "", {}, [], None),
    ("{{ normalize .nope }}", "a/b", "", {}, [], None),
    ("{{ .nope | normalize }}", "a/b", "", {}, ["missingkey=zero"], None),
    ("{{ normalize .path.segments }}", "a/b", "", {}, [], None),
    ("{{ normalize 1 }}", "a/b", "", {}, [], None),
    ('{{ .path.path | replace "/" "-" }}', "overlays/dev/jobs/x", "", {}, [], "overlays-dev-jobs-x"),
    ('{{ replace "" "-" .path.basename }}', "a/bcd", "", {}, [], "-b-c-d-"),
    ('{{ .path.path | trimPrefix "overlays/" | upper }}', "overlays/dev/x", "", {}, [], "DEV/X"),
    ('{{ trimSuffix "-ddp" .path.basename | lower }}', "a/MNIST-ddp", "", {}, [], "mnist"),
    ("{{ trunc 3 .path.basename }}", "a/abcdef", "", {}, [], "abc"),
    ("{{ trunc -2 .path.basename }}", "a/abcdef", "", {}, [], "ef"),
    ("{{ trunc 99 .path.basename }}", "a/abcdef", "", {}, [], "abcdef"),
    ('{{ trunc "3" .path.basename }}', "a/abcdef", "", {}, [], None),
    ("{{ .path.basename | trunc 2 }}", "a/abcdef", "", {}, [], "ab"),
    ("{{ normalize (index .path.segments 0) }}", "A_b/c", "", {}, [], "a-b"),
    ("{{ (index .path.segments 1) }}", "a/b", "", {}, [], "b"),
    ("{{ .path.path | }}", "a/b", "", {}, [], "a/b"),
    ("{{ | .path.path }}", "a/b", "", {}, [], None),
    ("{{ .path.path | .path }}", "a/b", "", {}, [], None),
    ('{{ .path.path | "x" }}', "a/b", "", {}, [], None),
    ("{{ .path.basename 1 }}", "a/b", "", {}, [], None),
    ("{{ .path.segments.x }}", "a/b", "", {}, [], None),
    ('{{ "a" | normalize }}', "a/b", "", {}, [], "a"),
    ('{{ normalize "A_b\\tc" }}', "a/b", "", {}, [], "a-b-c"),
    ("{{ `raw\r\n}}` }}", "a/b", "", {}, [], "raw\n}}"),
    ('{{ "}}" }}', "a/b", "", {}, [], "}}"),
    ('{{ "\\u00e9\\x41\\101" }}', "a/b", "", {}, [], "\u00e9AA"),
    ("{{ \"\\'\" }}", "a/b", "", {}, [], None),
    ("{{ +1 }} {{ -0 }} {{ 7 }} {{ true }}", "a/b", "", {}, [], "1 0 7 true"),
    ("a  {{- .path.basename -}}  \n z", "a/b", "", {}, [], "abz"),
    ("a {{-.path.basename}}", "a/b", "", {}, [], None),
    ("{{.path.basename-}}", "a/b", "", {}, [], None),
    ("{{- -}}", "a/b", "", {}, [], None),
    ("x {{- /* a comment */ -}} y", "a/b", "", {}, [], "xy"),
    ("{{/* a comment */}}", "a/b", "", {}, [], ""),
    ("{{/* a comment */ }}", "a/b", "", {}, [], None),
    ("{{ .path.basename", "a/b", "", {}, [], None),
    ("{{ (.path.basename }}", "a/b", "", {}, [], None),
    ("{{ .path.basename) }}", "a/b", "", {}, [], None),
    ("{{{{ .path.basename }}", "a/b", "", {}, [], None),
    ("}} {{ .path.basename }} }}", "a/b", "", {}, [], "}} b }}"),
    ("{{ }}", "a/b", "", {}, [], None),
    ("{{ nope }}", "a/b", "", {}, [], None),
    ("{{ $x }}", "a/b", "", {}, [], None),
    ("{{ nil }}", "a/b", "", {}, [], None),
    ("{{ .path.path . }}", "a/b", "", {}, [], None),
    ("{{ . .path }}", "a/b", "", {}, [], None),
    ("{{ .path.path }}", "a/b", "", {}, ["missingkey = error"], None),
    ("{{ .path.path }}", "a/b", "", {}, [" missingkey=error"], None),
    ("{{ .path.path }}", "a/b", "", {}, ["missingkey=Error"], None),
    ("{{ .path.path }}", "a/b", "", {}, [""], None),
]  # fmt: skip


@pytest.mark.parametrize(("tmpl", "path", "prefix", "values", "options", "expected"), GO_CASES)
def test_go_template_as_argo_cd_renders_it(tmpl, path, prefix, values, options, expected):
    if expected is None:
        with pytest.raises(TemplateError) as info:
            _go(tmpl, path, prefix, values, options)
        assert not isinstance(info.value, NotEmulated), info.value  # a real Go error, not a refusal
    else:
        assert _go(tmpl, path, prefix, values, options) == expected


# Refused by name: Argo CD renders them, trainyard does not emulate them.
REFUSED = [
    ("{{ .path.basename | quote }}", "Go template function quote is not emulated by trainyard render"),
    ("{{ toYaml . }}", "Go template function toYaml is not emulated"),
    ("{{ slugify .path.basename }}", "Go template function slugify is not emulated"),
    ('{{ printf "%s" .path.basename }}', "Go template function printf is not emulated"),
    ("{{ if .path.basename }}x{{ end }}", "the Go template action {{if}} is not emulated"),
    ("{{ range .path.segments }}{{ . }}{{ end }}", "the Go template action {{range}} is not emulated"),
    ("{{ with .path }}{{ .basename }}{{ end }}", "the Go template action {{with}} is not emulated"),
    ('{{ define "x" }}{{ end }}', "the Go template action {{define}} is not emulated"),
    ("{{ $x := .path.basename }}{{ $x }}", r"Go template variables \(\$x := \.\.\.\) are not emulated"),
    ("{{ index .path.segments 0x1 }}", "the Go number constant 0x1 is not emulated"),
    ("{{ 1.5 }}", "the Go number constant 1.5 is not emulated"),
    ("{{ 'a' }}", "the Go constant 'a' is not emulated"),
    ("{{ (index .path 1).x }}", r"a field of a function's or a parenthesised pipeline's result"),
    ("{{ lower .path.basename }}", r"lower of the non-ASCII string 'Caf\u00e9' is not emulated"),
    ("{{ trunc 4 .path.basename }}", "trunc 4 would cut a multi-byte character"),
    ('{{ "\\xff" }}', r"the byte escape \\xff in a Go string"),
    ("{{ .p\u00e2th }}", "the non-ASCII field name"),
    ("{{" + "(" * 101 + ".x" + ")" * 101 + "}}", "parentheses nested deeper than 100"),
]


@pytest.mark.parametrize(("tmpl", "message"), REFUSED)
def test_what_is_not_emulated_is_refused_by_name(tmpl, message):
    with pytest.raises(NotEmulated, match=message):
        _go(tmpl, "a/Caf\u00e9", "", {}, [])


def test_an_undefined_function_fails_as_in_go():
    with pytest.raises(TemplateError, match='function "upperr" not defined') as info:
        _go("{{ upperr .path.basename }}", "a/b", "", {}, [])
    assert not isinstance(info.value, NotEmulated)


def test_missingkey_options_follow_template_option():
    assert gotemplate.missingkey_option(None) == "default"
    assert gotemplate.missingkey_option(["missingkey=invalid"]) == "default"
    assert gotemplate.missingkey_option(["missingkey=error", "missingkey=zero"]) == "zero"
    for bad in ("missingkey=error ", "missingkey:error", "missingkey", "", 1):
        with pytest.raises(TemplateError, match="goTemplateOptions"):
            gotemplate.missingkey_option(["missingkey=error", bad])


# argo-cd@v3.5.1:applicationset/utils/template_functions.go SanitizeName; expected values from Go
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Mnist_DDP", "mnist-ddp"),
        ("..a..", "a"),
        ("--", ""),
        ("\u0130K\u212a", "ikk"),  # Go's unicode.ToLower: U+0130 -> i, KELVIN SIGN -> k
        ("Caf\u00e9 \U0001f600", "caf"),  # each other non-ASCII rune one '-', trimmed at the ends
        ("a\u00e9b", "a-b"),
        ("x" * 300, "x" * 253),
        ("a" * 252 + "-b", "a" * 252),
    ],
)
def test_normalize_is_sanitize_name(name, expected):
    assert gotemplate.sanitize_name(name) == expected


# ---------------------------------------------------------------------------------------------
# fasttemplate: argo-cd@v3.5.1:applicationset/utils/utils_test.go TestRenderTemplateParams (each
# test's params and field value; every field of the Go test's fieldMap takes the value)

FAST_CASES = [
    ("simple substitution", "{{one}}", {"one": "two"}, "two"),
    ("simple substitution with whitespace", "{{ one }}", {"one": "two"}, "two"),
    ("template characters but not in a template", "}} {{", {"one": "two"}, "}} {{"),
    ("nested template", "{{ }}", {"one": "{{ }}"}, "{{ }}"),
    ("field with whitespace", "{{ }}", {" ": "two", "": "three"}, "{{ }}"),
    ("template contains itself, containing itself", "{{one}}", {"{{one}}": "{{one}}"}, "{{one}}"),
    ("template contains itself, containing something else", "{{one}}", {"{{one}}": "{{two}}"}, "{{one}}"),
    ("templates are case sensitive", "{{ONE}}", {"{{one}}": "two"}, "{{ONE}}"),
    ("multiple on a line", "{{one}}{{one}}", {"one": "two"}, "twotwo"),
    ("multiple different on a line", "{{one}}{{three}}", {"one": "two", "three": "four"}, "twofour"),
    ("multiple different on a line with quote", "{{one}} {{three}}", {"one": '"hello" world', "three": "four"},
     '"hello" world four'),
    # fasttemplate.go and utils.go isTemplatedRegex, beyond the Go test: Go's unicode spaces are
    # trimmed, a tag spanning lines leaves the string untouched, a tag may hold '{{'
    ("unicode spaces trimmed", "{{\u00a0one\u0085}}", {"one": "two"}, "two"),
    ("across lines untouched", "{{one\n}}", {"one": "two"}, "{{one\n}}"),
    ("an open brace inside a tag", "{{a{{one}}", {"one": "two"}, "{{a{{one}}"),
]  # fmt: skip

FIELDS = [("spec", "source", "path"), ("spec", "source", "repoURL"), ("spec", "source", "targetRevision"),
          ("spec", "source", "chart"), ("spec", "destination", "server"), ("spec", "destination", "namespace"),
          ("spec", "destination", "name"), ("spec", "project")]  # fmt: skip


def _template_with(field: tuple[str, ...], value: str) -> dict:
    template: dict = {
        "metadata": {
            "name": "application-one",
            "namespace": "default",
            "labels": {"label-key": "label-value", "label-key2": "label-value2"},
            "annotations": {"annotation-key": "annotation-value", "annotation-key2": "annotation-value2"},
        },
        "spec": {"source": {"path": "", "repoURL": "", "targetRevision": "", "chart": ""},
                 "destination": {"server": "", "namespace": "", "name": ""}, "project": ""},
    }  # fmt: skip
    node = template
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    return template


@pytest.mark.parametrize(("name", "value", "params", "expected"), FAST_CASES, ids=[c[0] for c in FAST_CASES])
def test_fasttemplate_render_template_params(name, value, params, expected):
    for field in FIELDS:
        app = appset.render_template_params(_template_with(field, value), None, params, False, None)
        node = app
        for key in field:
            node = node[key]
        assert node == expected, field
        assert app["metadata"]["annotations"] == {"annotation-key": "annotation-value",
                                                  "annotation-key2": "annotation-value2"}  # fmt: skip
        assert app["metadata"]["labels"]["label-key2"] == "label-value2"
        assert app["metadata"]["name"] == "application-one"


def test_fasttemplate_unclosed_tag_fails():
    # utils_test.go Test_Render_Replace_no_panic_on_missing_closing_brace
    with pytest.raises(TemplateError, match="cannot find end tag"):
        gotemplate.fasttemplate("{{properly.closed}} {{improperly.closed}", {})
    with pytest.raises(TemplateError, match="cannot find end tag"):
        gotemplate.fasttemplate("{{one}} {{", {"one": "two"})
    with pytest.raises(TemplateError, match="cannot find end tag"):  # one templated line: the whole string parsed
        gotemplate.fasttemplate("{{one}}\n{{", {"one": "two"})
    assert gotemplate.fasttemplate("a {{\n}} {{", {}) == "a {{\n}} {{"  # no line holds a tag: untouched


# utils_test.go TestRenderTemplateParamsGoTemplate (outputs and errors as that test states them;
# the functions and actions trainyard does not emulate are refused instead)
GO_PARAMS_CASES = [
    ("{{ .one }}", {"one": "two"}, [], "two"),
    ("{{ .one }}", {"one": "{{one}}"}, [], "{{one}}"),
    ("{{ .one }}", {"one": "{{two}}"}, [], "{{two}}"),
    ("{{.one}}{{.one}}", {"one": "two"}, [], "twotwo"),
    ("{{.one}}{{.three}}", {"one": "two", "three": "four"}, [], "twofour"),
    ("{{.one}} {{.three}}", {"one": '"hello" world', "three": "four"}, [], '"hello" world four'),
    ("{{ .image.version }}", {"replicas": 3, "image": {"name": "busybox", "version": "latest"}}, [], "latest"),
    ("{{ .image.name }}:{{ .image.version }}", {"replicas": 3, "image": {"name": "busybox", "version": "latest"}}, [],
     "busybox:latest"),
    ("{{ if .hpa.enabled }}{{ .hpa.maxReplicas }}{{ else }}{{ .replicas }}{{ end }}",
     {"replicas": 3, "hpa": {"enabled": True, "maxReplicas": 5}}, [], NotEmulated),
    ("{{ range .volumes }}[{{ .name }}]{{ end }}", {"volumes": []}, [], NotEmulated),
    ('{{ index .admin "admin-ca" }}, {{ index .admin "admin-jks" }}',
     {"admin": {"admin-ca": "value admin ca", "admin-jks": "value admin jks"}}, [], "value admin ca, value admin jks"),
    ('{{ index .admin "admin-ca" }}, \\\\ "Hello world", {{ index .admin "admin-jks" }}',
     {"admin": {"admin-ca": 'value "admin" ca with \\', "admin-jks": "value admin jks"}}, [],
     'value "admin" ca with \\, \\\\ "Hello world", value admin jks'),
    ("{{.quote}}", {"quote": '"'}, [], '"'),
    ("{{.data}}", {}, [], "{{.data}}"),  # Test No Data: no parameters, no rendering
    ("{{functiondoesnotexist}}", {"data": "a data string"}, [], TemplateError),
    ("{{.data.test}}", {"data": "a data string"}, [], TemplateError),  # can't evaluate field test
    ("--> {{.doesnotexist}} <--", {"unused": "this is not used"}, [], "--> <no value> <--"),
    ("--> {{.doesnotexist}} <--", {"unused": "this is not used"}, ["missingkey=error"], TemplateError),
    ("{{ toYaml . | indent 2 }}", {"foo": {}}, [], NotEmulated),
    ('{{ get (fromYaml .value) "hello" }}', {"value": "hello: world"}, [], NotEmulated),
    ("{{ fromYamlArray .value | last }}", {"value": "- hello world"}, [], NotEmulated),
    ("{{ .replicas }} {{ .hpa.enabled }}", {"replicas": 3, "hpa": {"enabled": True}}, [], "3 true"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "params", "options", "expected"), GO_PARAMS_CASES)
def test_go_template_render_template_params(value, params, options, expected):
    for field in FIELDS:
        template = _template_with(field, value)
        if isinstance(expected, type):
            with pytest.raises(expected) as info:
                appset.render_template_params(template, None, params, True, options)
            assert expected is NotEmulated or not isinstance(info.value, NotEmulated)
            continue
        app = appset.render_template_params(template, None, params, True, options)
        node = app
        for key in field:
            node = node[key]
        assert node == expected, field
        assert app["metadata"]["labels"] == {"label-key": "label-value", "label-key2": "label-value2"}


def test_map_keys_are_templated():
    # utils_test.go TestRenderTemplateKeys
    params = {"key": "some-key", "value": "some-value"}
    fast = appset.render_template_params(
        {"metadata": {"annotations": {"annotation-{{key}}": "annotation-{{value}}"}}}, None, params, False, None
    )
    assert fast["metadata"]["annotations"] == {"annotation-some-key": "annotation-some-value"}
    go = appset.render_template_params(
        {"metadata": {"annotations": {"annotation-{{ .key }}": "annotation-{{ .value }}"}}}, None, params, True, None
    )
    assert go["metadata"]["annotations"] == {"annotation-some-key": "annotation-some-value"}


@pytest.mark.parametrize(
    ("existing", "sync_policy", "expected"),
    [
        # utils_test.go TestRenderTemplateParamsFinalizers
        (["existing-finalizer"], None, ["existing-finalizer"]),
        (["resources-finalizer.argocd.argoproj.io/background"], None,
         ["resources-finalizer.argocd.argoproj.io/background"]),
        (None, None, [FINALIZER]),
        ([FINALIZER], None, [FINALIZER]),
        ([], None, [FINALIZER]),
        (None, {}, [FINALIZER]),
        (None, {"preserveResourcesOnDeletion": True}, None),
        (["resources-finalizer.argocd.argoproj.io/background"], {"preserveResourcesOnDeletion": True},
         ["resources-finalizer.argocd.argoproj.io/background"]),
    ],
)  # fmt: skip
def test_default_finalizer(existing, sync_policy, expected):
    template = {"metadata": {} if existing is None else {"finalizers": existing}, "spec": {"project": ""}}
    app = appset.render_template_params(template, sync_policy, {"one": "two"}, True, None)
    assert app["metadata"].get("finalizers") == expected


# ---------------------------------------------------------------------------------------------
# The git directory generator: argo-cd@v3.5.1:applicationset/generators/git_test.go
# TestGitGenerateParamsFromDirectories and TestGitGenerateParamsFromDirectoriesGoTemplate


def _flat(path: str, prefix: str = "") -> dict:
    key = f"{prefix}.path" if prefix else "path"
    base = path.rsplit("/", 1)[-1]
    out = {key: path, f"{key}.basename": base, f"{key}.basenameNormalized": gotemplate.sanitize_name(base)}
    out.update({f"{key}[{i}]": s for i, s in enumerate(path.split("/"))})
    return out


DIRECTORY_CASES = [
    ("happy flow - created apps", [("*", False)], "", ["app1", "app2", "app_3", "p1/app4"], ["app1", "app2", "app_3"]),
    ("It prefixes path parameters with PathParamPrefix", [("*", False)], "myRepo",
     ["app1", "app2", "app_3", "p1/app4"], ["app1", "app2", "app_3"]),
    ("It filters application according to the paths", [("p1/*", False), ("p1/*/*", False)], "",
     ["app1", "p1/app2", "p1/p2/app3", "p1/p2/p3/app4"], ["p1/app2", "p1/p2/app3"]),
    ("It filters application according to the paths with Exclude", [("p1/*", True), ("*", False), ("*/*", False)],
     "", ["app1", "app2", "p1/app2", "p1/app3", "p2/app3"], ["app1", "app2", "p2/app3"]),
    ("Expecting same exclude behavior with different order", [("*", False), ("*/*", False), ("p1/*", True)], "",
     ["app1", "app2", "p1/app2", "p1/app3", "p2/app3"], ["app1", "app2", "p2/app3"]),
    ("handles empty response from repo server", [("*", False)], "", [], []),
]  # fmt: skip


@pytest.mark.parametrize(("name", "items", "prefix", "listing", "generated"), DIRECTORY_CASES,
                         ids=[c[0] for c in DIRECTORY_CASES])  # fmt: skip
def test_git_directory_params(name, items, prefix, listing, generated):
    flat = list(appset.git_directory_params(items, listing, False, prefix))
    assert flat == [(p, _flat(p, prefix)) for p in generated]
    go = list(appset.git_directory_params(items, listing, True, prefix))
    expected = []
    for p in generated:
        base = p.rsplit("/", 1)[-1]
        value = {"path": p, "basename": base, "basenameNormalized": gotemplate.sanitize_name(base),
                 "segments": p.split("/")}  # fmt: skip
        expected.append((p, {prefix: {"path": value}} if prefix else {"path": value}))
    assert go == expected


def test_git_directory_values_interpolation():
    # git_test.go TestGitGenerateParamsFromDirectories "Value variable interpolation"
    values = {"foo": "bar", "aaa": "{{ path[0] }}", "no-op": "{{ this-does-not-exist }}"}
    got = list(appset.git_directory_params([("*", False), ("*/*", False)], ["app1", "p1/app2"], False, "", values))
    assert got == [
        ("app1", {"values.foo": "bar", "values.no-op": "{{ this-does-not-exist }}", "values.aaa": "app1",
                  **_flat("app1")}),
        ("p1/app2", {"values.foo": "bar", "values.no-op": "{{ this-does-not-exist }}", "values.aaa": "p1",
                     **_flat("p1/app2")}),
    ]  # fmt: skip
    go = dict(appset.git_directory_params([("*", False)], ["app1"], True, "", {"k": "{{ .path.basename }}"}))
    assert go["app1"]["values"] == {"k": "app1"} and isinstance(go["app1"]["values"], StrMap)


# Go's path.Match: /usr/local/go path/match_test.go matchTests (go 1.26); None: ErrBadPattern
MATCH_CASES = [
    ("abc", "abc", True), ("*", "abc", True), ("*c", "abc", True), ("a*", "a", True), ("a*", "abc", True),
    ("a*", "ab/c", False), ("a*/b", "abc/b", True), ("a*/b", "a/c/b", False), ("a*b*c*d*e*/f", "axbxcxdxe/f", True),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/f", True), ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", False),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", False), ("a*b?c*x", "abxbbxdbxebxczzx", True),
    ("a*b?c*x", "abxbbxdbxebxczzy", False), ("ab[c]", "abc", True), ("ab[b-d]", "abc", True),
    ("ab[e-g]", "abc", False), ("ab[^c]", "abc", False), ("ab[^b-d]", "abc", False), ("ab[^e-g]", "abc", True),
    ("a\\*b", "a*b", True), ("a\\*b", "ab", False), ("a?b", "a\u263ab", True), ("a[^a]b", "a\u263ab", True),
    ("a???b", "a\u263ab", False), ("a[^a][^a][^a]b", "a\u263ab", False), ("[a-\u03b6]*", "\u03b1", True),
    ("*[a-\u03b6]", "A", False), ("a?b", "a/b", False), ("a*b", "a/b", False), ("[\\]a]", "]", True),
    ("[\\-]", "-", True), ("[x\\-]", "x", True), ("[x\\-]", "-", True), ("[x\\-]", "z", False),
    ("[\\-x]", "x", True), ("[\\-x]", "-", True), ("[\\-x]", "a", False), ("[]a]", "]", None), ("[-]", "-", None),
    ("[x-]", "x", None), ("[x-]", "-", None), ("[x-]", "z", None), ("[-x]", "x", None), ("[-x]", "-", None),
    ("[-x]", "a", None), ("\\", "a", None), ("[a-b-c]", "a", None), ("[", "a", None), ("[^", "a", None),
    ("[^bc", "a", None), ("a[", "a", None), ("a[", "ab", None), ("a[", "x", None), ("a/b[", "x", None),
    ("*x", "xxx", True),
    # the generator's patterns: no leading '/' is stripped
    ("/overlays/*", "overlays/x", False), ("overlays/dev/jobs/*", "overlays/dev/jobs/a/b", False),
]  # fmt: skip


@pytest.mark.parametrize(("pattern", "name", "expected"), MATCH_CASES)
def test_path_match_is_go_path_match(pattern, name, expected):
    if expected is None:
        with pytest.raises(appset.BadPattern):
            appset.path_match(pattern, name)
    else:
        assert appset.path_match(pattern, name) is expected


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


DIRS = ["jobs", "jobs/a", "jobs/B_x", "jobs/.hidden", "jobs/a/deeper", ".git", "other"]


def test_generated_application_metadata_and_spec(repo):
    template = {
        "metadata": {
            "name": "{{ .path.basenameNormalized }}",
            "namespace": "ignored-{{ .path.basename }}",
            "labels": {"job/{{ .path.basename }}": "{{ index .path.segments 0 }}"},
            "annotations": {"a": "1"},
        },
        "spec": {"project": "", "source": {"path": "{{ .path.path }}", "directory": {"recurse": False}},
                 "syncPolicy": {"syncOptions": []}},
    }  # fmt: skip
    apps = appset.generate_applications(_appset(template), repo, DIRS)
    assert [a.name for a in apps] == ["a", "b-x"]
    doc = apps[1].doc
    assert doc["metadata"] == {"name": "b-x", "namespace": "argocd", "labels": {"job/B_x": "jobs"},
                               "annotations": {"a": "1"}, "finalizers": [FINALIZER]}  # fmt: skip
    # util/argo NormalizeApplicationSpec: empty project, zero syncPolicy and zero directory
    assert doc["spec"] == {"project": "default", "source": {"path": "jobs/B_x"}}
    assert apps[1].extra == {"generated_by": "s"} and apps[1].source == "jobs/B_x"
    # the re-export keeps argocd.generate_applications
    assert [a.name for a in argocd.generate_applications(_appset(template), repo, DIRS)] == ["a", "b-x"]


def test_preserve_resources_on_deletion_drops_the_default_finalizer(repo):
    apps = appset.generate_applications(_appset(syncPolicy={"preserveResourcesOnDeletion": True}), repo, DIRS)
    assert "finalizers" not in apps[0].doc["metadata"]


def test_values_and_path_param_prefix(repo):
    template = {"metadata": {"name": "{{ .values.env }}-{{ .p.path.basename }}"}, "spec": {"project": "x"}}
    git = {"pathParamPrefix": "p", "values": {"env": "dev-{{ index .p.path.segments 0 }}"}}
    assert [a.name for a in appset.generate_applications(_appset(template, git=git), repo, DIRS)] == [
        "dev-jobs-a",
        "dev-jobs-B_x",
    ]
    fast = _appset({"metadata": {"name": "{{values.env}}-{{p.path[1]}}"}, "spec": {}}, git=git, goTemplate=False)
    fast.doc["spec"]["generators"][0]["git"]["values"] = {"env": "e{{p.path.basename}}"}
    assert [a.name for a in appset.generate_applications(fast, repo, DIRS)] == ["ea-a", "eB_x-B_x"]


def test_no_matching_folder_renders_nothing_even_with_a_bad_option(repo):
    # the option panics only when Replace runs (utils.go Replace), which no folder triggers here
    spec = _appset(goTemplateOptions=["missingkey = error"])
    spec.doc["spec"]["generators"][0]["git"]["directories"] = [{"path": "none/*"}]
    assert appset.generate_applications(spec, repo, DIRS) == []
    spec.doc["spec"]["generators"][0]["git"]["directories"] = [{"path": "jobs/*"}]
    with pytest.raises(argocd.ArgoError, match="controller panics on it"):
        appset.generate_applications(spec, repo, DIRS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"templatePatch": "spec: {}"}, r"spec\.templatePatch .* is not emulated by trainyard render"),
        ({"strategy": {"type": "RollingSync"}}, r"spec\.strategy \(progressive syncs"),
        ({"preservedFields": {"labels": ["a"]}}, r"spec\.preservedFields .*live Applications"),
        ({"ignoreApplicationDifferences": [{"jsonPointers": ["/spec"]}]}, r"spec\.ignoreApplicationDifferences"),
        ({"syncPolicy": {"applicationsSync": "create-only"}}, r"applicationsSync 'create-only'"),
        ({"syncPolicy": {"preserveResourcesOnDeletion": "yes"}}, "must be true or false"),
        ({"goTemplate": "true"}, "spec.goTemplate must be true or false"),
        ({"generators": [{"list": {"elements": []}}]}, r"spec\.generators\[0\]\.list: the list generator is not"),
        ({"generators": [{"matrix": {}}]}, "the matrix generator is not emulated"),
        ({"generators": [{"foo": {}}]}, "foo is not a field of an ApplicationSet generator"),
        ({"generators": []}, "at least one generator"),
        ({"generators": ["git"]}, r"generators\[0\] must be a mapping"),
        ({"template": "x"}, "spec.template is required"),
    ],
)
def test_spec_fields_not_emulated_are_refused(repo, change, message):
    with pytest.raises(argocd.ArgoError, match=message):
        appset.generate_applications(_appset(**change), repo, DIRS)


@pytest.mark.parametrize(
    ("git", "message"),
    [
        ({"files": [{"path": "x.json"}], "directories": None}, r"git\.files \(the git file generator\)"),
        ({"directories": []}, "neither directories nor files"),
        ({"repoURL": "https://other.example.com/x.git"}, "is not this repository"),
        ({"revision": "v1"}, "revision 'v1' is not this repository's revision 'main'"),
        ({"template": {"metadata": {"labels": {"a": "b"}}}}, r"git\.template .* is not emulated"),
        ({"directories": [{"path": "jobs/["}]}, "not a pattern of Go's path.Match"),
        ({"directories": [{"path": 1}]}, "must be a mapping with a string path"),
        ({"values": {"a": 1}}, "values must map strings to strings"),
        ({"values": {"a": "{{ .nope }}"}}, r"values\[a\]: map has no entry for key 'nope'"),
    ],
)
def test_git_generator_fields_not_emulated_are_refused(repo, git, message):
    with pytest.raises(argocd.ArgoError, match=message):
        appset.generate_applications(_appset(git=git), repo, DIRS)


def test_harmless_fields_render_the_same(repo):
    plain = appset.generate_applications(_appset(), repo, DIRS)
    extra = _appset(applyNestedSelectors=True, syncPolicy={"applicationsSync": "sync"}, strategy=None,
                    git={"requeueAfterSeconds": 30, "template": {"metadata": {}, "spec": {}},
                         "files": [{"path": "ignored.json"}], "revision": "HEAD"})  # fmt: skip
    assert [a.doc for a in appset.generate_applications(extra, repo, DIRS)] == [a.doc for a in plain]
    # an empty generator entry makes no parameters (generator_spec_processor.go GetRelevantGenerators)
    empty = _appset()
    empty.doc["spec"]["generators"].append({})
    assert len(appset.generate_applications(empty, repo, DIRS)) == 2


def test_duplicate_names_empty_names_and_preserved_annotations_are_refused(repo):
    same = {"metadata": {"name": "one"}, "spec": {}}
    with pytest.raises(argocd.ArgoError, match="two Applications named one"):
        appset.generate_applications(_appset(same), repo, DIRS)
    with pytest.raises(argocd.ArgoError, match="name renders empty"):
        appset.generate_applications(_appset({"metadata": {"name": "{{ .path.basename | trimPrefix .path.basename }}"},
                                              "spec": {}}), repo, DIRS)  # fmt: skip
    refresh = {"metadata": {"name": "{{ .path.basename }}", "annotations": {"argocd.argoproj.io/refresh": "hard"}},
               "spec": {}}  # fmt: skip
    with pytest.raises(argocd.ArgoError, match="kept from the live Application"):
        appset.generate_applications(_appset(refresh), repo, DIRS)


def test_keys_rendering_alike_and_odd_values_are_refused(repo):
    clash = {"metadata": {"name": "{{ .path.basename }}", "labels": {"{{ .path.basename }}": "1", "a": "2"}},
             "spec": {}}  # fmt: skip
    with pytest.raises(argocd.ArgoError, match=r"both render to 'a'.*at random"):
        appset.generate_applications(_appset(clash), repo, DIRS)
    for bad, message in [({1: "x"}, "the key 1 is not a string"), (object(), "a object value"),
                         ("\ud800", "not valid UTF-8")]:  # fmt: skip
        template = {"metadata": {"name": "{{ .path.basename }}"}, "spec": {"info": [bad]}}
        with pytest.raises(argocd.ArgoError, match=message):
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
        with pytest.raises(argocd.ArgoError, match=message):
            appset.generate_applications(_appset(template), repo, DIRS)
    opens = {"metadata": {"name": "{{" * 100_000}, "spec": {}}
    with pytest.raises(argocd.ArgoError, match="unclosed action"):
        appset.generate_applications(_appset(opens), repo, DIRS)
    unclosed = {"metadata": {"name": "{{ " + '"' * 100_001}, "spec": {}}
    with pytest.raises(argocd.ArgoError, match="unterminated quoted string"):
        appset.generate_applications(_appset(unclosed), repo, DIRS)
    longer = {"metadata": {"name": '{{ replace "" "' + "x" * 300_000 + '" .path.path }}'}, "spec": {}}
    with pytest.raises(argocd.ArgoError, match="more than kube-apiserver stores"):
        appset.generate_applications(_appset(longer), repo, DIRS)
    with pytest.raises(argocd.ArgoError, match="longer than 4096 bytes"):
        appset.generate_applications(_appset(git={"directories": [{"path": "*" * 5000}]}), repo, DIRS)


def test_many_actions_render_in_one_pass():
    tmpl = "{{ .path.basename }}-" * 20_000
    assert gotemplate.render(tmpl, _params("a/b")) == "b-" * 20_000
    trims = "{{- .path.basename -}}  " * 20_000
    assert gotemplate.render(trims, _params("a/b")) == "b" * 20_000
    assert gotemplate.fasttemplate("{{path}}" * 20_000, {"path": "p"}) == "p" * 20_000


# ---------------------------------------------------------------------------------------------
# Fuzzing: any text, no traceback; invariants of text/template and fasttemplate

_TEMPLATE_ALPHABET = st.sampled_from(
    [*"{}-|()$.\"`'/*\\ \t\n:=,", "{{", "}}", "{{- ", " -}}", ".path", ".values", "index", "normalize", "1",
                                       "lower", "trunc", "\u00e9", "\ud800", "\x00", ".path.basename", "nil"]
)  # fmt: skip
_HOSTILE_TEXT = st.one_of(st.text(), st.lists(_TEMPLATE_ALPHABET, max_size=40).map("".join))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tmpl=_HOSTILE_TEXT, mode=st.sampled_from(["default", "zero", "error"]))
def test_fuzz_render_fails_only_with_template_errors(tmpl, mode):
    try:
        out = gotemplate.render(tmpl, _params("a/b", values={"v": "1"}), mode)
    except TemplateError:
        return
    assert isinstance(out, str)
    if "{{" not in tmpl:
        assert out == tmpl


@settings(max_examples=800, deadline=None)
@given(tmpl=_HOSTILE_TEXT)
def test_fuzz_fasttemplate(tmpl):
    try:
        out = gotemplate.fasttemplate(tmpl, {"path": "a/b", "path.basename": "b"})
    except TemplateError:
        assert "{{" in tmpl
        return
    if "{{" not in tmpl or "}}" not in tmpl:
        assert out == tmpl


@settings(max_examples=500, deadline=None)
@given(raw=st.text(alphabet=st.characters(blacklist_characters="`", blacklist_categories=("Cs",))))
def test_fuzz_raw_strings_round_trip(raw):
    # a raw string prints itself, carriage returns removed (strconv.Unquote)
    assert gotemplate.render("{{ `" + raw + "` }}", {}) == raw.replace("\r", "")


@settings(max_examples=500, deadline=None)
@given(path=st.text(alphabet=string.ascii_letters + string.digits + "-_./", min_size=1))
def test_fuzz_path_parameters_print_themselves(path):
    params = _params(path)
    assert gotemplate.render("{{ .path.path }}|{{ .path.basename }}", params) == f"{path}|{path.rsplit('/', 1)[-1]}"
    assert gotemplate.render("{{ normalize .path.basename }}", params) == params["path"]["basenameNormalized"]


@settings(max_examples=1000, deadline=None)
@given(pattern=st.text(alphabet="ab/*?[]^-\\\u00e9", max_size=10), name=st.text(alphabet="ab/\u00e9-", max_size=8))
def test_fuzz_path_match_fails_only_on_bad_patterns(pattern, name):
    with contextlib.suppress(appset.BadPattern):
        assert appset.path_match(pattern, name) in (True, False)


_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _HOSTILE_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_HOSTILE_TEXT, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_JSONISH, go=st.booleans())
def test_fuzz_generate_applications_refuses_with_argo_errors_only(tmp_path_factory, spec, go):
    repo = repository.Repository(root=tmp_path_factory.getbasetemp(), url="https://example.com/r", revision="main")
    template = {"metadata": {"name": "{{ .path.basename }}" if go else "{{path.basename}}"}, "spec": spec}
    try:
        apps = appset.generate_applications(_appset(template, goTemplate=go), repo, DIRS)
    except argocd.ArgoError:
        return
    assert [a.name for a in apps] == ["a", "B_x"]

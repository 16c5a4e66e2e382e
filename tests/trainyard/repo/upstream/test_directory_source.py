"""A directory source as Argo CD v3.5.1's repo server reads it (trainyard.repo.upstream.directory) and
the gobwas/glob port its include/exclude use (trainyard.repo.upstream.globmatch). The tables are
ported from the upstream tests named above each; the rest was checked against the upstream Go code
(the same functions built from the pinned modules) before it was written down here."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainyard.contract.errors import UserError
from trainyard.repo.model import kustomize, repository
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import argocd, directory
from trainyard.repo.upstream.globmatch import GlobPanic, compile_glob, glob_match

# ---------------------------------------------------------------------------------------------
# gobwas/glob v0.2.3

# github.com/gobwas/glob@v0.2.3 glob_test.go TestGlob: (pattern, text, separators, matches)
GOBWAS_TEST_GLOB = [
    ("* ?at * eyes", "my cat has very bright eyes", "", True),
    ("", "", "", True),
    ("", "b", "", False),
    ("*ä", "åä", "", True),
    ("abc", "abc", "", True),
    ("a*c", "abc", "", True),
    ("a*c", "a12345c", "", True),
    ("a?c", "a1c", "", True),
    ("a.b", "a.b", ".", True),
    ("a.*", "a.b", ".", True),
    ("a.**", "a.b.c", ".", True),
    ("a.?.c", "a.b.c", ".", True),
    ("a.?.?", "a.b.c", ".", True),
    ("?at", "cat", "", True),
    ("?at", "fat", "", True),
    ("*", "abc", "", True),
    ("\\*", "*", "", True),
    ("**", "a.b.c", ".", True),
    ("?at", "at", "", False),
    ("?at", "fat", "f", False),
    ("a.*", "a.b.c", ".", False),
    ("a.?.c", "a.bb.c", ".", False),
    ("*", "a.b.c", ".", False),
    ("*test", "this is a test", "", True),
    ("this*", "this is a test", "", True),
    ("*is *", "this is a test", "", True),
    ("*is*a*", "this is a test", "", True),
    ("**test**", "this is a test", "", True),
    ("**is**a***test*", "this is a test", "", True),
    ("*is", "this is a test", "", False),
    ("*no*", "this is a test", "", False),
    ("[!a]*", "this is a test3", "", True),
    ("*abc", "abcabc", "", True),
    ("**abc", "abcabc", "", True),
    ("???", "abc", "", True),
    ("?*?", "abc", "", True),
    ("?*?", "ac", "", True),
    ("sta", "stagnation", "", False),
    ("sta*", "stagnation", "", True),
    ("sta?", "stagnation", "", False),
    ("sta?n", "stagnation", "", False),
    ("{abc,def}ghi", "defghi", "", True),
    ("{abc,abcd}a", "abcda", "", True),
    ("{a,ab}{bc,f}", "abc", "", True),
    ("{*,**}{a,b}", "ab", "", True),
    ("{*,**}{a,b}", "ac", "", False),
    ("/{rate,[a-z][a-z][a-z]}*", "/rate", "", True),
    ("/{rate,[0-9][0-9][0-9]}*", "/rate", "", True),
    ("/{rate,[a-z][a-z][a-z]}*", "/usd", "", True),
    ("{*.google.*,*.yandex.*}", "www.google.com", ".", True),
    ("{*.google.*,*.yandex.*}", "www.yandex.com", ".", True),
    ("{*.google.*,*.yandex.*}", "yandex.com", ".", False),
    ("{*.google.*,*.yandex.*}", "google.com", ".", False),
    ("{*.google.*,yandex.*}", "www.google.com", ".", True),
    ("{*.google.*,yandex.*}", "yandex.com", ".", True),
    ("{*.google.*,yandex.*}", "www.yandex.com", ".", False),
    ("{*.google.*,yandex.*}", "google.com", ".", False),
    ("[a-z][!a-x]*cat*[h][!b]*eyes*", "my cat has very bright eyes", "", True),
    ("[a-z][!a-x]*cat*[h][!b]*eyes*", "my dog has very bright eyes", "", False),
    ("google.com", "google.com", "", True),
    ("google.com", "gobwas.com", "", False),
    ("https://*.google.*", "https://account.google.com", "", True),
    ("https://*.google.*", "https://google.com", "", False),
    ("{https://*.google.*,*yandex.*,*yahoo.*,*mail.ru}", "http://yahoo.com", "", True),
    ("{https://*.google.*,*yandex.*,*yahoo.*,*mail.ru}", "http://google.com", "", False),
    ("{https://*gobwas.com,http://exclude.gobwas.com}", "https://safe.gobwas.com", "", True),
    ("{https://*gobwas.com,http://exclude.gobwas.com}", "http://safe.gobwas.com", "", False),
    ("{https://*gobwas.com,http://exclude.gobwas.com}", "http://exclude.gobwas.com", "", True),
    ("{abc*[a-c]def,abc?[d-g]def,abc[zte]?def}", "abczqdef", "", True),
    ("{abc*def,abc?def,abc[zte]def}", "abczdef", "", True),
    ("abc*", "abcdef", "", True),
    ("abc*", "af", "", False),
    ("*def", "abcdef", "", True),
    ("*def", "af", "", False),
    ("ab*ef", "abcdef", "", True),
    ("ab*ef", "af", "", False),
]


@pytest.mark.parametrize(("pattern", "text", "separators", "want"), GOBWAS_TEST_GLOB)
def test_gobwas_glob_table(pattern, text, separators, want):
    assert glob_match(pattern, text, separators) is want


# argo-cd@v3.5.1:util/glob/glob_test.go Test_Match: a pattern that does not compile matches nothing
@pytest.mark.parametrize(
    ("text", "pattern", "want"),
    [
        ("hello", "hello", True),
        ("hello", "hell", False),
        ("hello", "hell*", True),
        ("hello", "h*", True),
        ("hello", "e*", False),
        ("e[[a*", "e[[a*", False),
    ],
)
def test_argo_util_glob_match(text, pattern, want):
    assert glob_match(pattern, text) is want


# How the library really matches (not the textbook glob), checked against it: Argo CD inherits this.
@pytest.mark.parametrize(
    ("pattern", "text", "separators", "want"),
    [
        ("b*b", "b", "", True),  # a prefix-suffix matcher that lets prefix and suffix overlap
        ("b**b", "b", "/", True),
        ("?", "", "", True),  # a lone ? accepts the empty string
        ("?", "", "/", True),
        ("***", "", "/", False),
        ("*{{", "-", "", False),  # empty alternatives
        ("{a,b", "b", "", True),  # an unclosed brace ends with the pattern
        ("a}", "a}", "", True),  # } and , are literal outside braces
        ("[!a]", "/", "/", True),  # a class matches a separator
        ("*", "a/b", "", True),
        ("*", "a/b", "/", False),
        ("**", "a/b", "/", True),
        ("a\\*", "a*", "", True),
        ("a\x00b", "a", "", True),  # NUL ends the pattern
        ("[]", "a", "", False),  # does not compile
        ("[z-a]", "m", "", False),
        ("\ufffd", "\ufffd", "", False),
    ],
)
def test_gobwas_glob_as_the_library_matches(pattern, text, separators, want):
    assert glob_match(pattern, text, separators) is want


def test_a_pattern_the_library_panics_on_raises_glob_panic():
    assert compile_glob("a{", "") is not None
    assert glob_match("a{", "ab") is False
    with pytest.raises(GlobPanic):  # Row.matchAll slices past the end of "a"
        glob_match("a{", "a")


@settings(max_examples=300, deadline=None)
@given(st.text("ab/*?[]{},!-\\.", max_size=12), st.text("ab/.", max_size=8), st.sampled_from(["", "/"]))
def test_glob_match_never_raises_anything_but_glob_panic(pattern, text, separators):
    with contextlib.suppress(GlobPanic):
        assert isinstance(glob_match(pattern, text, separators), bool)


# ---------------------------------------------------------------------------------------------
# Which files (repository.go getPotentiallyValidManifests)

DEPLOYMENT = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {}\n"


def _tree(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _names(folder: Path, spec: dict | None = None, root: Path | None = None) -> list[str]:
    found = directory.read(folder, spec or {}, root or folder, "app")
    return [(doc.get("metadata") or {}).get("name") for _, doc in found]


@pytest.fixture
def include_exclude(tmp_path: Path) -> Path:
    """argo-cd@v3.5.1:reposerver/repository/testdata/app-include-exclude"""
    _tree(
        tmp_path,
        {
            "deployment.yaml": DEPLOYMENT.format("nginx-deployment"),
            "subdir/deploymentSub.yaml": DEPLOYMENT.format("nginx-deployment-sub"),
        },
    )
    return tmp_path


# argo-cd@v3.5.1:reposerver/repository/repository_test.go TestFindResources, TestFindManifests_Exclude,
# TestFindManifests_Exclude_NothingMatches (recurse: true): the globs match the path inside the folder
@pytest.mark.parametrize(
    ("include", "exclude", "names"),
    [
        ("subdir/deploymentSub.yaml", "", ["nginx-deployment-sub"]),
        ("*.yaml", "", ["nginx-deployment", "nginx-deployment-sub"]),
        ("**/*.yaml", "", ["nginx-deployment-sub"]),
        ("nothing.yaml", "", []),
        ("", "subdir/deploymentSub.yaml", ["nginx-deployment"]),
        ("", "*.yaml", []),
        ("", "nothing.yaml", ["nginx-deployment", "nginx-deployment-sub"]),
        ("{deployment,subdir/deploymentSub}.yaml", "", ["nginx-deployment", "nginx-deployment-sub"]),
        ("deploymentSub.yaml", "", []),  # the file name alone is not matched
        ("*.yaml", "subdir/*", ["nginx-deployment"]),
    ],
)
def test_include_and_exclude(include_exclude, include, exclude, names):
    spec = {"recurse": True, "include": include, "exclude": exclude}
    assert sorted(_names(include_exclude, spec)) == sorted(names)


def test_recurse_walks_dot_folders_in_lexical_order(tmp_path):
    _tree(
        tmp_path,
        {
            "b.yaml": DEPLOYMENT.format("b"),
            "a/z.yaml": DEPLOYMENT.format("az"),
            ".hidden/h.yml": DEPLOYMENT.format("h"),
            "c.json": '{"kind": "ConfigMap", "metadata": {"name": "c"}}',
            "notes.txt": DEPLOYMENT.format("txt"),
            ".argo.yaml": DEPLOYMENT.format("dot"),
        },
    )
    assert _names(tmp_path) == ["dot", "b", "c"]
    assert _names(tmp_path, {"recurse": True}) == ["dot", "h", "az", "b", "c"]


# Test_getPotentiallyValidManifests / Test_findManifests "no recursion" and "recursion" (testdata/recurse):
# a ConfigMapList whose items are null is dropped (GenerateManifests isNullList)
def test_recurse_testdata(tmp_path):
    both = "apiVersion: v1\nkind: ConfigMapList\nitems:\n---\napiVersion: v1\nkind: ServiceAccount\n"
    _tree(tmp_path, {"baz.yaml": both, "foo/bar.yaml": both})
    assert len(directory.manifest_files(tmp_path, {}, tmp_path)) == 1
    assert len(directory.manifest_files(tmp_path, {"recurse": True}, tmp_path)) == 2
    kinds = [d["kind"] for _, d in directory.read(tmp_path, {"recurse": True}, tmp_path, "app")]
    assert kinds == ["ServiceAccount", "ServiceAccount"]


def _link(tmp_path: Path, name: str, target: str | Path) -> Path:
    os.symlink(target, tmp_path / name)
    return tmp_path / name


# Test_getPotentiallyValidManifestFile, Test_GenerateManifests_NoOutOfBoundsAccess,
# TestGenerateManifests_MissingSymlinkDestination
def test_symbolic_links(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}\n")
    _link(app, "cm.link.yaml", "../cm.yaml")  # testdata/in-bounds-link: read through the link
    assert _names(app, root=tmp_path) == ["sa"]
    _link(app, "nowhere.json", "/obviously/does/not/exist")  # skipped
    (app / "test.dir").mkdir()
    _link(app, "test.json", app / "test.dir")  # a link to a folder: skipped
    _link(app, "not-a-manifest", "/etc/passwd")  # not a manifest name: never followed
    assert _names(app, root=tmp_path) == ["sa"]
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: leaked}\n")
    _link(app, "out.yaml", outside)
    with pytest.raises(directory.DirectoryError, match="illegal filepath in symlink") as exc:
        directory.read(app, {"exclude": "out.yaml"}, tmp_path, "app")  # checked before exclude
    assert "leaked" not in str(exc.value)


def test_a_circular_link_fails(tmp_path):
    _link(tmp_path, "a.json", tmp_path / "b.json")
    _link(tmp_path, "b.json", tmp_path / "a.json")
    with pytest.raises(directory.DirectoryError, match="failed to evaluate symlink"):
        directory.manifest_files(tmp_path, {}, tmp_path)


def test_the_combined_size_limit(tmp_path, monkeypatch):
    """Test_findManifests "group of files should be limited at precisely the sum of their size" and
    "jsonnet isn't counted against size limit"; a file with the skip marker is not counted."""
    _tree(
        tmp_path,
        {f"{i}.yaml": "kind: A\n" for i in range(10)}
        | {"x.jsonnet": "{}" * 20, "s.yaml": "# +argocd:skip-file-rendering\n" * 9},
    )
    monkeypatch.setattr(directory, "MAX_COMBINED_BYTES", 80)
    assert len(directory.manifest_files(tmp_path, {}, tmp_path)) == 11
    monkeypatch.setattr(directory, "MAX_COMBINED_BYTES", 79)
    with pytest.raises(directory.DirectoryError, match="exceeded max combined manifest file size"):
        directory.manifest_files(tmp_path, {}, tmp_path)


def test_directory_settings_of_the_wrong_type_are_refused(tmp_path):
    for spec, what in (
        ({"recurse": "true"}, "recurse must be true or false"),
        ({"include": 5}, "include must be a string"),
        ([], "must be a mapping"),
    ):
        with pytest.raises(directory.DirectoryError, match=what):
            directory.manifest_files(tmp_path, spec, tmp_path)


def test_a_glob_the_library_panics_on_is_refused(tmp_path):
    _tree(tmp_path, {"a.yaml": "kind: A\n"})
    with pytest.raises(directory.DirectoryError, match=r"gobwas/glob.*panics"):
        directory.manifest_files(tmp_path, {"include": "*.yaml{"}, tmp_path)


# ---------------------------------------------------------------------------------------------
# How a file is read (getObjsFromYAMLOrJSON, utfutil)


def _objects(tmp_path: Path, name: str, content: str | bytes) -> list[dict]:
    _tree(tmp_path, {name: content})
    return [doc for _, doc in directory.read(tmp_path, {}, tmp_path, "app")]


# Test_findManifests: testdata/partially-valid-yaml, invalid-manifests, invalid-manifests-skipped,
# irrelevant-yaml, json-list, invalid-json, valid-json, yaml-with-empty-document; TestGenerateYamlManifestInDir
# (testdata/concatenated)
HELM_TEMPLATE = (
    'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ template "stuff.fullname" . }}-init\n'
    "data:\n  {{- $files := .Files }}\n    {{ $files.Get . }}\n"
)
FIND_MANIFESTS = {
    "partially-valid-yaml": ({"partially-valid.yaml": "apiVersion: v1\nkind: ConfigMap\n---\ninvalid:\n"}, None),
    "invalid-manifests": ({"bad.yaml": HELM_TEMPLATE}, None),
    "invalid-manifests-skipped": ({"bad.yaml": "# +argocd:skip-file-rendering\n" + HELM_TEMPLATE}, 0),
    "irrelevant-yaml": (
        {"relevant.yaml": "apiVersion: v1\nkind: ConfigMap\n", "irrelevant.yaml": "some: [irrelevant, yaml]\n"},
        1,
    ),
    "json-list": (
        {"list.json": '{"apiVersion": "v1", "kind": "ConfigMap"}\n{"apiVersion": "v1", "kind": "ConfigMap"}\n'},
        None,
    ),
    "invalid-json": ({"invalid.json": "[\n"}, None),
    "valid-json": ({"valid.json": '{"apiVersion": "v1", "kind": "ConfigMap"}\n'}, 1),
    "yaml-with-empty-document": ({"has-empty.yaml": "apiVersion: v1\nkind: ConfigMap\n---\n---\n"}, 1),
    "concatenated": (
        {
            "concatenated.yaml": "---\n"
            + "---\n".join(f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa{i}\n" for i in (1, 2))
            + "---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa3\n---\n"
        },
        3,
    ),
    "non-manifest-file": ({"not-json-or-yaml": "kind: A\n"}, 0),
}


@pytest.mark.parametrize("case", list(FIND_MANIFESTS))
def test_find_manifests_testdata(tmp_path, case):
    files, count = FIND_MANIFESTS[case]
    _tree(tmp_path, files)
    if count is None:
        with pytest.raises(directory.DirectoryError, match="Argo CD fails to read it"):
            directory.read(tmp_path, {}, tmp_path, "app")
    else:
        assert len(directory.read(tmp_path, {}, tmp_path, "app")) == count


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: café\ndata:\n  k: v\n"


@pytest.mark.parametrize(
    "data",
    [
        CM.encode("utf-8"),
        b"\xef\xbb\xbf" + CM.encode("utf-8"),
        CM.encode("utf-16"),  # BOM in the machine's order
        b"\xff\xfe" + CM.encode("utf-16-le"),
        b"\xfe\xff" + CM.encode("utf-16-be"),
        CM.replace("\n", "\r\n").encode(),
    ],
)
def test_encodings_argo_cd_reads(tmp_path, data):
    """utfutil.OpenFile(path, utfutil.UTF8): BOMOverride switches to UTF-16 or drops a UTF-8 BOM."""
    assert _objects(tmp_path, "cm.yaml", data) == [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "café"}, "data": {"k": "v"}}
    ]


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"kind: A\nname: caf\xe9\n", "not valid UTF-8 at byte 17"),
        (b"\xff\xfe" + "kind: A\n".encode("utf-16-le") + b"\x00", "not valid UTF-16-LE"),
        (b"\xfe\xff\xd8\x00\x00a", "not valid UTF-16-BE"),
    ],
)
def test_bytes_argo_cd_would_replace_are_refused(tmp_path, data, what):
    with pytest.raises(directory.DirectoryError, match=what):
        _objects(tmp_path, "x.yaml", data)


def test_invalid_bytes_in_a_skipped_file_do_not_matter(tmp_path):
    assert _objects(tmp_path, "x.yaml", b"# +argocd:skip-file-rendering\n\xff\xfe\xfd") == []


# The YAML stream, as k8s.io/apimachinery@v0.36.1 util/yaml NewYAMLOrJSONDecoder and
# sigs.k8s.io/yaml@v1.6.0 read it (checked against them)
HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
STREAMS = {
    "go-yaml scalars": (
        HEAD
        + "data: {a: 08, b: '1:20', c: 1:20, d: 1e3, e: 1.0, f: .5, g: 0o17, h: 2001-12-14, i: 9223372036854775808, "
        "j: -9223372036854775809, k: 1234567890123456789.0, l: 0x1F, m: -0b101, q: 1_000, o: ~, p: 1e400}\n",
        [
            {
                **{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                "data": {
                    "a": 8,
                    "b": "1:20",
                    "c": "1:20",
                    "d": 1000,
                    "e": 1,
                    "f": 0.5,
                    "g": 15,
                    "h": "2001-12-14",
                    "i": 9.223372036854776e18,
                    "j": -9.223372036854776e18,
                    "k": 1234567890123456800,
                    "l": 31,
                    "m": -5,
                    "q": 1000,
                    "o": None,
                    "p": "1e400",
                },
            }
        ],
    ),
    "keys become strings (y and n are booleans)": (
        HEAD + "y: 1\n2: b\nn: c\n1.5: d\n1e10: e\n",
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "a"},
                "true": 1,
                "2": "b",
                "false": "c",
                "1.5": "d",
                "1e+10": "e",
            }
        ],
    ),
    "merge keys: later keys win": (
        HEAD + "b: &b {x: 1, w: 1}\nc: {x: 0, <<: *b}\nd: {<<: *b, x: 0}\ne: {<<: [{x: 5}, *b]}\n",
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "a"},
                "b": {"x": 1, "w": 1},
                "c": {"x": 1, "w": 1},
                "d": {"x": 0, "w": 1},
                "e": {"x": 5, "w": 1},
            }
        ],
    ),
    "unknown tags leave the text": (
        HEAD + "a: !foo bar\nb: !!python/object:os.system {x: 1}\nc: !!binary aGk=\n",
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "a": "bar", "b": {"x": 1}, "c": "hi"}],
    ),
    "JSON values in a .yaml file": (
        '{"kind": "A"} {"kind": "B"}\n{"kind": "C"}',
        [{"kind": "A"}, {"kind": "B"}, {"kind": "C"}],
    ),
    "JSON then YAML": ('{"kind": "A"}\n---\nkind: B\n', [{"kind": "A"}, {"kind": "B"}]),
    "a YAML flow mapping is read as YAML": ("{kind: A, m: 1.0}\n", [{"kind": "A", "m": 1}]),
    "List items, as they are": (
        "kind: List\nitems:\n- {kind: A}\n- {kind: B, apiVersion: v2}\n",
        [{"kind": "A"}, {"kind": "B", "apiVersion": "v2"}],
    ),
    "any items list expands": ("kind: Anything\nitems: [{kind: A}]\n", [{"kind": "A"}]),
    "null items with a spec stay": ("kind: AList\nitems:\nspec: 1\n", [{"kind": "AList", "items": None, "spec": 1}]),
    "duplicate keys: the last": (
        HEAD + "x: 1\nx: 2\n",
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "x": 2}],
    ),
    "empty, null and comment documents": ("---\n# c\n---\nnull\n---\n\n---\nkind: A\n", [{"kind": "A"}]),
    "a separator's comment": ("kind: A\n--- # next\nkind: B\n", [{"kind": "A"}, {"kind": "B"}]),
    "CRLF": ("kind: A\r\n---\r\nkind: B\r\n", [{"kind": "A"}, {"kind": "B"}]),
    "unpaired JSON surrogates": ('{"kind": "A", "s": "\\ud800x\\udc00"}', [{"kind": "A", "s": "\ufffdx\ufffd"}]),
    "a file without a kind and markers is ignored": ("some: [irrelevant, yaml]\n---\n- a list\n", []),
}


@pytest.mark.parametrize("case", list(STREAMS))
def test_yaml_and_json_streams(tmp_path, case):
    text, want = STREAMS[case]
    assert _objects(tmp_path, "f.yaml", text) == want


FAILS = {
    "a scalar document": HEAD + "---\njust text\n",
    "a list document": HEAD + "---\n- a\n",
    "an object without a kind": HEAD + "---\nmetadata: {name: b}\n",
    "a bad separator": HEAD + "---x\nkind: B\n",
    "NaN": HEAD + "n: .nan\n",
    "infinity": HEAD + "n: -.Inf\n",
    "a null key": HEAD + "~: x\n",
    "a complex key": HEAD + "? [a]\n: b\n",
    "an unknown alias": HEAD + "a: *x\n",
    "a recursive anchor": HEAD + "a: &a [*a]\n",
    "a bad merge": HEAD + "a: {<<: [1]}\n",
    "a tag that does not fit": HEAD + "a: !!int abc\n",
    "YAML 1.2": "%YAML 1.2\n" + HEAD,
    "NUL": HEAD + "a: \x00\n",
    "a list item that is no object": "kind: List\nitems: [1]\n",
    "a list item without a kind": "kind: List\nitems: [{metadata: {name: a}}]\n",
    "a billion laughs": HEAD
    + "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 7)),
}


@pytest.mark.parametrize("case", list(FAILS))
def test_what_argo_cd_fails_on(tmp_path, case):
    with pytest.raises(directory.DirectoryError, match=r"^app/f\.yaml: Argo CD fails to read it: "):
        _objects(tmp_path, "f.yaml", FAILS[case])


JSON_FILES = {
    "trailing ] is accepted (json.Decoder.More)": ('{"kind": "A"}]', [{"kind": "A"}]),
    "two objects": ('{"kind": "A"} {"kind": "B"}', "Found multiple objects"),
    "empty": ("  \n", "EOF"),
    "an array": ('[{"kind": "A"}]', "cannot unmarshal array"),
    "a number out of range": ('{"kind": "A", "n": 1e400}', "cannot unmarshal number 1e400"),
    "NaN": ('{"kind": "A", "n": NaN}', "Failed to unmarshal"),
    "integers and floats as sigs.k8s.io/json reads them": (
        '{"kind": "A", "i": 1, "f": 1.0, "e": 1e3, "b": 9223372036854775808}',
        [{"kind": "A", "i": 1, "f": 1.0, "e": 1000.0, "b": 9.223372036854776e18}],
    ),
}


@pytest.mark.parametrize("case", list(JSON_FILES))
def test_json_files(tmp_path, case):
    text, want = JSON_FILES[case]
    if isinstance(want, list):
        got = _objects(tmp_path, "f.json", text)
        assert got == want and [type(v) for v in got[0].values()] == [type(v) for v in want[0].values()]
    else:
        with pytest.raises(directory.DirectoryError, match=want):
            _objects(tmp_path, "f.json", text)


REFUSED = {
    "a JSON object without a kind (read as an OCI manifest)": ("f.json", '{"metadata": {}}', "OCI image manifest"),
    "keys of two types becoming one": ("f.yaml", HEAD + "1: a\n'1': b\n", "both become the JSON key '1'"),
    "!!timestamp": ("f.yaml", HEAD + "t: !!timestamp 2001-01-01\n", "!!timestamp"),
    "!!binary that is no text": ("f.yaml", HEAD + "b: !!binary /w==\n", "not UTF-8 text"),
    "a byte order mark inside a document": ("f.yaml", HEAD + "\ufeffa: 1\n", "U\\+FEFF"),
    "deep nesting": ("f.yaml", HEAD + "a: " + "[" * 300 + "]" * 300 + "\n", "nested more than 200 levels"),
    "deep nesting through aliases": (
        "f.yaml",
        HEAD + "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 220)),
        "nested more than 200 levels",
    ),
    "deep JSON": ("f.json", '{"kind": "A", "a": ' + "[" * 300 + "]" * 300 + "}", "JSON nested more than 200"),
    "Jsonnet": ("f.jsonnet", "{}", "Jsonnet"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_trainyard_does_not_emulate_is_refused_by_name(tmp_path, case):
    name, text, what = REFUSED[case]
    with pytest.raises(directory.DirectoryError, match=what) as exc:
        _objects(tmp_path, name, text)
    assert "Argo CD fails" not in str(exc.value) and str(exc.value).startswith(f"app/{name}:")


# go.yaml.in/yaml/v2@v2.4.3 decode_test.go unmarshalTests (the rows decoded into interface{}), as
# sigs.k8s.io/yaml then hands them to Argo CD: integral floats become integers, infinities fail (None)
GO_YAML_UNMARSHAL = [
    ("v: hi", {"v": "hi"}),
    ("v: true", {"v": True}),
    ("v: 10", {"v": 10}),
    ("v: 0b10", {"v": 2}),
    ("v: 0xA", {"v": 10}),
    ("v: 4294967296", {"v": 4294967296}),
    ("v: 0.1", {"v": 0.1}),
    ("v: .1", {"v": 0.1}),
    ("v: -10", {"v": -10}),
    ("v: -.1", {"v": -0.1}),
    ("canonical: 6.8523e+5", {"canonical": 685230}),
    ("expo: 685.230_15e+03", {"expo": 685230.15}),
    ("fixed: 685_230.15", {"fixed": 685230.15}),
    ("canonical: y", {"canonical": True}),
    ("answer: NO", {"answer": False}),
    ("logical: True", {"logical": True}),
    ("option: on", {"option": True}),
    ("canonical: 685230", {"canonical": 685230}),
    ("decimal: +685_230", {"decimal": 685230}),
    ("octal: 02472256", {"octal": 685230}),
    ("hexa: 0x_0A_74_AE", {"hexa": 685230}),
    ("bin: 0b1010_0111_0100_1010_1110", {"bin": 685230}),
    ("bin: -0b101010", {"bin": -42}),
    ("bin: -0b1000000000000000000000000000000000000000000000000000000000000000", {"bin": -9223372036854775808}),
    ("empty:", {"empty": None}),
    ("canonical: ~", {"canonical": None}),
    ("english: null", {"english": None}),
    ("seq: [A,B]", {"seq": ["A", "B"]}),
    ("seq: [A,1,C]", {"seq": ["A", 1, "C"]}),
    ("seq:\n - A\n - B", {"seq": ["A", "B"]}),
    ("seq:\n - A\n - 1\n - C", {"seq": ["A", 1, "C"]}),
    ("scalar: | # Comment\n\n literal\n\n \ttext\n\n", {"scalar": "\nliteral\n\n\ttext\n"}),
    (
        "scalar: > # Comment\n\n folded\n line\n \n next\n line\n  * one\n  * two\n\n last\n line\n\n",
        {"scalar": "\nfolded line\nnext line\n * one\n * two\n\nlast line\n"},
    ),
    ("a: {b: c}", {"a": {"b": "c"}}),
    ("'1': '\"2\"'", {"1": '"2"'}),
    ("v:\n- A\n- 'B\n\n  C'\n", {"v": ["A", "B\nC"]}),
    ("v: !!float '1.1'", {"v": 1.1}),
    ("v: !!float 0", {"v": 0}),
    ("v: !!float -1", {"v": -1}),
    ("v: !!null ''", {"v": None}),
    ("%TAG !y! tag:yaml.org,2002:\n---\nv: !y!int '1'", {"v": 1}),
    ("v: ! test", {"v": "test"}),
    ("a: &x 1\nb: &y 2\nc: *x\nd: *y\n", {"a": 1, "b": 2, "c": 1, "d": 2}),
    ("a: &a {c: 1}\nb: *a", {"a": {"c": 1}, "b": {"c": 1}}),
    ("a: &a [1, 2]\nb: *a", {"a": [1, 2], "b": [1, 2]}),
    ("a: -b_c", {"a": "-b_c"}),
    ("a: +b_c", {"a": "+b_c"}),
    ("a: 50cent_of_dollar", {"a": "50cent_of_dollar"}),
    ("a: {b: https://github.com/go-yaml/yaml}", {"a": {"b": "https://github.com/go-yaml/yaml"}}),
    ("a: [https://github.com/go-yaml/yaml]", {"a": ["https://github.com/go-yaml/yaml"]}),
    ("a: !!str 2015-01-01", {"a": "2015-01-01"}),
    ('a: "2015-01-01"', {"a": "2015-01-01"}),
    ("a: 2015-01-01", {"a": "2015-01-01"}),
    ("a: 123456e1\n", {"a": 1234560}),
    ("a: 123456E1\n", {"a": 1234560}),
    (
        "First occurrence: &anchor Foo\nSecond occurrence: *anchor\n"
        "Override anchor: &anchor Bar\nReuse anchor: *anchor\n",
        {"First occurrence": "Foo", "Second occurrence": "Foo", "Override anchor": "Bar", "Reuse anchor": "Bar"},
    ),
    ("---\nhello\n...\n}not yaml", "hello"),
    ("a:\n  b\nb:\n  ? a\n  : a", {"a": "b", "b": {"a": "a"}}),
    ("v: .Inf", None),
    ("v: -.Inf", None),
    ("neginf: -.inf", None),
]


@pytest.mark.parametrize(("text", "want"), GO_YAML_UNMARSHAL)
def test_go_yaml_unmarshal_table(text, want):
    if want is None:
        with pytest.raises(directory._YamlFails, match="unsupported value"):
            directory._go_yaml_to_json(text)
    else:
        assert directory._go_yaml_to_json(text) == want


# go.yaml.in/yaml/v2@v2.4.3 decode_test.go unmarshalErrorTests
GO_YAML_ERRORS = [
    "v: !!float 'error'",
    "v: [A,",
    "v:\n- [A,",
    "a:\n- b: *,",
    "a: *b\n",
    "a: &a\n  b: *a\n",
    "a: &x null\n<<:\n- *x\nb: &x {}\n",
    "value: -",
    "a: !!binary ==",
    "{[.]}",
    "{{.}}",
    "b: *a\na: &a {c: 1}",
    "%TAG !%79! tag:yaml.org,2002:\n---\nv: !%79!int '1'",
    "a:\n  1:\nb\n  2:",
    "a: &a [00,00,00,00,00,00,00,00,00]\n"
    + "".join(f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)),
]


@pytest.mark.parametrize("text", GO_YAML_ERRORS)
def test_go_yaml_unmarshal_errors(text):
    with pytest.raises(directory._YamlFails):
        directory._go_yaml_to_json(text)


def test_go_yaml_merge_table():
    """go.yaml.in/yaml/v2@v2.4.3 decode_test.go mergeTests / TestMerge."""
    text = (
        'anchors:\n  list:\n    - &CENTER { "x": 1, "y": 2 }\n    - &LEFT   { "x": 0, "y": 2 }\n'
        '    - &BIG    { "r": 10 }\n    - &SMALL  { "r": 1 }\n'
        'plain:\n  "x": 1\n  "y": 2\n  "r": 10\n  label: center/big\n'
        'mergeOne:\n  << : *CENTER\n  "r": 10\n  label: center/big\n'
        "mergeMultiple:\n  << : [ *CENTER, *BIG ]\n  label: center/big\n"
        'override:\n  << : [ *BIG, *LEFT, *SMALL ]\n  "x": 1\n  label: center/big\n'
        'shortTag:\n  !!merge "<<" : [ *CENTER, *BIG ]\n  label: center/big\n'
        'longTag:\n  !<tag:yaml.org,2002:merge> "<<" : [ *CENTER, *BIG ]\n  label: center/big\n'
        'inlineMap:\n  << : {"x": 1, "y": 2, "r": 10}\n  label: center/big\n'
        'inlineSequenceMap:\n  << : [ *CENTER, {"r": 10} ]\n  label: center/big\n'
    )
    got = directory._go_yaml_to_json(text)
    want = {"x": 1, "y": 2, "r": 10, "label": "center/big"}
    assert {name: value for name, value in got.items() if name != "anchors"} == dict.fromkeys(
        ["plain", "mergeOne", "mergeMultiple", "override", "shortTag", "longTag", "inlineMap", "inlineSequenceMap"],
        want,
    )


def test_go_yaml_limit_table():
    """go.yaml.in/yaml/v2@v2.4.3 limit_test.go: the aliasing limit as go-yaml applies it (100 aliases of a
    256k-item list is refused, the list itself is not); nesting beyond trainyard's bound is refused."""
    with pytest.raises(directory._YamlFails, match="excessive aliasing"):
        directory._go_yaml_to_json(
            "{a: &a [{a}" + ",{a}" * (100 * 1024 // 4 - 100) + "], b: &b [*a" + ",*a" * 99 + "]}"
        )
    assert len(directory._go_yaml_to_json("a: &a [{a}" + ",{a}" * (10 * 1024 // 4 - 1) + "]")["a"]) == 2560
    for deep in ("[" * 20000, "x: " + "{" * 20000, "- " * 20000):
        with pytest.raises(directory._Refused, match="nested more than 200"):
            directory._go_yaml_to_json(deep)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"),
        (0.1, "0.1"),
        (1e10, "1e+10"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1e39, ".inf"),
        (-0.0, "-0"),
        (231595.875, "231595.88"),
        (16777217.0, "1.6777216e+07"),
    ],
)
def test_float_map_keys_take_float32_formatting(value, text):
    """sigs.k8s.io/yaml@v1.6.0 convertToJSONableObject: strconv.FormatFloat(key, 'g', -1, 32)."""
    assert directory._format_float32(value) == text


# Hostile input: whatever the bytes, a DirectoryError naming the file or objects, nothing else.
TOKENS = [
    "kind: A\n",
    "apiVersion: v1\n",
    "metadata: {name: a}\n",
    "---\n",
    "- ",
    ": ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "<<: ",
    "!!binary ",
    "!x ",
    "\ufeff",
    "\x00",
    "\r\n",
    "1e400",
    ".nan",
    "y",
    "08",
    '"\\ud800"',
    "items: ",
    "\t",
    "%YAML 1.2\n",
    "? ",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(TOKENS) | st.text(max_size=5), max_size=25),
    st.sampled_from(["f.yaml", "f.json"]),
    st.sampled_from(["utf-8", "utf-16", "utf-8-sig", "latin-1"]),
)
def test_any_text_reads_as_objects_or_a_directory_error(tmp_path_factory, parts, name, encoding):
    folder = tmp_path_factory.mktemp("app")
    data = "".join(parts).encode(encoding, "surrogatepass" if encoding.startswith("utf") else "replace")
    (folder / name).write_bytes(data)
    try:
        found = directory.read(folder, {}, folder, "app")
    except directory.DirectoryError as exc:
        assert str(exc).startswith(f"app/{name}: ")
        str(exc).encode("utf-8")  # printable as it is
    else:
        assert all(isinstance(doc, dict) and isinstance(doc.get("kind"), str) for _, doc in found)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b/c", ".d/e", "f g", "h\u00e9", "b"]),
            st.sampled_from([".yaml", ".json", ".jsonnet", ".txt", ""]),
            st.sampled_from(["file", "link-in", "link-out", "link-dir", "link-none", "dir"]),
        ),
        max_size=6,
    ),
    st.sampled_from(["", "*", "**/*.yaml", "{a,b}*", "[", "a{"]),
    st.booleans(),
)
@example(entries=[("b", "", "file"), ("b/c", ".yaml", "file")], include="", recurse=False)  # a file where a folder goes
def test_any_folder_lists_files_or_a_directory_error(tmp_path_factory, entries, include, recurse):
    root = tmp_path_factory.mktemp("repo")
    app = root / "app"
    app.mkdir()
    (root / "in.yaml").write_text("kind: A\n")
    for stem, suffix, what in entries:
        path = app / (stem + suffix)
        if path.exists() or path.is_symlink():
            continue
        if any(p.exists() and not p.is_dir() for p in path.parents):
            continue  # a file (or link) already holds that name: no folder can go there
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "file":
            path.write_text("kind: A\n")
        elif what == "dir":
            path.mkdir()
        else:
            target = {
                "link-in": root / "in.yaml",
                "link-out": Path("/etc/hostname"),
                "link-dir": root,
                "link-none": root / "no",
            }[what]
            os.symlink(target, path)
    try:
        files = directory.manifest_files(app, {"include": include, "recurse": recurse}, root)
    except directory.DirectoryError as exc:
        assert str(exc).startswith("app")
    else:
        assert all(f.path.name.endswith((".yaml", ".yml", ".json", ".jsonnet")) for f in files)


# ---------------------------------------------------------------------------------------------
# An Application of this repository with a directory source (argocd.render_source)


def _app(path: str, directory_spec: dict | None = None, namespace: str = "ns") -> argocd.Application:
    source: dict = {"repoURL": "https://example.com/r.git", "path": path, "targetRevision": "main"}
    if directory_spec is not None:
        source["directory"] = directory_spec
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "app", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": source,
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
        },
    }
    return argocd.Application(Resource(doc=doc, origin="apps.yaml"))


@pytest.fixture
def repo(tmp_path: Path) -> repository.Repository:
    return repository.Repository(root=tmp_path, url="https://example.com/r", revision="main")


def test_render_source_reads_a_directory_source(repo):
    _tree(
        repo.root,
        {
            "d/cm.yaml": CM.encode("utf-16"),
            "d/sub/x.yaml": DEPLOYMENT.format("x"),
            "d/list.yaml": "apiVersion: v1\nkind: List\nitems:\n"
            "- {apiVersion: v1, kind: Namespace, metadata: {name: ns1}}\n",
        },
    )
    path, resources = argocd.render_source(repo, _app("d", {"recurse": True, "exclude": "sub/*"}))
    assert path == "d"
    assert sorted((r.kind, r.name, r.namespace, r.origin) for r in resources) == [
        ("ConfigMap", "café", "ns", "d/cm.yaml"),
        ("Namespace", "ns1", None, "d/list.yaml"),
    ]


@pytest.mark.parametrize(
    ("files", "what"),
    [
        (
            {"d/a.yaml": CM, "d/b.yaml": CM},
            "core/ConfigMap ns/café appears 2 times \\(d/a.yaml, d/b.yaml\\).*RepeatedResourceWarning",
        ),
        (
            {"d/a.yaml": CM.replace("café", "x\n  namespace: ns"), "d/b.yaml": CM.replace("café", "x")},
            "appears 2 times",
        ),
        ({"d/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: 5\n"}, "metadata is not a mapping"),
        ({"d/a.jsonnet": "{}"}, "Jsonnet"),
        ({"d/a.yaml": b"kind: A\n\xff"}, "not valid UTF-8"),
        (
            {"d/a.yaml": CM, "d/.argocd-source.yaml": "directory: {recurse: true}\n"},
            "overrides the Application's source",
        ),
    ],
)
def test_render_source_refusals(repo, files, what):
    _tree(repo.root, files)
    with pytest.raises(argocd.ArgoError, match=what):
        argocd.render_source(repo, _app("d"))


def test_an_out_of_bounds_link_anywhere_stops_every_application_of_the_repository(repo):
    """reposerver/repository/repository.go checkOutOfBoundsSymlinks over the whole checkout (.git skipped)."""
    _tree(repo.root, {"d/cm.yaml": CM, "other/ok.txt": "x", ".gitignore": "/build/\n"})
    os.symlink("ok.txt", repo.root / "other/in.txt")
    os.symlink("../d/cm.yaml", repo.root / "other/up-and-in.yaml")
    (repo.root / ".git").mkdir()
    os.symlink("/etc/passwd", repo.root / ".git/skipped")
    (repo.root / "build").mkdir()
    os.symlink("/etc/passwd", repo.root / "build/ignored")
    assert argocd.render_source(repo, _app("d"))[1]
    os.symlink("../../elsewhere/../r", repo.root / "other/escapes")  # steps out, even if it comes back
    with pytest.raises(argocd.ArgoError, match=r"repository contains out-of-bounds symlinks\. file: other/escapes"):
        argocd.render_source(repo, _app("d"))
    assert directory.out_of_bounds_symlink(repo.root) == "other/escapes"
    os.remove(repo.root / "other/escapes")
    os.symlink("/etc/passwd", repo.root / "other/abs")
    assert directory.out_of_bounds_symlink(repo.root) == "other/abs"


# ---------------------------------------------------------------------------------------------
# kustomize.load_documents (kustomize's, Helm's and upstream files' output)


def test_load_documents_keeps_dates_as_strings():
    docs = kustomize.load_documents("a: 2001-01-01\nb: !!timestamp 2002-02-02 10:00:00\n---\n", "x")
    assert docs == [{"a": "2001-01-01", "b": "2002-02-02 10:00:00"}]


@pytest.mark.parametrize(
    "text", ["a: [", "- a\n", "a: " + "[" * 2000 + "]" * 2000, "a: " + "1" * 5000, "\x00", "a: *b"]
)
def test_load_documents_refuses_with_a_user_error(text):
    with pytest.raises(UserError, match=r"^x: "):
        kustomize.load_documents(text, "x")

"""The compiled CEL runtime (trainyard/repo/upstream/cel_runtime.py): matches() on RE2 with its pattern
compiled once, the strings extension, compile errors that name the file and the expression, and
every expression compiled once per process."""

from __future__ import annotations

import copy

import pytest

from tests.trainyard.repo.conftest import edit
from trainyard.contract.errors import UserError
from trainyard.repo.jobs import preview
from trainyard.repo.upstream import cel_runtime, vap
from trainyard.repo.upstream.cel_runtime import CelEvalError, Runtime, bind_matches, inline_variables

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": []}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s.matches('a')", "s._re2_matches('a')"),
        ("matches(s, 'a')", "_re2_matches(s, 'a')"),
        ("s.matches ( 'a' )", "s._re2_matches ( 'a' )"),
        # string literals and fields named matches are left alone
        ("'x.matches(y)' + s", "'x.matches(y)' + s"),
        ('"it\\"s .matches(" + s', '"it\\"s .matches(" + s'),
        ("r'\\' + s.matches('b')", "r'\\' + s._re2_matches('b')"),
        ("'''a 'matches(' b''' + o.matches", "'''a 'matches(' b''' + o.matches"),
        ("o.notmatches(1) || o.matchesx(1)", "o.notmatches(1) || o.matchesx(1)"),
    ],
)
def test_matches_calls_are_renamed_outside_string_literals(text, expected):
    assert bind_matches(text) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # RE2 (Go regexp syntax): an unanchored search, inline case-insensitive groups
        ("'Registry.Example.com/ml/trainer:1'.matches('^(?i:registry[.]example[.]com)/ml/trainer')", True),
        ("'xabcx'.matches('abc')", True),
        ("'abc'.matches('^b')", False),
        ("'a,b,c'.split(',')", ["a", "b", "c"]),  # the strings extension
        ("['a', 'b'].join('-')", "a-b"),
        ("'ABC'.lowerAscii()", "abc"),
        ("object.metadata.name.startsWith('p') && !has(object.metadata.labels)", True),
    ],
)
def test_standard_library_and_the_extensions_kube_apiserver_loads(expression, expected):
    assert vap.expression(expression, POD) == expected


def test_an_invalid_pattern_is_an_evaluation_error_not_a_crash():
    with pytest.raises(CelEvalError, match="invalid regular expression"):
        vap.expression("'a'.matches('(')", POD)
    with pytest.raises(CelEvalError):  # a backreference is not RE2
        vap.expression("'aa'.matches('(a)\\\\1')", POD)


def test_each_expression_is_compiled_once():
    runtime = Runtime()
    first = runtime.program("object.metadata.name == 'p'")
    assert runtime.program("object.metadata.name == 'p'") is first
    assert first.evaluate({"object": POD}) is True


def test_an_expression_that_does_not_compile_is_named_with_the_reason():
    with pytest.raises(UserError, match=r"does not compile: 'object\.spec\.containers\.exists\(c, \)'"):
        Runtime().program("object.spec.containers.exists(c, )")
    # checked as written: an undeclared function is refused at compile time, not per pod
    with pytest.raises(UserError, match="undeclared reference to 'nosuchfunction'"):
        Runtime().program("object.nosuchfunction()")


def test_the_compile_error_names_the_policy_file(repo_copy):
    cluster_policy = "base/webhook/validating-admission-policy.yaml"
    edit(repo_copy, cluster_policy, "expression: request.operation == 'CREATE'", "expression: request.operation ==")
    with pytest.raises(UserError) as exc:
        preview.load_context(repo_copy, "dev")
    message = str(exc.value)
    assert cluster_policy in message
    assert "spec.variables[0].expression" in message and "request.operation ==" in message


def test_the_pod_given_is_not_changed_by_an_evaluation():
    pod = copy.deepcopy(POD)
    vap.expression("object.metadata.name", pod)
    assert pod == POD and cel_runtime.MATCHES == "_re2_matches"


def test_variables_are_inlined_where_they_are_used():
    definitions = {"a": "object.metadata.name", "b": "(a_b) + 'x'"}
    assert inline_variables("variables.a == 'p'", definitions) == "(object.metadata.name) == 'p'"
    assert inline_variables("variables . b", definitions) == "((a_b) + 'x')"
    # string literals, a field named variables of something else, and unknown names stay
    assert inline_variables("'variables.a' + x.variables.a", definitions) == "'variables.a' + x.variables.a"
    assert inline_variables("variables.c", definitions) == "variables.c"


LAZY = {
    "metadata": {"name": "lazy"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"operations": ["CREATE"]}]},
        "variables": [
            {"name": "broken", "expression": "object.spec.nosuchfield == 1"},
            {"name": "name", "expression": "object.metadata.name"},
            {"name": "greeting", "expression": "'hello ' + variables.name"},
        ],
        "validations": [{"expression": "variables.greeting == 'hello p'", "messageExpression": "variables.greeting"}],
    },
}


def test_a_failing_variable_fails_only_where_it_is_used():
    # kube-apiserver evaluates variables lazily: an unused failing variable changes nothing
    assert vap.check(POD, None, LAZY).failures == []
    other = copy.deepcopy(POD)
    other["metadata"]["name"] = "q"
    assert vap.check(other, None, LAZY).failures == ["hello q"]  # the messageExpression, variables inlined
    uses_broken = copy.deepcopy(LAZY)
    uses_broken["spec"]["validations"] = [{"expression": "variables.broken"}]
    [failure] = vap.check(POD, None, uses_broken).failures
    assert failure.startswith("lazy: validations[0] failed to evaluate:") and "nosuchfield" in failure

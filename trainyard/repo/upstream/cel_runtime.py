"""A compiled CEL runtime for the admission configuration: cel-cpp (Google's CEL in C++) through
cel-expr-python, with the libraries kube-apiserver gives admission expressions.

Each expression is parsed, type-checked and planned once per process (:meth:`Runtime.program`,
cached by its text; the runtime is the environment), then evaluated per object by cel-cpp.

What the environment holds, as kube-apiserver's does:

- the CEL standard library (cel-cpp), with ``matches`` on RE2;
- the strings extension at version 2 (``ext.Strings(ext.StringsVersion(2))`` in
  kubernetes/apiserver pkg/cel/environment/base.go, from 1.29): ``split``, ``join``,
  ``lowerAscii``, ``indexOf``, ``replace``, ``substring``, ``trim``, ...;
- the variables of a ValidatingAdmissionPolicy (admissionregistration/v1 types.go): ``object``,
  ``oldObject``, ``params``, ``request``, ``authorizer``, ``variables``, all dynamically typed
  (the objects are JSON, as kube-apiserver's unstructured objects are);
- the functions a caller declares (the ``authorizer`` library: :mod:`trainyard.repo.upstream.rbac`).

``matches``: cel-expr-python (0.1.3) compiles the RE2 program of a ``matches`` call on every
evaluation (cel-cpp's regex precompilation is not reachable from its Python API), and the trainer
image pattern (a ``{0,127}`` repetition) costs about a millisecond to compile. So an expression is
checked as written, against the standard ``matches``, and runs with its ``matches`` calls bound to
``_re2_matches``: the same RE2 search (google-re2, the library cel-cpp links) on a pattern compiled
once per process. The rename is lexical (string literals are left alone) and changes nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2
from cel_expr_python import cel
from cel_expr_python.ext.ext_strings import ExtStrings

from trainyard.contract.errors import UserError

DYN = cel.Type.DYN
STRING = cel.Type.STRING
BOOL = cel.Type.BOOL
MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
RETURNS = {"dyn": DYN, "bool": BOOL, "string": STRING}
VARIABLES = ("object", "oldObject", "params", "request", "authorizer", "variables")
STRINGS_VERSION = 2  # kubernetes/apiserver pkg/cel/environment/base.go: ext.StringsVersion(2)
MATCHES = "_re2_matches"


class CelEvalError(Exception):
    """An expression's evaluation error (kube-apiserver: an error, not a false)."""


@dataclass(frozen=True)
class Member:
    """A member function ``<receiver>.name(args...)`` on a map receiver (the values of a
    declared library are maps: the only values cel-expr-python passes to Python functions)."""

    name: str
    arity: int  # arguments after the receiver, all strings
    impl: Callable[..., Any]
    returns: str = "dyn"  # or "bool", "string"


_patterns: dict[str, Any] = {}


def _re2_matches(text: str, pattern: str) -> bool:
    """CEL ``string.matches(string)``: an unanchored RE2 search (cel-spec langdef.md: matches);
    the compiled pattern is kept for the process."""
    compiled = _patterns.get(pattern)
    if compiled is None:
        try:
            compiled = _patterns[pattern] = re2.compile(pattern)
        except re2.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return compiled.search(text) is not None


def string_literal_end(text: str, i: int) -> int:
    """The index after the CEL string literal starting at ``text[i]`` (a quote); a raw literal
    (``r'...'``) has no escapes."""
    raw = i > 0 and text[i - 1] in "rR" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_"))
    quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
    j = i + len(quote)
    while j < len(text):
        if text.startswith(quote, j):
            return j + len(quote)
        j += 2 if text[j] == "\\" and not raw else 1
    return len(text)


def _tokens(expression: str) -> list[tuple[str, str]]:
    """``expression`` cut into ("string", literal), ("ident", name) and ("other", character)."""
    out, i, n = [], 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch in "'\"":
            end = string_literal_end(expression, i)
            out.append(("string", expression[i:end]))
            i = end
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (expression[j].isalnum() or expression[j] == "_"):
                j += 1
            out.append(("ident", expression[i:j]))
            i = j
        else:
            out.append(("other", ch))
            i += 1
    return out


def _next(tokens: list[tuple[str, str]], i: int) -> int:
    """The index of the first token at or after ``i`` that is not white space."""
    while i < len(tokens) and tokens[i][0] == "other" and tokens[i][1] in " \t\r\n":
        i += 1
    return i


def _prev(tokens: list[tuple[str, str]], i: int) -> int:
    while i >= 0 and tokens[i][0] == "other" and tokens[i][1] in " \t\r\n":
        i -= 1
    return i


def bind_matches(expression: str) -> str:
    """``expression`` with every call of ``matches`` (outside string literals) renamed to the
    cached RE2 function; nothing else changes."""
    tokens = _tokens(expression)
    out = []
    for i, (kind, text) in enumerate(tokens):
        k = _next(tokens, i + 1)
        is_call = k < len(tokens) and tokens[k] == ("other", "(")
        out.append(MATCHES if kind == "ident" and text == "matches" and is_call else text)
    return "".join(out)


def inline_variables(expression: str, definitions: Mapping[str, str]) -> str:
    """``expression`` with each ``variables.<name>`` of ``definitions`` replaced by its definition
    in parentheses (outside string literals; not a field named ``variables`` of something else).

    A ValidatingAdmissionPolicy's variables are evaluated lazily, where they are used, and an
    error in one surfaces only in the expressions that use it (kubernetes/apiserver
    pkg/admission/plugin/cel/composition.go binds ``variables`` to a lazy map, pkg/cel/lazy/lazy.go
    MapValue, whose fields are evaluated on their first use). CEL has no side effects, so the
    inlined expression has the same value and the same errors, and every expression of a policy
    runs on one activation."""
    tokens = _tokens(expression)
    out, i = [], 0
    while i < len(tokens):
        kind, text = tokens[i]
        if kind == "ident" and text == "variables":
            before = _prev(tokens, i - 1)
            dot = _next(tokens, i + 1)
            name = _next(tokens, dot + 1)
            if (
                (before < 0 or tokens[before] != ("other", "."))
                and dot < len(tokens)
                and tokens[dot] == ("other", ".")
                and name < len(tokens)
                and tokens[name][0] == "ident"
                and tokens[name][1] in definitions
            ):
                out.append(f"({definitions[tokens[name][1]]})")
                i = name + 1
                continue
        out.append(text)
        i += 1
    return "".join(out)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VARIABLE_FIELD = re.compile(r"\bvariables\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")


class Program:
    """One compiled expression.

    cel-expr-python converts every value it is given at each evaluation, so an evaluation is
    given only the variables the expression's text names (and of ``variables``, only the fields
    it names as ``variables.<name>``; all of them if it uses ``variables`` otherwise). A name
    found inside a string literal only adds a value the expression does not read."""

    def __init__(self, text: str, expression: Any) -> None:
        self.text, self._expression = text, expression
        names = set(_IDENTIFIER.findall(text))
        self._uses = tuple(v for v in VARIABLES if v in names)
        fields = _VARIABLE_FIELD.findall(text)
        # every use of `variables` is `variables.<field>`: pass just those fields
        self._fields = set(fields) if len(fields) == len(re.findall(r"\bvariables\b", text)) else None

    def evaluate(self, data: Mapping[str, Any]) -> Any:
        """The value (plain Python: bool, int, str, list, dict, None) for ``data`` (variable ->
        JSON-like value); an evaluation error raises :class:`CelEvalError`."""
        given = {v: data[v] for v in self._uses if v in data}
        if self._fields is not None and isinstance(given.get("variables"), Mapping):
            variables = given["variables"]
            given["variables"] = {f: variables[f] for f in self._fields if f in variables}
        try:
            value = self._expression.eval(data=given)
        except RuntimeError as exc:  # a value cel-expr-python cannot convert
            raise CelEvalError(str(exc)) from None
        return _plain(value)

    def evaluate_in(self, activation: Any) -> Any:
        """The value for an activation of :meth:`Runtime.activation` (converted once, shared by
        the expressions of one object)."""
        try:
            value = self._expression.eval(activation)
        except RuntimeError as exc:
            raise CelEvalError(str(exc)) from None
        return _plain(value)


def _plain(value: Any) -> Any:
    kind = value.type()
    if kind == cel.Type.ERROR or kind == cel.Type.UNKNOWN:
        raise CelEvalError(str(value.value()))
    return value.plain_value()


class Runtime:
    """A CEL environment with the admission variables and the ``members`` functions; it compiles
    each expression once."""

    def __init__(self, members: Sequence[Member] = ()) -> None:
        variables = dict.fromkeys(VARIABLES, DYN)
        declared = [
            cel.FunctionDecl(
                m.name,
                [cel.Overload(f"map_{m.name}_{m.arity}", RETURNS[m.returns], [MAP] + [STRING] * m.arity, is_member=True,
                              impl=m.impl)],
            )
            for m in members
        ]  # fmt: skip
        matches = cel.FunctionDecl(
            MATCHES, [cel.Overload("string_re2_matches", BOOL, [STRING, STRING], is_member=True, impl=_re2_matches)]
        )
        strings = [ExtStrings(STRINGS_VERSION)]
        # the checker: standard matches, to check an expression as written
        self._checker = cel.NewEnv(variables=variables, extensions=strings, functions=declared)
        self._env = cel.NewEnv(variables=variables, extensions=strings, functions=[*declared, matches])
        self._programs: dict[str, Program] = {}

    def program(self, expression: str) -> Program:
        """The compiled ``expression``; one that does not compile raises :class:`UserError`
        naming it and the reason."""
        found = self._programs.get(expression)
        if found is not None:
            return found
        try:
            self._checker.compile(expression)
        except RuntimeError as exc:
            reason = str(exc).removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]").strip()
            raise UserError(f"CEL expression does not compile: {expression!r}: {reason}") from None
        program = Program(expression, self._env.compile(bind_matches(expression)))
        self._programs[expression] = program
        return program

    def activation(self, data: Mapping[str, Any]) -> Any:
        """``data`` converted once for any number of :meth:`Program.evaluate_in` (cel-expr-python
        converts a value when an activation is made, which costs far more than evaluating a small
        expression on it)."""
        try:
            return self._env.Activation(dict(data))
        except RuntimeError as exc:
            raise CelEvalError(str(exc)) from None

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
- the functions a caller declares (the ``authorizer`` library: :mod:`trainyard.repo.vap`).

``matches``: cel-expr-python (0.1.3) compiles the RE2 program of a ``matches`` call on every
evaluation (cel-cpp's regex precompilation is not reachable from its Python API), and the trainer
image pattern (a ``{0,127}`` repetition) costs about a millisecond to compile. So an expression is
checked as written, against the standard ``matches``, and runs with its ``matches`` calls bound to
``_re2_matches``: the same RE2 search (google-re2, the library cel-cpp links) on a pattern compiled
once per process. The rename is lexical (string literals are left alone) and changes nothing else.
"""

from __future__ import annotations

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


def _string_end(text: str, i: int) -> int:
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


def bind_matches(expression: str) -> str:
    """``expression`` with every call of ``matches`` (outside string literals) renamed to the
    cached RE2 function; nothing else changes."""
    out, i, n = [], 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch in "'\"":
            end = _string_end(expression, i)
            out.append(expression[i:end])
            i = end
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (expression[j].isalnum() or expression[j] == "_"):
                j += 1
            word = expression[i:j]
            k = j
            while k < n and expression[k] in " \t\r\n":
                k += 1
            out.append(MATCHES if word == "matches" and k < n and expression[k] == "(" else word)
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class Program:
    """One compiled expression."""

    def __init__(self, text: str, expression: Any) -> None:
        self.text, self._expression = text, expression

    def evaluate(self, data: Mapping[str, Any]) -> Any:
        """The value (plain Python: bool, int, str, list, dict, None) for ``data`` (variable ->
        JSON-like value); an evaluation error raises :class:`CelEvalError`."""
        try:
            value = self._expression.eval(data=data)
        except RuntimeError as exc:  # a value cel-expr-python cannot convert
            raise CelEvalError(str(exc)) from None
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

"""The part of Go's text/template that ApplicationSet templates in this repository use.

Argo CD renders each string field of an ApplicationSet template with Go's text/template (plus
Sprig and ``normalize``) when ``goTemplate: true``. The offline emulator supports:

- field chains on the parameters: ``{{ .path.basename }}``, ``{{ .path.path }}``;
- ``{{ index .path.segments 1 }}`` (integer index into a list or key into a map);
- ``{{ normalize .path.basename }}`` (Argo CD's DNS-name sanitiser);
- whitespace trimming markers ``{{-`` and ``-}}``.

``missingkey=error`` (recommended by Argo CD, and used here) makes a missing key an error, as in
Go; without it a missing key prints ``<no value>``, as Go does for map parameters. Anything else
(pipelines, conditionals, other functions) is reported as not supported by the emulator rather
than guessed at.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)
_INVALID_DNS = re.compile(r"[^-a-z0-9.]")


class TemplateError(ValueError):
    pass


def sanitize_name(name: str) -> str:
    """Argo CD's utils.SanitizeName: lower case, invalid DNS characters to '-', at most 253
    characters, no leading or trailing '-' or '.'."""
    name = _INVALID_DNS.sub("-", name.lower())[:253]
    return name.strip("-.")


def _lookup(params: Any, chain: str, missing_error: bool) -> Any:
    value = params
    for key in chain.split(".")[1:]:
        if key == "":
            continue
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif missing_error:
            raise TemplateError(f"map has no entry for key {key!r} (in {chain})")
        else:
            return "<no value>"
    return value


def _argument(token: str, params: Any, missing_error: bool) -> Any:
    if token.startswith("."):
        return _lookup(params, token, missing_error)
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return token[1:-1]
    raise TemplateError(f"unsupported operand {token!r}")


def _evaluate(expr: str, params: Any, missing_error: bool) -> Any:
    try:
        tokens = shlex.split(expr.strip(), posix=False)
    except ValueError as exc:
        raise TemplateError(f"cannot parse {{{{{expr}}}}}: {exc}") from None
    if not tokens:
        raise TemplateError("empty action {{}}")
    if "|" in tokens:
        raise TemplateError(f"pipelines are not supported by the offline emulator: {{{{{expr}}}}}")
    head, args = tokens[0], tokens[1:]
    if head.startswith(".") and not args:
        return _lookup(params, head, missing_error)
    if head == "index" and len(args) >= 2:
        value = _argument(args[0], params, missing_error)
        for raw in args[1:]:
            key = _argument(raw, params, missing_error)
            try:
                value = value[key]
            except (IndexError, KeyError, TypeError):
                raise TemplateError(f"index of {args[0]} with {raw}: out of range or missing") from None
        return value
    if head == "normalize" and len(args) == 1:
        return sanitize_name(str(_argument(args[0], params, missing_error)))
    raise TemplateError(f"{{{{{expr.strip()}}}}} is not supported by the offline emulator")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + " ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_text(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def render(template: str, params: Any, *, missing_error: bool = False) -> str:
    """Render one string field."""
    out: list[str] = []
    pos = 0
    for m in _ACTION.finditer(template):
        literal = template[pos : m.start()]
        if m.group(1):
            literal = literal.rstrip()
        out.append(literal)
        out.append(_text(_evaluate(m.group(2), params, missing_error)))
        pos = m.end()
        if m.group(3):
            rest = template[pos:]
            pos += len(rest) - len(rest.lstrip())
    out.append(template[pos:])
    return "".join(out)


def render_tree(node: Any, params: Any, *, missing_error: bool = False) -> Any:
    """Render every string of a nested structure (Argo CD templates per string field)."""
    if isinstance(node, str):
        return render(node, params, missing_error=missing_error) if "{{" in node else node
    if isinstance(node, list):
        return [render_tree(v, params, missing_error=missing_error) for v in node]
    if isinstance(node, dict):
        return {k: render_tree(v, params, missing_error=missing_error) for k, v in node.items()}
    return node


_FAST = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")


def render_fasttemplate(node: Any, params: dict[str, str]) -> Any:
    """The default (non-Go) templating of ApplicationSets: ``{{key}}`` replaced by the flat
    parameter of that name; unknown keys are left as they are, as fasttemplate does."""
    if isinstance(node, str):
        return _FAST.sub(lambda m: str(params[m.group(1)]) if m.group(1) in params else m.group(0), node)
    if isinstance(node, list):
        return [render_fasttemplate(v, params) for v in node]
    if isinstance(node, dict):
        return {k: render_fasttemplate(v, params) for k, v in node.items()}
    return node

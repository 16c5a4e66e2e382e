"""CEL text for JSONPatch mutations: literals, ``JSONPatch{...}`` values, and the list and map
additions of the webhook engine (webhook/engine.py ``_extend``, ``_merge``) written as CEL, for
the MutatingAdmissionPolicies (:mod:`trainyard.repo.generate.mutating_policy`)."""

from __future__ import annotations


def q(text: str) -> str:
    """A CEL string literal (single quotes; the project's CEL never needs a backslash)."""
    if "'" in text or "\\" in text or "\n" in text:
        raise ValueError(f"{text!r} cannot be written as a plain CEL string literal")
    return f"'{text}'"


def lit(value: object) -> str:
    """A CEL literal for a JSON-like value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return q(value)
    if isinstance(value, list):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{q(k)}: {lit(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no CEL literal for {value!r}")


_OPEN, _CLOSE = "([{", ")]}"


def homogeneous(expression: str) -> str:
    """``expression`` with every value of every map literal wrapped in ``dyn()``.

    kube-apiserver type-checks admission CEL with homogeneous aggregate literals
    (k8s.io/apiserver@v0.36.5 pkg/cel/environment/base.go: cel.HomogeneousAggregateLiterals): a map
    literal whose values differ in type, such as a toleration's strings and its tolerationSeconds,
    does not compile, and neither does a list of such maps. ``dyn()`` is the identity at run time
    and makes every value one type. A ``{`` right after a name opens a message (``JSONPatch{...}``),
    whose fields are typed, and is left as it is. The project's CEL strings hold no quote of their
    own kind (:func:`q`)."""
    out: list[str] = []
    stack: list[bool] = []  # per open bracket: is it a map literal
    value_start: list[int | None] = []  # in a map literal: where in out the current value starts
    quote = ""
    for i, ch in enumerate(expression):
        if quote:
            out.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
            out.append(ch)
            continue
        if ch in _OPEN:
            before = expression[:i].rstrip()
            is_map = ch == "{" and not (before and (before[-1].isalnum() or before[-1] in "_."))
            stack.append(is_map)
            value_start.append(None)
            out.append(ch)
            continue
        in_map = bool(stack) and stack[-1]
        if in_map and ch == ":" and value_start[-1] is None:
            out.append(": ")
            value_start[-1] = len(out)
            continue
        if in_map and ch in ",}" and value_start[-1] is not None:
            start = value_start[-1]
            value = "".join(out[start:]).strip()
            del out[start:]
            out.append(f"dyn({value})")
            value_start[-1] = None
        if ch in _CLOSE:
            if not stack:
                raise ValueError(f"unbalanced CEL expression: {expression[:80]!r}")
            stack.pop()
            value_start.pop()
        out.append(ch)
    if quote or stack:
        raise ValueError(f"unbalanced CEL expression: {expression[:80]!r}")
    return "".join(out)


def object_initializers(expression: str) -> list[str]:
    """Every ``Object...{`` type initializer of a CEL expression (outside its string literals), by
    the type it names, in one left-to-right pass.

    The compiler writes JSONPatch values as map literals only: kube-apiserver before v1.36.5
    cannot convert an ``Object`` value held in a list or a map of a JSONPatch value and panics on
    the request, failurePolicy notwithstanding (kubernetes/kubernetes#140419, in
    k8s.io/apiserver@v0.36.5 pkg/cel/mutation/dynamic/objects.go ``ConvertToNative``; #142181)."""
    found: list[str] = []
    chain: list[str] = []  # the dotted name being read, when it starts with Object
    name = ""  # the identifier being read
    after_dot = False
    quote = ""
    escaped = False
    for ch in expression + " ":
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch.isalnum() or ch == "_":
            name += ch
            continue
        if name:  # an identifier ended
            if after_dot and chain:
                chain.append(name)
            elif not after_dot:
                chain = [name] if name == "Object" else []
            else:
                chain = []
            name, after_dot = "", False
        if ch.isspace():
            continue
        if ch == "." and chain:
            after_dot = True
            continue
        if ch == "{" and chain and not after_dot:
            found.append(".".join(chain))
        chain, after_dot = [], ch == "."
        if ch in "'\"":
            quote = ch
    return found


def patch(op: str, path: str, value: str | None = None) -> str:
    """A ``JSONPatch{...}`` value (path and value are CEL expressions)."""
    tail = "" if value is None else f", value: {value}"
    return f"JSONPatch{{op: {q(op)}, path: {path}{tail}}}"


def has_chain(obj: str, keys: tuple[str, ...]) -> list[str]:
    """has() of each successive key: ['has(o.a)', 'has(o.a.b)', ...]."""
    out, node = [], obj
    for key in keys:
        node = f"{node}.{key}"
        out.append(f"has({node})")
    return out


def nested(keys: tuple[str, ...], leaf: str) -> str:
    value = leaf
    for key in reversed(keys):
        value = f"{{{q(key)}: {value}}}"
    return value


def pointer(path: str, keys: tuple[str, ...], tail: str = "") -> str:
    """A CEL string expression: ``path`` (itself a CEL expression) followed by ``/key...`` and ``tail``."""
    suffix = "".join("/" + k for k in keys) + tail
    return f"{path} + {q(suffix)}" if suffix else path


def extend(obj: str, path: str, keys: tuple[str, ...], items: str) -> str:
    """engine._extend in CEL: append the list ``items`` to ``obj.keys...``, creating what is missing
    with one nested ``add`` at the first missing level (``path``: a CEL string expression, the JSON
    pointer of ``obj``). has() is asked level by level, so a missing parent is never selected."""
    has = has_chain(obj, keys)
    append = patch("add", pointer(path, keys, "/-"), "x")
    expr = f"{items}.map(x, {append})"
    for depth in reversed(range(len(keys))):
        create = patch("add", pointer(path, keys[: depth + 1]), nested(keys[depth + 1 :], items))
        expr = f"!{has[depth]} ? [{create}] : ({expr})"
    return f"(size({items}) == 0 ? [] : ({expr}))"


def merge_keys(obj: str, path: str, keys: tuple[str, ...], entries: list[tuple[str, str, str]]) -> str:
    """engine._merge in CEL for a map whose keys are known here: ``entries`` (condition, key, value)
    adds each key whose condition holds. A missing parent is created as an empty map first (CEL
    cannot build a map of only some keys), then each key is added: the same pod as the engine's
    one nested ``add``."""
    if not entries:
        return "[]"
    wanted = " || ".join(f"({c})" for c, _, _ in entries)
    has = has_chain(obj, keys)
    creates = "[]"
    for depth in reversed(range(len(keys))):
        ops = ", ".join(patch("add", pointer(path, keys[: d + 1]), "{}") for d in range(depth, len(keys)))
        creates = f"(!{has[depth]} ? [{ops}] : {creates})"
    adds = []
    for cond, key, value in entries:
        target = f"{pointer(path, keys, '/')} + jsonpatch.escapeKey({q(key)})"
        adds.append(f"({cond} ? [{patch('add', target, value)}] : [])")
    return f"(({wanted}) ? {creates} + {' + '.join(adds)} : [])"

"""YAML from an untrusted file, read in linear time and bounded memory, with line numbers.

PyYAML's composer recurses once per nesting level (a deeply nested flow sequence overflows the C
stack) and libyaml spends time quadratic in the nesting depth; aliases can make a small file
expand to an exponential number of nodes (the "billion laughs"). So a file is first streamed as
parser events, stopping at the first one nested deeper than :data:`MAX_DEPTH`; only then is it
composed into nodes (which keep their line), and a document whose aliases expand to more than
:data:`MAX_NODES` nodes is refused before anything walks it. Callers bound the file's size first.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

try:  # the C parser and composer; the pure-Python ones otherwise
    _Loader: type = yaml.CSafeLoader  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

MAX_DEPTH = 64  # nesting of mappings and sequences; a Kubernetes object needs about 15
MAX_NODES = 200_000  # nodes of one document once its aliases are expanded
MERGE = "tag:yaml.org,2002:merge"


class YamlRefused(ValueError):
    """The text is not YAML, or too deep or too large once expanded; ``line`` is 1-based (0: unknown)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def _line(mark: object) -> int:
    return int(getattr(mark, "line", -1)) + 1


def load(text: str) -> list[yaml.Node]:
    """The documents of ``text`` as nodes (empty documents dropped). Raises YamlRefused."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlRefused(
                        _line(event.start_mark), f"nested more than {MAX_DEPTH} levels deep; no Kubernetes object is"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        docs = [d for d in yaml.compose_all(text, Loader=_Loader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlRefused(_line(mark), f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlRefused(0, f"not valid YAML: {exc}") from None
    for doc in docs:
        size = expanded_size(doc)
        if size > MAX_NODES:
            raise YamlRefused(
                _line(doc.start_mark),
                f"this document has {size:,} nodes once its aliases are expanded (at most {MAX_NODES:,})",
            )
    return docs


def expanded_size(node: yaml.Node) -> int:
    """How many nodes ``node`` has with every alias expanded: linear in the distinct nodes (each
    is counted once and reused wherever an alias points at it), iterative (no recursion)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        if id(current) in sizes:
            continue
        kids = children(current)
        if done or not kids:
            sizes[id(current)] = 1 + sum(sizes.get(id(k), 0) for k in kids)
            continue
        stack.append((current, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(node)]


def children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def line(node: yaml.Node) -> int:
    return _line(node.start_mark)


def scalar(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def items(node: yaml.Node | None) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """The (key, value) pairs of a mapping, with ``<<`` merge keys resolved (the mapping's own keys
    first, as PyYAML's constructor flattens them)."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: set[int] = set()
    pending = [node]
    own_keys: set[str] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        merged = []
        for key, value in current.value:
            if key.tag == MERGE:
                merged += [value] if isinstance(value, yaml.MappingNode) else list(getattr(value, "value", []))
                continue
            text = scalar(key)
            if current is not node and text in own_keys:
                continue
            if current is node and text is not None:
                own_keys.add(text)
            yield key, value
        pending += [m for m in merged if isinstance(m, yaml.MappingNode)]


def get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    for k, v in items(node):
        if scalar(k) == key:
            return v
    return None


def walk(node: yaml.Node) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """Every (key, value) pair of every mapping under ``node``, each distinct node once."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            for k, v in items(current):
                yield k, v
                stack.append(v)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def to_python(node: yaml.Node) -> object:
    """The value of a node (run only on documents :func:`load` accepted, whose expansion is bounded)."""
    return yaml.SafeLoader("").construct_document(node)

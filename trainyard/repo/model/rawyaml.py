"""YAML from an untrusted file, read in linear time and bounded memory, with line numbers.

PyYAML's composer recurses once per nesting level (a deeply nested flow sequence overflows the C
stack) and libyaml spends time quadratic in the nesting depth; aliases can make a small file
expand to an exponential number of nodes (the "billion laughs"). So a file is first streamed as
parser events, stopping at the first one nested deeper than :data:`MAX_DEPTH`; only then is it
composed into nodes (which keep their line), and a document whose aliases expand to more than
:data:`MAX_NODES` nodes is refused before anything walks it. Callers bound the file's size first.

A key written twice in one mapping is refused by :func:`load`, naming both lines: readers disagree on
which one counts. kustomize reads resources and patches with go-yaml v3 (kyaml), which refuses them
(go.yaml.in/yaml/v3@v3.0.5 decode.go ``decoder.mapping``: ``uniqueKeys``, on by default, compares the
keys' kind and text), but a kustomization and a JSON patch in YAML with go-yaml v2 through
sigs.k8s.io/yaml@v1.6.0 ``YAMLToJSON`` (api@v0.21.3 types/kustomization.go ``Unmarshal``,
internal/builtins/PatchJson6902Transformer.go), where the last one wins, as in PyYAML. Two keys count
as one when their text is the same, whatever their quotes or tag (a superset of go-yaml v3's rule);
a key that is not a plain value (a mapping or a list) is refused as well. Merge keys (``<<``): kyaml
(sigs.k8s.io/kustomize/kyaml@v0.21.3 yaml/rnode.go ``deAnchor``) refuses two in one mapping ("duplicate
merge key") and, like PyYAML, lets the mapping's own keys override merged ones, but go-yaml v2
(go.yaml.in/yaml/v2@v2.4.4 decode.go ``decoder.merge``) writes merged keys where the ``<<`` stands, over
the keys before it; with ``merge_overrides=False`` a key given both ways (or by two merged mappings)
is refused too.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

# libyaml's parser and emitter where PyYAML was built with it (its wheels are): the same safe schema
# as yaml.safe_load; written text that reads back the same, and every generated file byte for byte as
# yaml.safe_dump writes it (tests/trainyard/repo/model/test_rawyaml.py); several times faster on renders
SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def safe_dump(doc: object, **options: object) -> str:
    """yaml.safe_dump, in C."""
    return yaml.dump_all([doc], Dumper=SafeDumper, **options)  # type: ignore[call-overload, no-any-return]


def safe_dump_all(docs: list, **options: object) -> str:
    """yaml.safe_dump_all, in C."""
    return yaml.dump_all(docs, Dumper=SafeDumper, **options)  # type: ignore[call-overload, no-any-return]


MAX_DEPTH = 64  # nesting of mappings and sequences; a Kubernetes object needs about 15
MAX_NODES = 200_000  # nodes of one document once its aliases are expanded
MERGE = "tag:yaml.org,2002:merge"


class YamlRefused(yaml.YAMLError, ValueError):
    """The text is not YAML, or too deep or too large once expanded; ``line`` is 1-based (0: unknown)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def _line(mark: object) -> int:
    return int(getattr(mark, "line", -1)) + 1


def load(text: str, *, merge_overrides: bool = True) -> list[yaml.Node]:
    """The documents of ``text`` as nodes (empty documents dropped), no key written twice in a mapping
    (nor, with ``merge_overrides=False``, given both directly and through a ``<<`` merge). Raises
    YamlRefused."""
    docs = compose(text)
    for doc in docs:
        problem = duplicate_key(doc, merge_overrides=merge_overrides)
        if problem is not None:
            raise YamlRefused(*problem)
    return docs


def compose(text: str) -> list[yaml.Node]:
    """The documents of ``text`` as nodes (empty documents dropped), bounded in depth and expansion
    but with keys as written. Raises YamlRefused."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlRefused(
                        _line(event.start_mark), f"nested more than {MAX_DEPTH} levels deep; no Kubernetes object is"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        docs = [d for d in yaml.compose_all(text, Loader=SafeLoader) if d is not None]
    except YamlRefused:
        raise
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


def _key_text(key: yaml.Node) -> str:
    return f"{key.value[:80]!r}{'...' if len(key.value) > 80 else ''}"


def _merged(value: yaml.Node) -> list[yaml.Node]:
    """The mappings a ``<<`` key merges: a mapping, or a list of them (the first takes precedence)."""
    if isinstance(value, yaml.MappingNode):
        return [value]
    return [m for m in value.value if isinstance(m, yaml.MappingNode)] if isinstance(value, yaml.SequenceNode) else []


def duplicate_key(node: yaml.Node, *, merge_overrides: bool = True) -> tuple[int, str] | None:
    """The first mapping key under ``node`` written twice (line of the second one, message naming
    both), or a key that is not a plain value; None when there is none. Each distinct node is looked
    at once (an alias is not a second copy), without recursion."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.SequenceNode):
            stack.extend(reversed(current.value))
            continue
        if not isinstance(current, yaml.MappingNode):
            continue
        first: dict[str, yaml.Node] = {}
        merges: list[tuple[yaml.Node, yaml.Node]] = []
        for key, value in current.value:
            if not isinstance(key, yaml.ScalarNode):
                return line(key), "a mapping key must be a plain value (a string), not a mapping or a list"
            if key.value in first:
                what = "merge key" if key.tag == MERGE else "key"
                return line(key), (
                    f"the {what} {_key_text(key)} is written twice in this mapping (lines {line(first[key.value])} and "
                    f"{line(key)}): YAML readers disagree on which one counts (kustomize refuses it in a resource, "
                    "takes the last one in a kustomization); write it once"
                )
            first[key.value] = key
            if key.tag == MERGE:
                merges.append((key, value))
        if not merge_overrides and merges:
            given = {k: v for k, v in first.items() if v.tag != MERGE}
            for merge, mapping in [(k, m) for k, v in merges for m in _merged(v)]:
                keys = [k for k, _ in mapping.value if isinstance(k, yaml.ScalarNode) and k.tag != MERGE]
                for key in keys:
                    if key.value in given:
                        return line(merge), (
                            f"the key {_key_text(key)} is given twice: at line {line(given[key.value])} and at line "
                            f"{line(key)}, merged in by the '<<' at line {line(merge)}: readers disagree on which "
                            "counts (go-yaml v2, which kustomize reads kustomizations and JSON patches with, takes the "
                            "one written later; the YAML rule, the mapping's own key); write it once"
                        )
                for key in keys:
                    given.setdefault(key.value, key)
        stack.extend(reversed([n for pair in current.value for n in pair]))
    return None


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

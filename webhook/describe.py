"""Human-readable lines for a JSONPatch the engine produced: what was injected, where."""

from __future__ import annotations

import orjson


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _item(value: object) -> str:
    if isinstance(value, dict) and set(value) == {"name", "value"}:
        return f"{value['name']}={value['value']}"
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _leaves(field: str, value: object, verb: str) -> list[tuple[str, str]]:
    """(field, text) for each leaf of an added value: nested mappings become dotted fields."""
    if isinstance(value, dict) and value and not ({"name", "value"} <= set(value)):
        out = []
        for key, child in value.items():
            out += _leaves(f"{field}.{key}" if field else key, child, verb)
        return out
    if isinstance(value, list):
        return [(field, "+ " + ", ".join(_item(v) for v in value))]
    return [(field, ("= " if verb == "set" else "+ ") + _item(value))]


def describe(pod: dict, ops: list[dict]) -> list[str]:
    """One line per injected field, naming containers instead of indexes; list appends to the
    same field are grouped on one line."""
    containers = (pod.get("spec") or {}).get("containers") or []
    lines: list[str] = []
    last_key: tuple[str, str] | None = None
    for op in ops:
        parts = [_unescape(p) for p in op["path"].split("/")[1:]]
        where = "pod"
        if parts[:2] == ["spec", "containers"] and len(parts) > 2:
            index = int(parts[2])
            name = containers[index].get("name") if index < len(containers) else None
            where = f"container {name or index}"
            parts = parts[3:]
        elif parts and parts[0] in ("spec", "metadata"):
            parts = parts[1:]
        appended = parts and parts[-1] == "-"
        verb = "set" if op["op"] == "replace" or (parts and parts[-1] == "value") else "add"
        field = ".".join(p for p in parts if p != "-" and not p.isdigit())
        if parts and parts[-1] == "value" and len(parts) >= 2 and parts[-2].isdigit():
            # an existing list entry's value overridden (an enforced env var): name the entry
            entries = containers[index].get(parts[-3]) if where != "pod" else None
            entry = entries[int(parts[-2])] if isinstance(entries, list) and int(parts[-2]) < len(entries) else {}
            label = entry.get("name", parts[-2]) if isinstance(entry, dict) else parts[-2]
            lines.append(f"{where}: {'.'.join(parts[:-2])} {label} = {_item(op['value'])}")
            last_key = None
            continue
        if appended and last_key == (where, field):
            lines[-1] += ", " + _item(op["value"])
            continue
        for leaf, text in _leaves(field, [op["value"]] if appended else op["value"], verb):
            lines.append(f"{where}: {leaf} {text}")
        last_key = (where, field) if appended else None
    return lines

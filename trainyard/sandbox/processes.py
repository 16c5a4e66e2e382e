"""Process trees on Linux, read from /proc: what a pod, a launcher or torchrun started.

Used by the local pods (to stop everything a container started: torchrun puts its workers in
sessions of their own, so process groups are not enough), by the demo (to kill a training
process) and by the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return out


def descendants(roots: Iterable[int]) -> list[int]:
    """The live ``roots`` and all their descendants."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def environ(pid: int) -> dict[str, str]:
    """A process's environment ({} when it is gone or not readable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def training_workers(pids: Iterable[int]) -> dict[int, int]:
    """Global rank -> pid of the training processes torchrun started among ``pids`` (their env has
    TORCHELASTIC_RUN_ID and RANK); their own children (data loaders) inherit that env and are
    left out."""
    candidates = {pid: env for pid in pids if "TORCHELASTIC_RUN_ID" in (env := environ(pid)) and "RANK" in env}
    parents = _parents()
    return {int(env["RANK"]): pid for pid, env in candidates.items() if parents.get(pid) not in candidates}

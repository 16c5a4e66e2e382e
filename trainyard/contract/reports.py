"""What the trainer reports to machines, as one schema the writer and every reader share.

- The run log: rank 0 writes one JSON object per line to ``DIR/metrics.jsonl``: a :class:`Step`
  per optimizer step, and events (:class:`Start`, :class:`Resume`, :class:`Checkpoint`,
  :class:`Committed`, :class:`Stopped`, :class:`Done`) with an ``event`` key naming them and the
  ``time`` they happened. :func:`encode` writes a line, :func:`decode` reads one back.
- Preflight: ``trainyard preflight --json`` prints ``{"ok": B, "exit_code": N, "checks": [...]}``, each
  check a :class:`CheckResult`; :func:`preflight_json` and :func:`read_preflight` are the two
  ends.

A line or document that does not follow the schema raises :class:`ReportError` naming the field.
"""

from __future__ import annotations

import json
import math
import time
import typing
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from trainyard.contract.errors import UserError


class ReportError(UserError):
    """A report line or document does not follow the schema."""


@dataclass(frozen=True, slots=True)
class Step:
    """One optimizer step (no ``event`` key)."""

    step: int
    loss: float | None  # None: not a finite number
    lr: float
    tokens_per_s: float
    step_ms: float
    checkpoint_ms: float | None  # how long the step was blocked by a save, when it saved
    world_size: int


@dataclass(frozen=True, slots=True)
class Start:
    EVENT: ClassVar[str] = "start"
    world_size: int
    backend: str
    device: str
    strategy: str
    model: str
    restart: int  # torchrun's restart count of this worker group
    resumed_from: int | None
    max_steps: int
    # When this worker process began (epoch seconds, before torch was imported), when its process
    # group was ready and how long setting it up took: with the torchrun log they split a restart.
    process_started: float | None = None
    group_ready: float | None = None
    setup_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Resume:
    EVENT: ClassVar[str] = "resume"
    step: int
    path: str
    world_size: int
    load_ms: float | None = None  # loading the checkpoint, all ranks


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A save started (sync: finished); it counts once :class:`Committed` follows."""

    EVENT: ClassVar[str] = "checkpoint"
    step: int
    mode: Literal["sync", "async"]
    blocking_ms: float


@dataclass(frozen=True, slots=True)
class Committed:
    EVENT: ClassVar[str] = "committed"
    step: int
    mode: Literal["sync", "async"]
    blocking_ms: float
    total_ms: float


@dataclass(frozen=True, slots=True)
class Stopped:
    EVENT: ClassVar[str] = "stopped"
    signal: str
    step: int
    checkpoint: str | None


@dataclass(frozen=True, slots=True)
class Done:
    EVENT: ClassVar[str] = "done"
    step: int
    loss: float | None
    params_sha256: str | None


Event = Start | Resume | Checkpoint | Committed | Stopped | Done
Record = Step | Event
EVENTS: dict[str, type[Event]] = {cls.EVENT: cls for cls in (Start, Resume, Checkpoint, Committed, Stopped, Done)}


@dataclass(frozen=True, slots=True)
class Timed:
    """An event as read back, with the time it was written."""

    record: Event
    time: float


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    return value


def encode(record: Record, now: float | None = None) -> str:
    """One JSON line (without the newline) for ``record``; events get ``event`` and ``time``."""
    data = {k: _finite(v) for k, v in asdict(record).items()}
    if not isinstance(record, Step):
        data = {"event": record.EVENT, **data, "time": round(time.time() if now is None else now, 3)}
    return json.dumps(data)


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


_R = TypeVar("_R", bound=_Dataclass)  # a record class: _check returns what it was asked for


def _check(cls: type[_R], data: dict[str, Any], where: str) -> _R:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields(cls):
        if f.name not in data and f.default is not MISSING:  # a field added later: older lines lack it
            continue
        if f.name not in data:
            raise ReportError(f"{where}: {cls.__name__} has no {f.name!r}")
        value, hint = data[f.name], hints[f.name]
        allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, type(int | None)) else (hint,)
        ok = False
        for a in allowed:
            if a is type(None):
                ok = ok or value is None
            elif typing.get_origin(a) is Literal:
                ok = ok or value in typing.get_args(a)
            elif a is float:
                ok = ok or (isinstance(value, int | float) and not isinstance(value, bool))
            else:
                ok = ok or (isinstance(value, a) and not isinstance(value, bool))
        if not ok:
            raise ReportError(f"{where}: {cls.__name__}.{f.name} is {value!r}, expected {hint}")
        values[f.name] = float(value) if hint in (float, float | None) and value is not None else value
    return cls(**values)


def decode(line: str | bytes, where: str = "run log") -> Step | Timed:
    """Read one line of the run log back into its record."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise ReportError(f"{where}: not a JSON line: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected a JSON object")
    name = data.get("event")
    if name is None:
        return _check(Step, data, where)
    cls = EVENTS.get(name)
    if cls is None:
        raise ReportError(f"{where}: unknown event {name!r} (known: {', '.join(EVENTS)})")
    stamp = data.get("time")
    if not isinstance(stamp, int | float) or isinstance(stamp, bool):
        raise ReportError(f"{where}: event {name!r} has no numeric 'time'")
    return Timed(_check(cls, data, where), float(stamp))


# --------------------------------------------------------------------------------------------
# Preflight

Status = Literal["pass", "warn", "skip", "fail", "error"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str | None = None


def preflight_json(checks: list[CheckResult], exit_code: int) -> dict[str, Any]:
    return {"ok": exit_code == 0, "exit_code": exit_code, "checks": [asdict(c) for c in checks]}


def read_preflight(text: str | bytes, where: str = "preflight --json") -> tuple[list[CheckResult], int]:
    """The checks and the exit status of a ``trainyard preflight --json`` document."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReportError(f"{where}: not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise ReportError(f"{where}: expected an object with a 'checks' list")
    code = doc.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool):
        raise ReportError(f"{where}: 'exit_code' must be an integer")
    checks = []
    for i, item in enumerate(doc["checks"]):
        if not isinstance(item, dict):
            raise ReportError(f"{where}: checks[{i}] must be an object")
        checks.append(_check(CheckResult, {"fix": None, **item}, f"{where}: checks[{i}]"))
    return checks, code

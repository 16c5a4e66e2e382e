"""What the checks report: a problem, where it is (file or folder), in which object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    severity: Severity
    where: str  # the file (or folder) to open, relative to the repository root
    message: str  # what is wrong and what to do
    obj: str | None = None  # "Kind namespace/name"
    cluster: str | None = None

    def __str__(self) -> str:
        head = f"{self.where}: {self.obj}" if self.obj else self.where
        scope = f"[{self.cluster}] " if self.cluster else ""
        return f"{self.severity}: {scope}{head}: {self.message}"


def error(where: str, message: str, obj: str | None = None, cluster: str | None = None) -> Problem:
    return Problem("error", where, message, obj, cluster)


def warning(where: str, message: str, obj: str | None = None, cluster: str | None = None) -> Problem:
    return Problem("warning", where, message, obj, cluster)

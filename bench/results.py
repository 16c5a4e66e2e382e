"""Where the benchmark scripts put their tables: printed, and written to bench/results/."""

from __future__ import annotations

from pathlib import Path


def publish(table: str, out: str | Path) -> None:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(table if table.endswith("\n") else table + "\n")
    print()
    print(table)


def table(caption: str, header: str, align: str, rows: list[str]) -> str:
    """A caption and a Markdown table of ``rows`` under ``header`` (both '| a | b |' lines)."""
    return "\n".join([caption, "", header, align, *rows, ""])

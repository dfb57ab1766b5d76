"""What every section is built from: a saved result, cells, tables, verdicts and charts."""

import json
from pathlib import Path

import matplotlib.pyplot as plt

RAW, PRODUCT = "#6b7280", "#2563eb"


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return "\n".join(lines)


def finish_chart(figure, axes: list, ticks: list[int], path: Path) -> None:
    """Ticks at the measured values, a legend and a grid on each axis; the chart written to `path`."""
    for axis in axes:
        axis.set_xticks(ticks, [str(v) for v in ticks])
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

"""The ramp's table and chart for docs/benchmarks.md ("Capacity: users on one box") from a run's
`steps.json`: `python -m bench.load.chart var/loadtest/<time> [more runs] [--chart PNG]` (several
runs: their steps in one table and chart, by users).
Prints the Markdown table; the chart shows, against users connected, the added between-token p99
over the engine's own (the target: 50 ms), answers per second and `busy` refusals per second.
"""

import argparse
import json
from pathlib import Path

import matplotlib

SURFACES = ("WS", "SSE", "API")


def _p(figures: dict, kind: str, surface: str, which: str) -> float | None:
    row = figures[f"{kind}_ms"].get(f"{surface} {kind}")
    return row[which] if row and row["count"] else None


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def table(steps: list[dict]) -> str:
    head = (
        "| users | sockets open | answers at once (peak) | answers/s | tokens/s "
        "| ttft p50 / p99 (WS) | gap p50 / p99 (WS) "
        "| engine's gap | `busy` refusals | other errors | stored ≠ streamed "
        "| web CPU | CPU ms / token | CPU ms / answer "
        "| KiB / connection | Redis ms/s, calls/token | DB ms / answer |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in steps:
        lines.append(
            f"| {s['users']:,} | {s['sockets_open_peak']:,.0f} | {s['engine_running_peak']:.0f} "
            f"| {s['answers_per_second']} "
            f"| {s['tokens_per_second']:,.0f} "
            f"| {_ms(_p(s, 'ttft', 'WS', 'p50'))} / {_ms(_p(s, 'ttft', 'WS', 'p99'))} "
            f"| {_ms(_p(s, 'gap', 'WS', 'p50'))} / {_ms(_p(s, 'gap', 'WS', 'p99'))} | {s['engine_gap_ms']} "
            f"| {s['busy_refusals']:,} | {s['errors_other_than_busy']:,} | {s['stored_unlike_streamed']} "
            f"| {s['web_cpu_share']:.0%} | {s['web_cpu_ms_per_token']} | {s['web_cpu_ms_per_answer']} "
            f"| {s['memory_kib_per_connection']} "
            f"| {s['redis_ms_per_second']}, {s['redis_calls_per_token']} | {s['database_ms_per_answer']} |"
        )
    return "\n".join(lines)


def chart(steps: list[dict], path: Path) -> None:
    matplotlib.use("Agg")
    from matplotlib import pyplot

    users = [s["users"] for s in steps]
    figure, (latency, rates) = pyplot.subplots(1, 2, figsize=(11, 4))
    for surface in SURFACES:
        added = [
            None if (p99 := _p(s, "gap", surface, "p99")) is None else p99 - s["engine_gap_ms"] for s in steps
        ]
        latency.plot(users, added, marker="o", label=f"{surface} gap p99 − engine's gap")
    latency.axhline(50, color="grey", linestyle="--", label="target: 50 ms added")
    latency.set_xlabel("users in the step")
    latency.set_ylabel("ms")
    latency.set_title("Added between-token p99")
    latency.legend(fontsize=8)
    seconds = [s["seconds"] for s in steps]
    rates.plot(users, [s["answers_per_second"] for s in steps], marker="o", label="answers/s")
    rates.plot(
        users,
        [s["busy_refusals"] / t for s, t in zip(steps, seconds, strict=True)],
        marker="o",
        label="busy/s",
    )
    rates.set_xlabel("users in the step")
    rates.set_title("Answers, refusals and errors per second")
    rates.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("runs", type=Path, nargs="+", help="runs' folders under var/loadtest/")
    cli.add_argument("--chart", type=Path)
    options = cli.parse_args()
    steps = [step for run in options.runs for step in json.loads((run / "steps.json").read_text())]
    steps.sort(key=lambda step: step["users"])
    print(table(steps))
    if options.chart:
        chart(steps, options.chart)


if __name__ == "__main__":
    main()

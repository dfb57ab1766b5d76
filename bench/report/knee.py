"""Section 4: the knee of the curve, and whether the shipped engine defaults are the chosen ones."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.bench_knee import defaults
from bench.report.blocks import finish_chart, table


def section(result: dict, folder: Path) -> str:
    shipped, chosen = result["shipped"], result["chosen"]
    # Runs before several loads were offered kept one load for the whole run.
    rows = [{"load": result.get("load"), **r} for r in result["rows"]]
    loads = sorted({r["load"] for r in rows})
    names = list(chosen)
    figure, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.4), squeeze=False)
    for column, name in enumerate(names):
        varied = [r for r in rows if all(r[k] == shipped[k] for k in shipped if k != name)]
        for value in sorted({r[name] for r in varied}):
            line = sorted((r for r in varied if r[name] == value), key=lambda r: r["load"])
            style = "o-" if value == chosen[name] else "o--"
            label = f"{value}" + (" (chosen)" if value == chosen[name] else "")
            axes[0][column].plot(
                [r["load"] for r in line], [r["tokens_per_s"] for r in line], style, label=label
            )
            axes[1][column].plot(
                [r["load"] for r in line], [r["ttft_p50_ms"] for r in line], style, label=label
            )
        axes[0][column].set(title=name, ylabel="output tokens/s", xscale="log")
        axes[1][column].set(xlabel="concurrent requests offered", ylabel="TTFT p50 ms", xscale="log")
    finish_chart(figure, [axis for row in axes for axis in row], loads, folder / "knee.png")
    body = [
        [
            r["load"], r["max_num_seqs"], r["block_size"], r["max_num_batched_tokens"], r["tokens_per_s"],
            r["ttft_p50_ms"], r["ttft_p95_ms"], r["gap_p50_ms"],
        ]
        for r in sorted(rows, key=lambda r: (r["load"], *(r[k] for k in shipped)))
    ]  # fmt: skip
    now = defaults()

    def decision(name: str) -> str:
        line = f"- `{name}`: shipped during the run {shipped[name]}, chosen {chosen[name]}"
        if shipped[name] == chosen[name]:
            return line + " — the same."
        if now[name] == chosen[name]:
            return line + " — changed: `chatsite/settings.py` now ships the chosen value."
        return line + " — **differs from what `chatsite/settings.py` ships**."

    decisions = [decision(name) for name in names]
    return "\n\n".join(
        [
            "## 4. Knee of the curve: choosing the engine defaults",
            f"The raw engine under {', '.join(str(v) for v in loads)} concurrent chat-like requests "
            f"({result['max_tokens']} output tokens, a shared ~440-token system prompt served by the prefix "
            "cache, a different question each), one setting varied at a time around the shipped defaults; "
            "each point is a freshly started engine, the best of its repetitions shown. Rule, at the "
            f"highest load ({loads[-1]}): values within {result['knee_share']:.0%} of the best throughput "
            "are good enough; the shipped value stays if it is one of them, else the smallest of them wins "
            "(beyond the knee more batch buys little and costs latency; smaller blocks give finer "
            "prefix-cache hits). Admission (`CHAT_MAX_ACTIVE_TOTAL`) follows `max_num_seqs`.",
            table(
                [
                    "offered",
                    "max_num_seqs",
                    "block",
                    "batched tokens",
                    "tokens/s",
                    "TTFT p50",
                    "TTFT p95",
                    "between p50",
                ],
                body,
            ),
            "![Knee of the curve](benchmarks/knee.png)",
            "\n".join(decisions),
        ]
    )

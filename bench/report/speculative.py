"""Section 6: speculative decoding against none, on chat and bulk work."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.report.blocks import RAW, finish_chart, table, verdict


def section(result: dict, folder: Path) -> str:
    rows = result["rows"]
    modes = list(rows[0]["modes"])
    base, others = modes[0], modes[1:]
    levels = sorted({r["concurrency"] for r in rows})
    figure, axis = plt.subplots(figsize=(6.5, 3.4))
    for workload, style in (("chat", "o-"), ("bulk", "s--")):
        for mode in others:
            points = [r for r in rows if r["workload"] == workload]
            speedups = [r["speedup"][mode] for r in points]
            axis.plot([r["concurrency"] for r in points], speedups, style, label=f"{workload}, {mode}")
    axis.axhline(1.0, color=RAW, linewidth=0.8)
    axis.set(xlabel="concurrent requests", ylabel=f"tokens/s against {base}", xscale="log")
    finish_chart(figure, [axis], levels, folder / "speculative.png")
    body = [
        [r["workload"], r["concurrency"], *(r["modes"][m]["tokens_per_s"] for m in modes)]
        + [f"{r['speedup'][m]:.2f}× ({r['same_text'][m]}/{r['requests']} same)" for m in others]
        + [" / ".join(f"{r['modes'][m]['ttft_p50_ms']:.0f}" for m in modes)]
        for r in rows
    ]
    header = ["workload", "concurrent", *(f"tokens/s, {m}" for m in modes)]
    header += [f"{m} / {base}" for m in others] + ["TTFT p50 ms, " + " / ".join(modes)]
    single = next((r for r in rows if r["workload"] == "chat" and r["concurrency"] == 1), None)
    if single:
        best_mode = max(others, key=lambda m: single["speedup"][m])
        speedup = single["speedup"][best_mode]
        target = (
            f"Target: single-chat tokens/s with speculation at least 1.3× without — {speedup:.2f}× "
            f"({best_mode}), {verdict(speedup >= 1.3)}."
        )
    else:
        target = (
            "Target: single-chat tokens/s with speculation at least 1.3× without — not measured in this run."
        )
    return "\n\n".join(
        [
            "## 6. Speculative decoding: n-gram prompt lookup",
            f"The raw engine with the shipped settings and each way of speculating ({', '.join(modes)}; one "
            f"engine after the other), the same requests, {result['max_tokens']} output "
            "tokens: chat (a long story from a one-line prompt) and bulk (the paragraph summary of a "
            "~600-token document, the bulk jobs' instruction) at temperature 0"
            + (
                ", and the same summaries sampled at the bulk jobs' temperature at the bulk workers' "
                "concurrency (bulk, sampled; their texts differ from run to run by design)"
                if any(r["workload"] == "bulk, sampled" for r in rows)
                else ""
            )
            + ". Same: answers identical to those without speculation.",
            table(header, body),
            *repeat_parts(result),
            "![Speculative decoding](benchmarks/speculative.png)",
            target,
        ]
    )


def repeat_parts(result: dict) -> list[str]:
    repeats = result.get("repeat_same")
    if not repeats:
        return []
    first = result["rows"][0]
    runs = ", ".join(f"{mode} {same}/{first['requests']}" for mode, same in repeats.items())
    return [
        f"The same {first['concurrency']}-at-a-time chats run twice on each engine gave the same texts: "
        f"{runs}; a difference with speculation means something only where the engine repeats itself "
        "without it."
    ]

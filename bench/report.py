"""Charts and docs/benchmarks.md from the benchmarks' JSON results in docs/benchmarks/.

Run after the benchmarks (`make bench` does); a benchmark that has not run yet is
listed as missing. Targets are reported as met or missed, never asserted.

Why one module of about 470 lines: one section per benchmark, each a few independent
functions, all writing the one document.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.bench_defaults import SIDES  # noqa: E402
from bench.bench_knee import defaults  # noqa: E402
from bench.results import RESULTS, ROOT  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
RAW, PRODUCT = "#6b7280", "#2563eb"
# Everything from this line on in docs/benchmarks.md is written by people and kept across runs.
NOTES = "<!-- notes: kept by bench/report.py -->"


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


def streaming_section(result: dict, folder: Path) -> str:
    levels = result["levels"]
    x = [row["concurrency"] for row in levels]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(x, [r["raw"]["tokens_per_s"] for r in levels], "o-", color=RAW, label="raw engine (HTTP)")
    left.plot(
        x, [r["product"]["tokens_per_s"] for r in levels], "o-", color=PRODUCT, label="product (WebSocket)"
    )
    left.set(xlabel="concurrent chats", ylabel="output tokens/s", title="Throughput", xscale="log")
    right.plot(x, [r["raw"]["ttft_p50_ms"] for r in levels], "o-", color=RAW, label="raw p50")
    right.plot(x, [r["product"]["ttft_p50_ms"] for r in levels], "o-", color=PRODUCT, label="product p50")
    right.plot(x, [r["raw"]["ttft_p95_ms"] for r in levels], "o--", color=RAW, label="raw p95")
    right.plot(x, [r["product"]["ttft_p95_ms"] for r in levels], "o--", color=PRODUCT, label="product p95")
    right.set(xlabel="concurrent chats", ylabel="ms", title="Time to first token", xscale="log")
    for axis in (left, right):
        axis.set_xticks(x, [str(v) for v in x])
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(folder / "streaming.png", dpi=110)
    plt.close(figure)
    rows = []
    for r in levels:
        raw, product = r["raw"], r["product"]
        rows.append(
            [
                r["concurrency"],
                f"{fmt(raw['ttft_p50_ms'])} / {fmt(product['ttft_p50_ms'])}",
                f"{fmt(raw['ttft_p95_ms'])} / {fmt(product['ttft_p95_ms'])}",
                f"{fmt(raw['gap_p50_ms'])} / {fmt(product['gap_p50_ms'])}",
                f"{fmt(raw['gap_p99_ms'])} / {fmt(product['gap_p99_ms'])}",
                f"{fmt(raw['tokens_per_s'])} / {fmt(product['tokens_per_s'])}",
                f"{r['throughput_ratio']:.3f}",
                f"{r['ttft_p50_added_ms']:+.1f}",
            ]
        )
    breakdown = [
        [
            r["concurrency"],
            r["raw"].get("ttft_mean_ms"),
            r["product"].get("web_tier_ttft_mean_ms"),
            r["product"].get("ttft_mean_ms"),
            r["product"].get("turn_store_mean_ms"),
            r["product"].get("database_connections"),
        ]
        for r in levels
    ]
    worst_ratio = min(r["throughput_ratio"] for r in levels)
    worst_added = max(r["ttft_p50_added_ms"] for r in levels)
    return "\n\n".join(
        [
            "## 1. Streaming overhead: product WebSocket against direct engine HTTP",
            f"{', '.join(str(r['raw']['requests']) for r in levels)} requests per level (best of "
            f"{len(levels[0]['raw'].get('runs', [0]))} alternating repetitions), "
            f"{result['max_tokens']} output tokens at most, temperature 0, the same prompts on both paths, "
            "one engine with the shipped settings. Each cell: raw / product; times in ms.",
            table(
                [
                    "chats",
                    "TTFT p50",
                    "TTFT p95",
                    "between tokens p50",
                    "between tokens p99",
                    "tokens/s",
                    "throughput ratio",
                    "TTFT p50 added",
                ],
                rows,
            ),
            "![Streaming overhead](benchmarks/streaming.png)",
            "Where the added time to first token goes (means, ms), from the product's own "
            "`chat_time_to_first_token_seconds`: the web tier's clock starts when the answer's task starts, "
            "after the turn is stored, so web tier − raw is prompt assembly and the engine client, and "
            "client − web tier is storing the turn, the `chat.started` frame and the WebSocket hop.",
            f"Store: {result.get('database', 'sqlite')}. Storing the turn (`chat_turn_store_seconds`: the "
            "quota read and the rows written, in the database's thread) is part of client − web tier; "
            "connections: those open to the database at the end of the level (PostgreSQL only).",
            table(
                [
                    "chats",
                    "raw engine",
                    "product, web tier",
                    "product, client",
                    "storing the turn",
                    "connections",
                ],
                breakdown,
            ),
            f"Target: throughput ratio at least 0.95 — worst level {worst_ratio:.3f}, "
            f"{verdict(worst_ratio >= 0.95)}. At most 20 ms added to the p50 TTFT — worst level "
            f"{worst_added:+.1f} ms, {verdict(worst_added <= 20)}.",
            STREAMING_TRACE,
            *cpu_parts(levels),
            *hardware_parts(result),
            *beside_parts(
                result,
                load(folder, "streaming_postgresql"),
                "On PostgreSQL, the web process's pooled connections (chatsite/asgi.py)",
                "DATABASE_URL=postgres://... python -m bench.bench_streaming",
            ),
            *beside_parts(
                result,
                load(folder, "streaming_web2"),
                "With two web processes behind nginx (`make run TOPOLOGY=cluster`; their CPU and metrics "
                "added up)",
                "python -m bench.bench_streaming --web-processes 2",
            ),
        ]
    )


def beside_parts(plain: dict, other: dict | None, what: str, how: str) -> list[str]:
    """The same benchmark run another way (`other`), beside the plain run: each cell plain / other."""
    if other is None:
        return [f"{what}: not run yet (`{how}`)."]
    by_level = {r["concurrency"]: r for r in plain["levels"]}

    def pair(row: dict, value, digits: str = ".1f") -> str:
        mine, theirs = value(by_level[row["concurrency"]]), value(row)
        return " / ".join("–" if v is None else f"{v:{digits}}" for v in (mine, theirs))

    rows = [
        [
            r["concurrency"],
            pair(r, lambda x: x["product"].get("turn_store_mean_ms")),
            pair(r, lambda x: x["throughput_ratio"], ".3f"),
            pair(r, lambda x: x["ttft_p50_added_ms"], "+.1f"),
            pair(r, lambda x: x["product"].get("web_cpu_ms_per_token"), ".3f"),
            r["product"].get("database_connections"),
        ]
        for r in other["levels"]
        if r["concurrency"] in by_level
    ]
    return [
        f"{what} (run {other['machine']['date']}), beside the run above: each cell the run above / this "
        "one. Connections: those open to PostgreSQL at the end of the level, this benchmark's own included.",
        table(
            [
                "chats",
                "storing the turn, ms",
                "throughput ratio",
                "TTFT p50 added",
                "web CPU ms/token",
                "connections",
            ],
            rows,
        ),
    ]


def hardware_parts(result: dict) -> list[str]:
    """The product's tokens/s as a share of the host's compute and memory-bandwidth ceilings."""
    ceilings = result.get("hardware")
    if not ceilings:
        return []
    rows = [
        [
            r["concurrency"],
            r["product"]["tokens_per_s"],
            r["hardware"]["compute_ceiling_tokens_per_s"],
            f"{r['hardware']['share_of_compute']:.0%}",
            r["hardware"]["bandwidth_ceiling_tokens_per_s"],
            f"{r['hardware']['share_of_bandwidth']:.0%}",
        ]
        for r in result["levels"]
    ]
    return [
        "Distance to the hardware (bench/hardware.py): this host multiplies bf16 matrices at "
        f"{ceilings['bf16_matmul_gflops']:,.0f} GFLOP/s on {ceilings['threads']} threads and copies memory "
        f"at {ceilings['copy_gb_per_s']:.1f} GB/s; the model has {ceilings['model_weights'] / 1e6:,.0f} M "
        "weights. A decoding step reads every weight once for the whole batch and spends 2 FLOPs per weight "
        "per token, which gives a compute ceiling (the same at every batch) and a bandwidth ceiling "
        "(batch × GB/s over the weights' bytes).",
        table(["chats", "product tokens/s", "compute ceiling", "share", "bandwidth ceiling", "share"], rows),
    ]


def cpu_parts(levels: list[dict]) -> list[str]:
    """CPU per token: the web process against the engine's own API server, on the same engine."""
    measured = [r for r in levels if r["product"].get("web_cpu_ms_per_token") is not None]
    if not measured:
        return []
    columns = (
        ("raw", "engine_api_cpu_ms_per_token"),
        ("product", "engine_api_cpu_ms_per_token"),
        ("product", "web_cpu_ms_per_token"),
    )
    rows = [
        [r["concurrency"], *(r[side][name] for side, name in columns), r["web_cpu_per_token_vs_engine_api"]]
        for r in measured
    ]
    top = max(measured, key=lambda r: r["concurrency"])
    web, ratio = top["product"]["web_cpu_ms_per_token"], top["web_cpu_per_token_vs_engine_api"]
    return [
        "CPU spent per output token (ms, user + system time of the process over the run, from /proc): "
        "vLLM's own API server when clients stream from it directly, the same server when the product "
        "is its client, and the product's web process (daphne), which does the work of an API server "
        "and more (the turn stored, the answer's Redis stream, the WebSocket).",
        table(["chats", "API server, raw", "API server, product", "web process", "web / API server"], rows),
        f"Targets at {top['concurrency']} chats: web CPU per token at most 0.3 ms (Open WebUI's, measured "
        f"on the same work) — {web:.3f} ms, {verdict(web <= 0.3)}; at most 2× the engine's API server — "
        f"{ratio:.2f}×, {verdict(ratio <= 2)}.",
    ]


def relay_section(result: dict, folder: Path) -> str:
    rows = [
        [
            f"{r['seconds_between_tokens'] * 1000:g} ms" if r["seconds_between_tokens"] else "none",
            r["tokens"],
            round(result["chats"] / r["seconds_between_tokens"]) if r["seconds_between_tokens"] else "–",
            r["tokens_per_s"],
            r["tokens_per_frame"],
            r["web_cpu_ms_per_token"],
            r["web_cpu_share"],
        ]
        for r in result["paces"]
    ]
    # The target counts the paced runs, whose engine hands the web tier one token at a time (a
    # frame carries more only when the tier falls behind): an engine that outruns the web tier
    # makes frames of hundreds of tokens, which says the tier keeps up, not how fast it relays.
    paced_runs = [r for r in result["paces"] if r["seconds_between_tokens"]]
    fastest = max(paced_runs or result["paces"], key=lambda r: r["tokens_per_s"])
    outrun = max(result["paces"], key=lambda r: r["tokens_per_frame"])
    paced = max(result["paces"], key=lambda r: r["seconds_between_tokens"])
    return "\n\n".join(
        [
            "## 5. The web tier alone: CPU per relayed token, and the most one web process relays",
            f"{result['chats']} concurrent chats over the WebSocket against `bench.fast_engine`, a stand-in "
            "for an engine far faster than this host's that streams one-word chunks at a set pace per "
            "answer (every other benchmark runs vLLM). Deltas that reach the web process together travel "
            "as one frame, so when the engine outpaces the web tier, frames grow instead of falling behind.",
            table(
                [
                    "between tokens",
                    "tokens an answer",
                    "offered tokens/s",
                    "relayed tokens/s",
                    "tokens per frame",
                    "web CPU ms/token",
                    "web CPU, share of a core",
                ],
                rows,
            ),
            f"Target: one web process relays at least 4,000 tokens/s from a fast engine — "
            f"{fastest['tokens_per_s']:,.0f} at {fastest['tokens_per_frame']:.2f} tokens a frame "
            f"({fastest['seconds_between_tokens'] * 1000:g} ms pace), "
            f"{verdict(fastest['tokens_per_s'] >= 4000)}, using {fastest['web_cpu_share']:.0%} of a core. An "
            f"engine that outruns it (no pace) is relayed in frames of {outrun['tokens_per_frame']:.0f} "
            f"tokens: {outrun['tokens_per_s']:,.0f} tokens/s, a figure of the stand-in engine more than "
            "of the web tier. At "
            f"{paced['seconds_between_tokens'] * 1000:g} ms pace and {paced['tokens']}-token answers, each "
            f"answer's fixed costs (its turn stored, its stream opened and closed) weigh more: "
            f"{paced['web_cpu_ms_per_token']:.3f} ms of CPU per token.",
        ]
    )


# What a trace of the web tier showed (timestamps at each step of one answer's start, taken
# with temporary instrumentation, quick mode, on the machine described above).
STREAMING_TRACE = """\
**Where the time before the engine request goes, traced.** Before the engine request leaves, each
answer is admitted (two Redis round trips), its turn is stored (one transaction) and its token
stream opened. With one chat that takes about 5 ms. When 32 chats send at the same moment, the
stores queue on Django's single ORM thread while the engine holds both cores, so the product's 32
engine requests leave spread over a few hundred milliseconds where the raw client's leave within a
few: the engine prefills the raw burst in one step, and the product's later arrivals wait for one
more. Median time from the `chat.send` frame to the engine request at 32 chats, traced:

| change | turn stored (p50 / max) | engine request sent (p50 / max) |
|---|---|---|
| before: SQLite with a sync per commit, 7-8 queries a turn | 438 / 1,271 ms | 472 / 1,312 ms |
| SQLite in WAL mode (`synchronous=NORMAL`) | 176 / 327 ms | 301 / 418 ms |
| and a turn stored in 4-6 queries, busy check inside its transaction | 83 / 158 ms | 166 / 224 ms |

A turn alone went from 5.1 to 1.0 ms (new conversation) and from 6.3 to 2.4 ms (existing one).
Tried and dropped: storing turns on several threads at once (the GIL makes it no faster and the
event loop slower), and leaving out the per-answer heartbeat and stop subscription (no change).
Since then the web process reuses its database connections (chatsite/asgi.py: Django's PostgreSQL
pool, which saves the 4.4 ms a new PostgreSQL connection costs each ORM call under ASGI, and kept
SQLite connections, about 1 ms each), and `chat_turn_store_seconds` measures the wait for the
database thread in every run (the table above). What is left is Python time in one event loop on a
CPU the engine saturates; a host with cores to spare for the web tier, or several daphne processes,
is the next thing to measure."""


def batching_section(result: dict, folder: Path) -> str:
    loop, raw, product = result["generate_loop"], result["raw"], result["product"]
    figure, axis = plt.subplots(figsize=(6, 3.4))
    labels = [
        "transformers generate,\none at a time",
        "raw engine,\n32 concurrent",
        "product,\n32 concurrent",
    ]
    values = [loop["tokens_per_s"], raw["tokens_per_s"], product["tokens_per_s"]]
    bars = axis.bar(labels, values, color=["#9ca3af", RAW, PRODUCT])
    axis.bar_label(bars, fmt="%.0f")
    axis.set(ylabel="output tokens/s", title="Continuous batching")
    figure.tight_layout()
    figure.savefig(folder / "batching.png", dpi=110)
    plt.close(figure)
    speedup = result["product_speedup"]
    return "\n\n".join(
        [
            "## 2. Continuous batching: the product at 32 chats against a `generate` loop",
            f"The same {result['concurrency']} requests ({result['max_tokens']} output tokens at most, "
            "greedy decoding). "
            f"The loop served {loop['requests']} of them one after another, with the engine stopped "
            f"({loop['threads']} torch thread(s), {loop.get('dtype', 'bfloat16')}: the faster of bf16 and "
            "float32 and of one thread or all, probed first), with the checkpoint the engine serves.",
            table(
                ["", "requests", "output tokens", "wall s", "tokens/s"],
                [
                    [
                        "transformers generate loop",
                        loop["requests"],
                        loop["completion_tokens"],
                        loop["wall_s"],
                        loop["tokens_per_s"],
                    ],
                    [
                        "raw engine, 32 concurrent",
                        raw["requests"],
                        raw["completion_tokens"],
                        raw["wall_s"],
                        raw["tokens_per_s"],
                    ],
                    [
                        "product, 32 concurrent",
                        product["requests"],
                        product["completion_tokens"],
                        product["wall_s"],
                        product["tokens_per_s"],
                    ],
                ],
            ),  # fmt: skip
            "![Continuous batching](benchmarks/batching.png)",
            f"Target: at least 14 times the loop's tokens/s — the product reached {speedup:.1f}× "
            f"(the raw engine {result['raw_speedup']:.1f}×), {verdict(speedup >= 14)}.",
        ]
    )


def prefix_section(result: dict, folder: Path) -> str:
    on, off = result["on"], result["off"]
    turns = [t["turn"] for t in on["product"]]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(
        turns, [t["ttft_ms"] for t in off["product"]], "o-", color="#dc2626", label="product, caching off"
    )
    left.plot(turns, [t["ttft_ms"] for t in on["product"]], "o-", color=PRODUCT, label="product, caching on")
    left.plot(turns, [t["ttft_ms"] for t in off["raw"]], "x--", color="#f87171", label="raw, caching off")
    left.plot(turns, [t["ttft_ms"] for t in on["raw"]], "x--", color=RAW, label="raw, caching on")
    left.set(xlabel="turn", ylabel="ms (log)", title="Time to first token by turn", yscale="log")
    right.plot(
        turns, [t["prompt_tokens"] for t in on["product"]], "o-", color="#9ca3af", label="prompt tokens"
    )
    right.plot(turns, [t["cached_tokens"] for t in on["product"]], "o-", color=PRODUCT, label="cached (on)")
    right.plot(
        turns, [t["cached_tokens"] for t in off["product"]], "o-", color="#dc2626", label="cached (off)"
    )
    right.set(xlabel="turn", ylabel="tokens", title="Prompt tokens served from the cache (product)")
    for axis in (left, right):
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(folder / "prefix.png", dpi=110)
    plt.close(figure)
    rows = [
        [
            p_on["turn"],
            p_on["prompt_tokens"],
            f"{fmt(p_off['ttft_ms'])} / {fmt(p_on['ttft_ms'])}",
            f"{fmt(r_off['ttft_ms'])} / {fmt(r_on['ttft_ms'])}",
            f"{p_off['cached_tokens']} / {p_on['cached_tokens']}",
        ]
        for p_on, p_off, r_on, r_off in zip(on["product"], off["product"], on["raw"], off["raw"], strict=True)
    ]
    speedup = result["turn8_speedup_product"]
    return "\n\n".join(
        [
            "## 3. Prefix caching over 8-turn conversations",
            f"{result['conversations']} conversation(s) per mode (medians shown), a ~440-token system "
            f"prompt, answers of {result['max_tokens']} tokens at most, one turn at a time. "
            "Each cell: caching off / on.",
            table(["turn", "prompt tokens", "product TTFT ms", "raw TTFT ms", "product cached tokens"], rows),
            "![Prefix caching](benchmarks/prefix.png)",
            f"Target: at turn 8, at least 10 times lower TTFT with caching — the product {speedup:.1f}× "
            f"(the raw engine {result['turn8_speedup_raw']:.1f}×), {verdict(speedup >= 10)}.",
            *length_parts(result.get("turn8_by_length")),
        ]
    )


def length_parts(by_length: dict | None) -> list[str]:
    """The turn-8 ratio by history length (raw engine, system prompt repeated), if measured."""
    if not by_length:
        return []
    points = by_length["points"]
    crossing = by_length["crosses_10x_at_prompt_tokens"]
    rows = [[point["prompt_tokens"], f"{point['ratio']:.1f}×"] for point in points]
    if crossing is None:
        top = max(points, key=lambda point: point["ratio"])
        where = (
            f"it does not cross 10× within the lengths measured: the most is {top['ratio']:.1f}× at "
            f"{top['prompt_tokens']:,} tokens"
        )
    else:
        where = f"it crosses 10× at about {crossing:,} prompt tokens at turn 8"
    return [
        "The same conversation straight to each engine with the system prompt repeated 1 to 4 times: "
        f"turn-8 TTFT without caching over with it, by the turn's prompt length; {where}.",
        table(["turn-8 prompt tokens", "TTFT off / on"], rows),
    ]


def knee_section(result: dict, folder: Path) -> str:
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


def speculative_section(result: dict, folder: Path) -> str:
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


def router_section(result: dict, folder: Path) -> str:
    runs = result["runs"]
    rows = [
        [
            name,
            f"{run['hit_rate'] * 100:.1f}%" if run["hit_rate"] is not None else "–",
            f"{run['computed_prompt_tokens']:,}",
            run["turn8_cached_tokens_p50"],
            fmt(run["turn8_ttft_p50_ms"]),
            fmt(run["ttft_p50_ms"]),
            fmt(run["tokens_per_s"]),
        ]
        for name, run in runs.items()
    ]
    one = runs["one engine"]
    chosen, spread = runs["2 replicas, consistent_hash"], runs["2 replicas, round_robin"]
    ratio = result["hit_rate_vs_one_engine"] or 0
    above = (chosen["hit_rate"] or 0) - (spread["hit_rate"] or 0)
    devices = ", ".join(
        " ".join(f"{k}={v}" for k, v in d.items()) or "no binding" for d in result["replica_devices"]
    )
    return "\n\n".join(
        [
            "## 7. Several engine replicas behind vLLM's router",
            f"{result['conversations']} conversations of 8 turns at a time (section 3's: a ~440-token "
            f"system prompt, answers of {result['max_tokens']} tokens at most, temperature 0), each "
            "turn sent as the product sends it: the conversation as `X-Session-ID`, a cache salt of "
            "the conversation's own (only its own history can hit). To one engine as a one-engine "
            "`make run` starts it, "
            f"then to two replicas, each on its own share of the host ({devices}), behind "
            "vllm-router with each policy. Hit rate: cached over prompt tokens, every turn.",
            table(
                [
                    "engines",
                    "prefix-cache hit rate",
                    "prompt tokens computed",
                    "turn-8 cached tokens",
                    "turn-8 TTFT p50 ms",
                    "TTFT p50 ms",
                    "tokens/s",
                ],
                rows,
            ),  # fmt: skip
            f"Target: the product's policy (`consistent_hash`) keeps at least 0.95× one engine's hit rate — "
            f"{ratio:.2f}× ({(chosen['hit_rate'] or 0) * 100:.1f}% against "
            f"{(one['hit_rate'] or 0) * 100:.1f}%), "
            f"{verdict(ratio >= 0.95)}; and far above round-robin's ({(spread['hit_rate'] or 0) * 100:.1f}%, "
            f"{above * 100:+.1f} points: round-robin made the engines compute "
            f"{spread['computed_prompt_tokens'] / max(chosen['computed_prompt_tokens'], 1):.1f}× the prompt "
            "tokens).",
        ]
    )


def defaults_section(result: dict, folder: Path) -> str:
    def chat_cell(figures: dict) -> str:
        return f"{fmt(figures['tokens_per_s'])} tokens/s (TTFT p50 {fmt(figures['ttft_p50_ms'], 0)} ms)"

    def bulk_cell(figures: dict) -> str:
        return f"{fmt(figures['docs_per_minute'])} documents/min"

    def runs(figures: dict) -> str:
        return " / ".join(fmt(run) for run in figures.get("runs", []))

    rows = []
    for workload, cell, key, label in (
        ("chat", chat_cell, "tokens_per_s", f"chat, {result['chats']} at once"),
        ("bulk", bulk_cell, "docs_per_minute", f"bulk, {result['bulk_product']['documents']} documents"),
    ):
        raw, engine, product = (result[f"{workload}_{side}"] for side in SIDES)
        rows.append(
            [
                label,
                cell(raw),
                cell(engine),
                cell(product),
                f"{engine[key] / raw[key]:.2f}×",
                f"{result[f'{workload}_ratio']:.2f}×",
                f"{runs(raw)}; {runs(engine)}; {runs(product)}",
            ]
        )
    eager = result["engines"].get("product", {}).get("enforce_eager")
    engine_mode = "" if eager is None else (" (eager)" if eager else " (compiled)")
    return "\n\n".join(
        [
            "## 8. Against vLLM with its default flags",
            "The same host, both engines up for the whole run and taking turns, repetition after "
            "repetition (the best of each side shown, every repetition in the last column): vLLM started "
            "with the model and an address only (`python -m vllm.entrypoints.openai.api_server --model M "
            "--served-model-name N --host H --port P`: its own block size, batch limits and scheduling, "
            "graph compilation on; the KV cache size the CPU build needs from its users, "
            "`VLLM_CPU_KVCACHE_SPACE`, as the product's), and the product's engine with its settings"
            f"{engine_mode}. "
            f"Chat: {result['chats']} concurrent chats of {result['max_tokens']} tokens, straight to each "
            "engine over streaming HTTP and end to end through the product's WebSocket. Bulk: the same "
            "documents summarized (the bulk jobs' instruction and temperature) straight to each engine at "
            "the bulk workers' concurrency, and as a bulk job through a Celery worker on the product's "
            "engine.",
            table(
                [
                    "workload",
                    "vLLM, default flags",
                    "the product's engine, straight",
                    "the product",
                    "engine / vLLM",
                    "product / vLLM",
                    "repetitions",
                ],
                rows,
            ),
            f"Targets: chat tokens/s at {result['chats']} concurrent at least 1.2× — "
            f"{result['chat_ratio']:.2f}×, {verdict(result['chat_ratio'] >= 1.2)}; bulk documents per "
            "minute at least 1.5× — "
            f"{result['bulk_ratio']:.2f}×, {verdict(result['bulk_ratio'] >= 1.5)}.",
        ]
    )


def binding_section(result: dict, folder: Path) -> str:
    rows = [
        [
            f"{name} ({', '.join(f'`{k}={v}`' for k, v in run['environment'].items())})",
            fmt(run["raw"]["tokens_per_s"]),
            fmt(run["product"]["tokens_per_s"]),
            f"{fmt(run['raw']['ttft_p50_ms'], 0)} / {fmt(run['product']['ttft_p50_ms'], 0)}",
            fmt(run["product"].get("web_cpu_ms_per_token"), 3),
        ]
        for name, run in result["runs"].items()
    ]
    best = max(result["runs"], key=lambda name: result["runs"][name]["product"]["tokens_per_s"] or 0)
    return "\n\n".join(
        [
            "## 9. Where the engine's threads run (`VLLM_CPU_OMP_THREADS_BIND`)",
            f"The shipped engine started three ways, {result['chats']} chats of {result['max_tokens']} "
            "tokens straight to it and through the product: vLLM's automatic binding as it ships (one "
            "core kept off the model for its scheduler and the rest), the same keeping none (what the "
            "product's launcher sets), and not bound.",
            table(
                [
                    "binding",
                    "raw tokens/s",
                    "product tokens/s",
                    "TTFT p50 ms, raw / product",
                    "web CPU ms/token",
                ],
                rows,
            ),  # fmt: skip
            f"Most product tokens/s: {best}.",
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


def machine_section(results: list[dict]) -> str:
    machine = results[0]["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
    durations = ", ".join(
        f"{r['benchmark']} {r['duration_s'] / 60:.1f} min" + (" (quick mode)" if r.get("quick") else "")
        for r in results
    )
    return "\n".join(
        [
            "## Machine",
            "",
            f"- CPU: {machine['cpu']}, {machine['cores']} cores; memory {machine['memory_gb']} GB; "
            f"accelerator: {machine['accelerator']}",
            f"- {machine['system']}, Python {machine['python']}; {versions}",
            f"- Model: {machine['model']}; commit {machine['commit']}; run {machine['date']}",
            f"- Run time: {durations}.",
            "- A small shared VM: absolute figures move from run to run (and between hosts), the ratios "
            "(both sides measured in the same run on the same prompts) are the meaningful part.",
        ]
    )


INTRO = """# Benchmarks

`make bench` runs the benchmarks in `bench/` and rewrites this page, its charts and the JSON
results in `docs/benchmarks/`; `make bench QUICK=1` runs a reduced set (fewer requests and engine
settings). Each benchmark starts its own engine(s) with `inference.launcher` and the product with
daphne on the configured database and Redis, like `make run`, and compares against the raw engine in
the same run, on the same prompts, at temperature 0. Targets are goals reported here, not test
assertions. Run time on the machine below: about {minutes:.0f} minutes for this run.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    options = parser.parse_args(argv)
    sections, results = [], []
    builders = {
        "streaming": streaming_section,
        "batching": batching_section,
        "prefix": prefix_section,
        "knee": knee_section,
        "relay": relay_section,
        "speculative": speculative_section,
        "router": router_section,
        "defaults": defaults_section,
        "binding": binding_section,
    }
    for name, build in builders.items():
        result = load(options.results, name)
        if result is None:
            sections.append(f"## {name}\n\nNot run yet: `python -m bench.bench_{name}`.")
            continue
        results.append(result)
        sections.append(build(result, options.results))
    minutes = sum(r["duration_s"] for r in results) / 60
    parts = [INTRO.format(minutes=minutes)]
    if results:
        parts.append(machine_section(results))
    notes = ""
    if options.doc.exists() and NOTES in (previous := options.doc.read_text()):
        notes = previous[previous.index(NOTES) :]
    options.doc.write_text("\n\n".join(parts + sections) + "\n" + (f"\n{notes}" if notes else ""))
    print(f"wrote {options.doc}")


if __name__ == "__main__":
    main()

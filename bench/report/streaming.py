"""Section 1: streaming overhead, with the CPU per token, the distance to the hardware and the same
benchmark on PostgreSQL and on two web processes beside it."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.report.blocks import PRODUCT, RAW, fmt, load, table, verdict


def section(result: dict, folder: Path) -> str:
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
                "On PostgreSQL, the web process's pooled connections (chatsite/settings.py, PROCESS_ROLE)",
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
Since then the web process reuses its database connections (chatsite/settings.py, PROCESS_ROLE:
Django's PostgreSQL pool, which saves the 4.4 ms a new PostgreSQL connection costs each ORM call
under ASGI, and kept SQLite connections, about 1 ms each), and `chat_turn_store_seconds` measures
the wait for the database thread in every run (the table above). What is left is Python time in one
event loop on a CPU the engine saturates; a host with cores to spare for the web tier, or several
daphne processes, is the next thing to measure."""

"""Benchmark 1: streaming overhead of the product against the raw engine.

The same prompts at 1, 4, 16 and 32 concurrent chats, first straight to the engine
over streaming HTTP, then end to end through the product's WebSocket (daphne,
consumer, generation task, engine client), on one engine. Reports time to first token
p50/p95, time between tokens p50/p99 and output tokens/s for both, and their ratios, and the
CPU each spends per token: the web process's (daphne) beside the engine's own API server's.
Targets: at least 0.95 of the raw throughput; at most 20 ms added to the p50 TTFT.
"""

import argparse
import asyncio
import contextlib

import httpx
from asgiref.sync import sync_to_async
from django.db import connection

from bench import hardware, setup
from bench.clients import ProductChat, RawEngine, run_concurrently
from bench.processes import (
    bench_users,
    cluster_process,
    cpu_seconds,
    engine_config,
    engine_process,
    product_environment,
    product_process,
    redis_running,
)
from bench.prompts import PROMPTS, SHORT_SYSTEM_PROMPT, new_salt
from bench.results import arguments, best, engine_settings, repeats, save, summarize
from inference.topology import metric_sums

LEVELS = (1, 4, 16, 32)
MAX_TOKENS = 64


def jobs_for(level: int, quick: bool) -> list[str]:
    """Enough requests for a percentile at every level: each worker runs a few in turn."""
    count = max(level * (1 if quick else 2), 4 if quick else 8)
    return [PROMPTS[i % len(PROMPTS)] for i in range(count)]


def messages(prompt: str) -> list[dict]:
    return [{"role": "system", "content": SHORT_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]


def cpu_per_token(figures: dict, name: str, seconds: float) -> None:
    """CPU ms a process spent per output token, from its CPU seconds over the run."""
    tokens = figures["completion_tokens"]
    figures[name] = round(seconds * 1000 / tokens, 3) if tokens else None


async def raw_level(engine_url: str, level: int, jobs: list[str], api_pid: int | None = None) -> dict:
    raw = RawEngine(engine_url, max_tokens=MAX_TOKENS)
    salt = new_salt()
    api_before = cpu_seconds(api_pid) if api_pid else 0.0
    try:
        answers, wall = await run_concurrently(
            level, jobs, lambda _, p: raw.chat(messages(p), cache_salt=salt)
        )
    finally:
        await raw.close()
    figures = summarize(answers, wall)
    if api_pid:
        cpu_per_token(figures, "engine_api_cpu_ms_per_token", cpu_seconds(api_pid) - api_before)
    return figures


async def product_level(
    base_url: str, cookies: list[str], jobs: list[str], pids: tuple[list[int], int] | None = None
) -> dict:
    """`pids`: the web processes' and the engine's API server's, whose CPU is counted."""
    chats = [ProductChat(base_url, cookie) for cookie in cookies]
    for chat in chats:
        await chat.__aenter__()
    before = await web_tier_ttft(base_url)
    cpu_before = processes_cpu(pids)
    try:
        answers, wall = await run_concurrently(
            len(chats), jobs, lambda i, p: chats[i].ask(p, new_conversation=True)
        )
    finally:
        cpu_after = processes_cpu(pids)
        for chat in chats:
            await chat.__aexit__(None, None, None)
    after = await web_tier_ttft(base_url)
    figures = summarize(answers, wall)
    if pids:
        cpu_per_token(figures, "web_cpu_ms_per_token", cpu_after[0] - cpu_before[0])
        cpu_per_token(figures, "engine_api_cpu_ms_per_token", cpu_after[1] - cpu_before[1])
    # The product's own /metrics splits the overhead: the web tier's TTFT starts when the
    # answer's task starts (after the turn is stored), the client's when it sends the frame.
    figures["web_tier_ttft_mean_ms"] = mean_ms(
        *(m["chat_time_to_first_token_seconds"] for m in (before, after))
    )
    figures["turn_store_mean_ms"] = mean_ms(*(m["chat_turn_store_seconds"] for m in (before, after)))
    figures["database_connections"] = await sync_to_async(database_connections)()
    return figures


def raw_and_product(engine_url: str, api_pid: int | None, level: int, jobs: list[str]) -> tuple[dict, dict]:
    """`level` chats straight to the engine, then through the product started on it (both
    paths warmed first): (raw figures, product figures)."""
    environment = product_environment(system_prompt=SHORT_SYSTEM_PROMPT, max_tokens=MAX_TOKENS)
    with product_process(engine_url, **environment) as (base_url, daphne):
        asyncio.run(raw_level(engine_url, 1, PROMPTS[:1]))
        with bench_users(1) as cookies:
            asyncio.run(product_level(base_url, cookies, PROMPTS[:1]))
        raw = asyncio.run(raw_level(engine_url, level, jobs, api_pid))
        pids = ([daphne.pid], api_pid) if api_pid else None
        with bench_users(level) as cookies:
            product = asyncio.run(product_level(base_url, cookies, jobs, pids))
    return raw, product


HISTOGRAMS = ("chat_time_to_first_token_seconds", "chat_turn_store_seconds")


async def web_tier_ttft(base_url: str) -> dict[str, tuple[float, float]]:
    """Sum and count of the product's histograms of the web tier's time to first token and of
    storing a turn."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(base_url + "/metrics", timeout=10)).text
    sums = metric_sums(text, [f"{name}_{part}" for name in HISTOGRAMS for part in ("sum", "count")])
    return {name: (sums[f"{name}_sum"], sums[f"{name}_count"]) for name in HISTOGRAMS}


def mean_ms(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    count = after[1] - before[1]
    return round((after[0] - before[0]) / count * 1000, 1) if count else None


def database_connections() -> int | None:
    """Connections open to the product's PostgreSQL database (the benchmark's own included)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def compare(raw: dict, product: dict) -> dict:
    return {
        "throughput_ratio": round(product["tokens_per_s"] / raw["tokens_per_s"], 3),
        "ttft_p50_added_ms": round(product["ttft_p50_ms"] - raw["ttft_p50_ms"], 1),
        "ttft_p95_added_ms": round(product["ttft_p95_ms"] - raw["ttft_p95_ms"], 1),
        "gap_p50_added_ms": round(product["gap_p50_ms"] - raw["gap_p50_ms"], 1),
        # The web tier's CPU per token against what the engine's own API server spends per token.
        "web_cpu_per_token_vs_engine_api": round(
            product["web_cpu_ms_per_token"] / raw["engine_api_cpu_ms_per_token"], 2
        )
        if product.get("web_cpu_ms_per_token") and raw.get("engine_api_cpu_ms_per_token")
        else None,
    }


def processes_cpu(pids: tuple[list[int], int] | None) -> list[float]:
    """CPU seconds so far: the web processes' together, then the engine API server's."""
    if pids is None:
        return []
    web, api = pids
    return [sum(cpu_seconds(pid) for pid in web), cpu_seconds(api)]


def parser() -> argparse.ArgumentParser:
    cli = arguments(__doc__.splitlines()[0], levels=LEVELS)
    cli.add_argument(
        "--web-processes", type=int, default=1, help="above 1: that many daphne processes behind nginx"
    )
    return cli


@contextlib.contextmanager
def served_product(engine_url: str, web_processes: int, **environment: str):
    """The product as (base URL, web processes' pids): one daphne, or several behind nginx."""
    if web_processes == 1:
        with product_process(engine_url, **environment) as (base_url, daphne):
            yield base_url, [daphne.pid]
    else:
        with cluster_process(engine_url, web_processes, **environment) as served:
            yield served


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    config = engine_config()
    # Measured before anything else runs: the host's own ceilings (bench.hardware).
    ceilings = hardware.ceilings(config.model)
    levels = []
    with redis_running(), engine_process(config, "streaming-engine") as (engine_url, api_pid):
        environment = product_environment(system_prompt=SHORT_SYSTEM_PROMPT, max_tokens=MAX_TOKENS)
        with served_product(engine_url, options.web_processes, **environment) as (base_url, web_pids):
            # Warm both paths once (first-request costs are not what is measured).
            asyncio.run(raw_level(engine_url, 1, PROMPTS[:1]))
            with bench_users(1) as cookies:
                asyncio.run(product_level(base_url, cookies, PROMPTS[:1]))
            for level in options.levels:
                jobs = jobs_for(level, options.quick)
                raws, products = [], []
                # Alternating repetitions, so a burst of load from elsewhere hits one of each at most.
                for _ in range(repeats(options)):
                    raws.append(asyncio.run(raw_level(engine_url, level, jobs, api_pid)))
                    with bench_users(level) as cookies:
                        pids = (web_pids, api_pid)
                        products.append(asyncio.run(product_level(base_url, cookies, jobs, pids)))
                raw, product = best(raws), best(products)
                row = {"concurrency": level, "raw": raw, "product": product, **compare(raw, product)}
                row["hardware"] = hardware.shares(ceilings, product["tokens_per_s"], level)
                print(row, flush=True)
                levels.append(row)
    result = {
        "benchmark": "streaming",
        "quick": options.quick,
        "max_tokens": MAX_TOKENS,
        "engine": engine_settings(config),
        "hardware": ceilings,
        "database": connection.vendor,
        "web_processes": options.web_processes,
        "levels": levels,
    }
    # On PostgreSQL, or with several web processes, beside the plain run, not over it: the report
    # sets them side by side.
    name = "streaming" if connection.vendor == "sqlite" else f"streaming_{connection.vendor}"
    save(options.output, name + (f"_web{options.web_processes}" if options.web_processes > 1 else ""), result)
    return result


if __name__ == "__main__":
    setup()
    main()

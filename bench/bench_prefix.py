"""Benchmark 3: prefix caching over 8-turn conversations, on and off.

The same conversations (a ~440-token system prompt, 8 user turns, answers up to 96
tokens, temperature 0) run one turn at a time through the product and straight to the
engine, first on an engine with prefix caching, then on one started with
--no-enable-prefix-caching (INFERENCE_PREFIX_CACHING=false). Reports the time to first
token and the cached prompt tokens of every turn. Then, straight to each engine, the same
conversation with the system prompt repeated 1 to 4 times: the turn-8 ratio by history length.
Target: at turn 8, at least 10 times lower time to first token with caching, and the history
length where the ratio crosses 10x.
"""

import argparse
import asyncio

from bench import setup
from bench.clients import ProductChat, RawEngine
from bench.processes import (
    bench_users,
    engine_config,
    engine_running,
    product_environment,
    product_running,
    redis_running,
)
from bench.prompts import LONG_SYSTEM_PROMPT, new_salt
from bench.results import arguments, engine_settings, percentile, save

MAX_TOKENS = 96
TURNS = [
    "I want to plan a small vegetable garden. Where should I start?",
    "Which vegetables are easiest for a beginner?",
    "How often should I water them?",
    "What should I do about slugs?",
    "Can I grow tomatoes in pots?",
    "How do I know when the tomatoes are ripe?",
    "What can I plant in autumn?",
    "Summarize the whole plan in five short points.",
]
CONVERSATION_OPENERS = [
    "",
    "I live in a rainy place. ",
    "I have a small balcony only. ",
    "I am new to this. ",
]


def conversation(index: int) -> list[str]:
    """The user turns of conversation `index`: same shape, a different first turn."""
    return [CONVERSATION_OPENERS[index % len(CONVERSATION_OPENERS)] + TURNS[0], *TURNS[1:]]


# How many times the system prompt is repeated, for the history lengths of the ratio by length.
SCALES = (1, 2, 3, 4)
QUICK_SCALES = (1, 3)


async def raw_conversation(engine_url: str, turns: list[str], system: str = LONG_SYSTEM_PROMPT) -> list[dict]:
    raw = RawEngine(engine_url, max_tokens=MAX_TOKENS)
    history = [{"role": "system", "content": system}]
    salt = new_salt()
    rows = []
    try:
        for content in turns:
            history.append({"role": "user", "content": content})
            answer = await raw.chat(history, cache_salt=salt)
            history.append({"role": "assistant", "content": answer.text})
            rows.append(_row(answer))
    finally:
        await raw.close()
    return rows


async def product_conversation(base_url: str, cookie: str, turns: list[str]) -> list[dict]:
    async with ProductChat(base_url, cookie) as chat:
        return [_row(await chat.ask(content)) for content in turns]


def _row(answer) -> dict:
    return {
        "ttft_ms": round(answer.ttft * 1000, 1),
        "prompt_tokens": answer.prompt_tokens,
        "cached_tokens": answer.cached_tokens,
        "completion_tokens": answer.completion_tokens,
    }


def by_turn(conversations: list[list[dict]]) -> list[dict]:
    """Median over conversations of each turn's figures."""
    turns = []
    for index in range(len(conversations[0])):
        rows = [c[index] for c in conversations]
        turns.append(
            {
                "turn": index + 1,
                "ttft_ms": round(percentile([r["ttft_ms"] for r in rows], 50), 1),
                "prompt_tokens": round(percentile([r["prompt_tokens"] or 0 for r in rows], 50)),
                "cached_tokens": round(percentile([r["cached_tokens"] or 0 for r in rows], 50)),
            }
        )
    return turns


def run_mode(prefix_caching: bool, count: int, scales: tuple[int, ...]) -> dict:
    config = engine_config(prefix_caching=prefix_caching)
    name = "on" if prefix_caching else "off"
    with engine_running(config, f"prefix-{name}-engine") as engine_url:
        environment = product_environment(system_prompt=LONG_SYSTEM_PROMPT, max_tokens=MAX_TOKENS)
        with product_running(engine_url, **environment) as base_url:
            product, raw = [], []
            with bench_users(count + 1) as (warm_up, *cookies):
                # First requests pay for imports, connections and compilation: not what is measured.
                asyncio.run(product_conversation(base_url, warm_up, ["Hello."]))
                asyncio.run(raw_conversation(engine_url, ["Hello."]))
                for index, cookie in enumerate(cookies):
                    product.append(asyncio.run(product_conversation(base_url, cookie, conversation(index))))
                    raw.append(asyncio.run(raw_conversation(engine_url, conversation(index))))
        # Longer histories: the same turns after a system prompt repeated `scale` times.
        lengths = []
        for scale in scales:
            system = "\n\n".join([LONG_SYSTEM_PROMPT] * scale)
            last = asyncio.run(raw_conversation(engine_url, conversation(0), system))[-1]
            lengths.append({"scale": scale, **{k: last[k] for k in ("prompt_tokens", "ttft_ms")}})
    return {
        "engine": engine_settings(config),
        "product": by_turn(product),
        "raw": by_turn(raw),
        "by_length": lengths,
    }


def by_length(on: list[dict], off: list[dict]) -> dict:
    """The turn-8 ratio at each history length, and the length where it crosses 10x (interpolated
    between the two lengths around it; None if it does not within the lengths measured)."""
    points = [
        {"prompt_tokens": a["prompt_tokens"], "ratio": round(b["ttft_ms"] / a["ttft_ms"], 2)}
        for a, b in zip(on, off, strict=True)
    ]
    crossing = None
    for low, high in zip(points, points[1:], strict=False):
        if low["ratio"] < 10 <= high["ratio"]:
            share = (10 - low["ratio"]) / (high["ratio"] - low["ratio"])
            crossing = round(low["prompt_tokens"] + share * (high["prompt_tokens"] - low["prompt_tokens"]))
    if points and points[0]["ratio"] >= 10:
        crossing = points[0]["prompt_tokens"]
    return {"points": points, "crosses_10x_at_prompt_tokens": crossing}


def parser() -> argparse.ArgumentParser:
    cli = arguments(__doc__.splitlines()[0])
    cli.add_argument("--conversations", type=int, default=None, help="per mode (default 2; quick: 1)")
    return cli


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    count = options.conversations or (1 if options.quick else 2)
    scales = QUICK_SCALES if options.quick else SCALES
    with redis_running():
        on = run_mode(True, count, scales)
        off = run_mode(False, count, scales)

    def speedup(path: str) -> float:
        return round(off[path][-1]["ttft_ms"] / on[path][-1]["ttft_ms"], 2)

    result = {
        "benchmark": "prefix",
        "quick": options.quick,
        "conversations": count,
        "max_tokens": MAX_TOKENS,
        "on": on,
        "off": off,
        "turn8_speedup_product": speedup("product"),
        "turn8_speedup_raw": speedup("raw"),
        "turn8_by_length": by_length(on["by_length"], off["by_length"]),
    }
    print({k: result[k] for k in ("turn8_speedup_product", "turn8_speedup_raw")}, flush=True)
    save(options.output, "prefix", result)
    return result


if __name__ == "__main__":
    setup()
    main()

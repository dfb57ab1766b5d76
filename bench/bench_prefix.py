"""Benchmark 3: prefix caching over 8-turn conversations, on and off.

The same conversations (a ~440-token system prompt, 8 user turns, answers up to 96
tokens, temperature 0) run one turn at a time through the product and straight to the
engine, first on an engine with prefix caching, then on one started with
--no-enable-prefix-caching (INFERENCE_PREFIX_CACHING=false). Reports the time to first
token and the cached prompt tokens of every turn.
Target: at turn 8, at least 10 times lower time to first token with caching.
"""

import argparse
import asyncio

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


async def raw_conversation(engine_url: str, turns: list[str]) -> list[dict]:
    raw = RawEngine(engine_url, max_tokens=MAX_TOKENS)
    history = [{"role": "system", "content": LONG_SYSTEM_PROMPT}]
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


def run_mode(prefix_caching: bool, count: int) -> dict:
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
    return {"engine": engine_settings(config), "product": by_turn(product), "raw": by_turn(raw)}


def parser() -> argparse.ArgumentParser:
    cli = arguments(__doc__.splitlines()[0])
    cli.add_argument("--conversations", type=int, default=None, help="per mode (default 2; quick: 1)")
    return cli


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    count = options.conversations or (1 if options.quick else 2)
    with redis_running():
        on = run_mode(True, count)
        off = run_mode(False, count)

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
    }
    print({k: result[k] for k in ("turn8_speedup_product", "turn8_speedup_raw")}, flush=True)
    save(options.output, "prefix", result)
    return result


if __name__ == "__main__":
    main()

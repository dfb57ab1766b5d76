"""Benchmark 4: the knee of the curve, to choose the engine defaults.

One setting at a time around the shipped defaults: the most sequences in a batch
(max_num_seqs, up to 256), the KV cache block size, and the token budget of one engine
step (max_num_batched_tokens). Each point starts its own engine and offers the same
chat-like load at several levels (32, 64, 128 and 256 concurrent requests): requests
sharing a ~440-token system prompt (served by the prefix cache after the first, as chat
history is) with a different question each. Reports output tokens/s and latency (TTFT
p50/p95, time between tokens p50) at every level: the throughput/TTFT frontier.

The rule that picks each default (written here so the choice is reproducible), applied at
the highest level offered, where the batch limits bind: the values within KNEE_SHARE of the
best throughput are good enough; the shipped value stays if it is among them (a difference
within noise never moves a default), else the smallest of them wins: beyond the knee a
bigger batch or budget buys little throughput and costs latency, and a smaller block gives
finer prefix-cache hits. Admission (CHAT_MAX_ACTIVE_TOTAL) follows the chosen max_num_seqs.
The raw engine is what is measured here; benchmark 1 gives the product's overhead over it.
"""

import argparse
import asyncio
from dataclasses import replace

from django.conf import settings

from bench import setup
from bench.clients import RawEngine, run_concurrently
from bench.processes import engine_config, engine_running
from bench.prompts import LONG_SYSTEM_PROMPT, PROMPTS, new_salt
from bench.results import arguments, best, repeats, save, summarize

MAX_TOKENS = 64
LOADS = (32, 64, 128, 256)
QUICK_LOADS = (32, 128)
KNEE_SHARE = 0.9
FULL = {
    "max_num_seqs": [16, 32, 64, 128, 256],
    "block_size": [32, 128],
    "max_num_batched_tokens": [1024, 2048, 4096, 8192],
}
QUICK = {"max_num_seqs": [32, 64, 128, 256], "max_num_batched_tokens": [2048, 4096]}
# Each point is an engine start (about a minute on a 2-core host) plus every load, twice.


def defaults() -> dict:
    return {
        "max_num_seqs": settings.INFERENCE_MAX_NUM_SEQS,
        "block_size": settings.INFERENCE_BLOCK_SIZE,
        "max_num_batched_tokens": settings.INFERENCE_MAX_NUM_BATCHED_TOKENS,
    }


def points(grid: dict) -> list[dict]:
    """The defaults, then each setting varied alone, without repeats."""
    base = defaults()
    seen, out = set(), []
    for point in [base] + [{**base, name: v} for name, values in grid.items() for v in values]:
        key = tuple(sorted(point.items()))
        if key not in seen:
            seen.add(key)
            out.append(point)
    return out


async def offer_load(engine_url: str, requests: int) -> dict:
    raw = RawEngine(engine_url, max_tokens=MAX_TOKENS)
    jobs = [PROMPTS[i % len(PROMPTS)] for i in range(requests)]
    salt = new_salt()

    def history(prompt: str) -> list[dict]:
        return [{"role": "system", "content": LONG_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]

    async def one(_, prompt: str):
        return await raw.chat(history(prompt), cache_salt=salt)

    try:
        # Warms the engine and puts the shared system prompt in its prefix cache.
        await raw.chat(history("Hello"), cache_salt=salt)
        answers, wall = await run_concurrently(requests, jobs, one)
    finally:
        await raw.close()
    return summarize(answers, wall)


def choose(rows: list[dict], name: str) -> int:
    """Apply the rules of the module docstring to the rows that vary `name` (defaults included),
    at the highest load among them."""
    base = defaults()
    top_load = max(r.get("load", 0) for r in rows)
    candidates = [
        r for r in rows if r.get("load", 0) == top_load and all(r[k] == base[k] for k in base if k != name)
    ]
    top = max(r["tokens_per_s"] for r in candidates)
    good = {r[name] for r in candidates if r["tokens_per_s"] >= KNEE_SHARE * top}
    return base[name] if base[name] in good else min(good)


def parser() -> argparse.ArgumentParser:
    cli = arguments(__doc__.splitlines()[0])
    cli.add_argument("--loads", type=int, nargs="+", default=None, help="concurrent requests offered")
    return cli


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    grid = QUICK if options.quick else FULL
    loads = options.loads or list(QUICK_LOADS if options.quick else LOADS)
    rows = []
    for point in points(grid):
        # Prompts are about 480 tokens; a context of 1024 lets every budget hold a whole prompt.
        config = replace(engine_config(), max_model_len=1024, **point)
        with engine_running(config, "knee-engine") as engine_url:
            for load in loads:
                runs = [asyncio.run(offer_load(engine_url, load)) for _ in range(repeats(options))]
                row = {**point, "load": load, **best(runs)}
                print(row, flush=True)
                rows.append(row)
    chosen = {name: choose(rows, name) for name in grid}
    result = {
        "benchmark": "knee",
        "quick": options.quick,
        "loads": loads,
        "max_tokens": MAX_TOKENS,
        "knee_share": KNEE_SHARE,
        "shipped": defaults(),
        "chosen": chosen,
        "rows": rows,
    }
    print({"shipped": defaults(), "chosen": chosen}, flush=True)
    save(options.output, "knee", result)
    return result


if __name__ == "__main__":
    setup()
    main()

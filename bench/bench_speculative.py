"""Benchmark 6: n-gram speculative decoding, on and off, for chat and for bulk summaries.

vLLM's n-gram (prompt-lookup) speculation drafts the next tokens by finding the last few
generated tokens in the prompt and copying what followed them there; the model checks the
drafts in one step. Answers that copy from their prompt (summaries, edits, code) gain; free
prose gains little, and at a large batch checking drafts costs more than it saves. Three
engines, one after the other, with the shipped settings and speculation off, ngram at every
batch size, and ngram only while at most SMALL_BATCH sequences run (vLLM's dynamic
speculation); on each, the same requests straight to the engine at temperature 0: chat (a long
story from a short prompt) and bulk (the summary of a ~600-token document), at 1, 8, 32 and 64
concurrent; and the bulk summaries at the bulk jobs' own temperature (BULK_TEMPERATURE), where
the engine samples and checks drafts by sampling too, at the bulk workers' concurrency only.
Reports output tokens/s of each, the ratios to off, and whether the texts are the same with and
without speculation.
Targets: single-chat tokens/s with speculation at least 1.3× without; the default for each
workload follows the numbers (docs/benchmarks.md).
"""

import argparse
import asyncio
import random

from django.conf import settings

from bench import setup
from bench.bench_bulk_chat import document
from bench.clients import RawEngine, run_concurrently
from bench.processes import engine_config, engine_running
from bench.prompts import PROMPTS, SHORT_SYSTEM_PROMPT, new_salt
from bench.results import arguments, best, engine_settings, repeats, save, summarize
from jobs.summarize import PRESETS

LEVELS = (1, 8, 32, 64)
MAX_TOKENS = 128
SENTENCES = 24  # about 600 tokens a document
SMALL_BATCH = 8  # BULK_CONCURRENCY: a bulk job running alone speculates
# (name, engine settings): the first is what the others are compared with.
MODES = (
    ("off", {"speculative": "off"}),
    ("ngram", {"speculative": "ngram"}),
    (f"ngram to {SMALL_BATCH}", {"speculative": "ngram", "speculative_max_batch": SMALL_BATCH}),
)


def workloads(count: int) -> dict[str, list[list[dict]]]:
    """The requests of each workload, as message lists."""
    chat = [
        [
            {"role": "system", "content": SHORT_SYSTEM_PROMPT},
            {"role": "user", "content": PROMPTS[i % len(PROMPTS)]},
        ]
        for i in range(count)
    ]
    rng = random.Random(7)
    bulk = [
        [
            {"role": "system", "content": PRESETS["paragraph"]},
            {"role": "user", "content": document(rng.randint(0, 10**6), SENTENCES)},
        ]
        for _ in range(count)
    ]
    # The same summaries as bulk jobs send them: sampled at BULK_TEMPERATURE.
    return {"chat": chat, "bulk": bulk, BULK_SAMPLED: bulk}


BULK_SAMPLED = "bulk, sampled"


async def level(
    engine_url: str, concurrency: int, requests: list[list[dict]], temperature: float = 0.0
) -> tuple[dict, list[str]]:
    raw = RawEngine(engine_url, max_tokens=MAX_TOKENS, temperature=temperature)
    # A fresh salt: nothing of an earlier run is in the prefix cache.
    salt = new_salt()
    try:
        answers, wall = await run_concurrently(
            concurrency, list(enumerate(requests)), lambda _, job: numbered(raw, job, salt)
        )
    finally:
        await raw.close()
    answers.sort(key=lambda pair: pair[0])
    figures = summarize([answer for _, answer in answers], wall)
    return figures, [answer.text for _, answer in answers]


async def numbered(raw: RawEngine, job: tuple[int, list[dict]], salt: str):
    index, messages = job
    return index, await raw.chat(messages, cache_salt=salt)


def run_engine(mode: str, overrides: dict, levels: list[int], options: argparse.Namespace) -> dict:
    """Every workload at every level on one engine: {workload: {level: (figures, texts)}}."""
    config = engine_config(**overrides)
    results: dict = {"engine": engine_settings(config)}
    with engine_running(config, f"speculative-{mode.replace(' ', '-')}-engine") as url:
        asyncio.run(level(url, 1, workloads(1)["chat"]))  # warm
        for concurrency in levels:
            count = max(concurrency * (1 if options.quick else 2), 4 if options.quick else 8)
            for name, requests in workloads(count).items():
                if name == BULK_SAMPLED and concurrency != SMALL_BATCH:
                    continue  # sampled drafts are slow to check: the bulk workers' concurrency only
                temperature = settings.BULK_TEMPERATURE if name == BULK_SAMPLED else 0.0
                runs = [
                    asyncio.run(level(url, concurrency, requests, temperature))
                    for _ in range(repeats(options))
                ]
                figures = best([figures for figures, _ in runs])
                texts = runs[0][1]
                results.setdefault(name, {})[concurrency] = (figures, texts)
                print(mode, name, concurrency, figures["tokens_per_s"], flush=True)
        # How far the engine repeats itself: the first level's chats once more, texts compared
        # (a difference with speculation means something only where there is none without).
        first = levels[0]
        again = asyncio.run(level(url, first, workloads(len(results["chat"][first][1]))["chat"]))[1]
        results["repeat_same"] = sum(a == b for a, b in zip(results["chat"][first][1], again, strict=True))
    return results


def parser() -> argparse.ArgumentParser:
    return arguments(__doc__.splitlines()[0], levels=LEVELS)


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    levels = [lvl for lvl in options.levels if not options.quick or lvl <= 32]
    runs = {mode: run_engine(mode, overrides, levels, options) for mode, overrides in MODES}
    base = MODES[0][0]
    rows = []
    for name in ("chat", "bulk", BULK_SAMPLED):
        for concurrency in levels:
            if concurrency not in runs[base][name]:
                continue
            plain, plain_texts = runs[base][name][concurrency]
            row = {"workload": name, "concurrency": concurrency, "requests": len(plain_texts)}
            row["modes"] = {mode: runs[mode][name][concurrency][0] for mode in runs}
            row["speedup"] = {
                mode: round(figures["tokens_per_s"] / plain["tokens_per_s"], 3)
                for mode, figures in row["modes"].items()
            }
            row["same_text"] = {
                mode: sum(a == b for a, b in zip(plain_texts, runs[mode][name][concurrency][1], strict=True))
                for mode in runs
            }
            print(name, concurrency, row["speedup"], row["same_text"], flush=True)
            rows.append(row)
    result = {
        "benchmark": "speculative",
        "quick": options.quick,
        "max_tokens": MAX_TOKENS,
        "engines": {mode: runs[mode]["engine"] for mode in runs},
        # Chats of the first level, run twice on each engine: how many texts came out the same.
        "repeat_same": {mode: runs[mode]["repeat_same"] for mode in runs},
        "rows": rows,
    }
    save(options.output, "speculative", result)
    return result


if __name__ == "__main__":
    setup()
    main()

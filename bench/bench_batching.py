"""Benchmark 2: continuous batching against one request at a time.

The product serves 32 concurrent chats (and the raw engine the same 32 requests, for
reference); then a plain transformers `generate` loop serves the same requests (the first 12) one
after another, with the same model checkpoint (settings.INFERENCE_MODEL), greedy decoding and
the same token budget. The engine is stopped first, so the loop does not share the CPU with it.
Target: the product at 32 chats reaches at least 14 times the loop's tokens/s.
"""

import argparse
import asyncio
import os
import time

from django.conf import settings

from bench import setup
from bench.bench_streaming import MAX_TOKENS, messages, product_level, raw_level
from bench.processes import (
    bench_users,
    engine_config,
    engine_running,
    product_environment,
    product_running,
    redis_running,
)
from bench.prompts import PROMPTS, SHORT_SYSTEM_PROMPT
from bench.results import arguments, best, engine_settings, repeats, save

CONCURRENCY = 32


def _generate(model, tokenizer, prompt: str, max_new_tokens: int) -> int:
    import torch

    inputs = tokenizer.apply_chat_template(
        messages(prompt), add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return int(output.shape[1] - inputs["input_ids"].shape[1])


def fastest_loop_setup(tokenizer, prompt: str) -> tuple[object, str, int]:
    """The loop's best dtype and thread count here, by a short probe of each: the baseline
    gets every advantage (on a busy 2-core host one thread beats two, and float32 beats bf16)."""
    import torch
    from transformers import AutoModelForCausalLM

    best = None
    for dtype in (torch.bfloat16, torch.float32):
        model = AutoModelForCausalLM.from_pretrained(settings.INFERENCE_MODEL, dtype=dtype).eval()
        for threads in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(threads)
            _generate(model, tokenizer, prompt, 4)
            started = time.perf_counter()
            rate = _generate(model, tokenizer, prompt, 16) / (time.perf_counter() - started)
            if best is None or rate > best[0]:
                best = (rate, model, str(dtype).removeprefix("torch."), threads)
    _, model, dtype_name, threads = best
    torch.set_num_threads(threads)
    return model, dtype_name, threads


def generate_loop(prompts: list[str]) -> dict:
    """transformers `generate`, one request after another, as a plain server loop would."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(settings.INFERENCE_MODEL)
    model, dtype, threads = fastest_loop_setup(tokenizer, prompts[0])
    tokens = 0
    latencies = []
    started = time.perf_counter()
    for prompt in prompts:
        request_started = time.perf_counter()
        tokens += _generate(model, tokenizer, prompt, MAX_TOKENS)
        # Without streaming the whole answer arrives at once: its latency is the time to first token.
        latencies.append(time.perf_counter() - request_started)
    wall = time.perf_counter() - started
    return {
        "requests": len(prompts),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "latency_p50_ms": round(sorted(latencies)[len(latencies) // 2] * 1000, 1),
        "threads": threads,
        "dtype": dtype,
    }


def parser() -> argparse.ArgumentParser:
    cli = arguments(__doc__.splitlines()[0])
    cli.add_argument(
        "--loop-requests",
        type=int,
        default=None,
        help="requests for the generate loop (default 12; quick: 4)",
    )
    return cli


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    jobs = PROMPTS[:CONCURRENCY]
    config = engine_config()
    with redis_running(), engine_running(config, "batching-engine") as engine_url:
        environment = product_environment(system_prompt=SHORT_SYSTEM_PROMPT, max_tokens=MAX_TOKENS)
        with product_running(engine_url, **environment) as base_url:
            asyncio.run(raw_level(engine_url, 1, PROMPTS[:1]))
            raws, products = [], []
            for _ in range(repeats(options)):
                raws.append(asyncio.run(raw_level(engine_url, CONCURRENCY, jobs)))
                with bench_users(CONCURRENCY) as cookies:
                    products.append(asyncio.run(product_level(base_url, cookies, jobs)))
            raw, product = best(raws), best(products)
    # Its rate settles within a few requests; all 32 would take minutes more on a CPU host.
    loop_requests = options.loop_requests or (4 if options.quick else 12)
    loop = generate_loop(jobs[:loop_requests])
    result = {
        "benchmark": "batching",
        "quick": options.quick,
        "max_tokens": MAX_TOKENS,
        "concurrency": CONCURRENCY,
        "engine": engine_settings(config),
        "product": product,
        "raw": raw,
        "generate_loop": loop,
        "product_speedup": round(product["tokens_per_s"] / loop["tokens_per_s"], 2),
        "raw_speedup": round(raw["tokens_per_s"] / loop["tokens_per_s"], 2),
    }
    print({k: result[k] for k in ("product_speedup", "raw_speedup")}, flush=True)
    save(options.output, "batching", result)
    return result


if __name__ == "__main__":
    setup()
    main()

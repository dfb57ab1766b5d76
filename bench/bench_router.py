"""Benchmark 7: two engine replicas behind vLLM's router against one engine.

The same 8-turn conversations (benchmark 3's: a ~440-token system prompt, answers up to 96
tokens, temperature 0), several at a time, each turn sent as the product sends it (the
conversation as X-Session-ID, a cache salt of the conversation's own, so only its own history
can hit the cache), to:
- one engine as a one-engine `make run` starts it (its threads on every core);
- two replicas, each on its own share of the cores (`make run INFERENCE_REPLICAS=2`), behind
  vllm-router with `consistent_hash` (the product's default), `cache_aware`, and `round_robin`.
Reports the prefix-cache hit rate (cached over prompt tokens, every turn), the prompt tokens
the engines had to compute, the time to first token at turn 8 and the output tokens/s of each.
Target: the product's router policy keeps a hit rate of at least 0.95x one engine's, far above
round-robin's.
"""

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace

from bench import setup
from bench.bench_prefix import MAX_TOKENS, conversation
from bench.clients import RawEngine
from bench.processes import engine_config, engine_process, log_file
from bench.prompts import LONG_SYSTEM_PROMPT, new_salt
from bench.results import arguments, engine_settings, percentile, save
from enginehost.router import RouterConfig
from harness.processes import free_port
from harness.supervision import answers
from harness.waiting import wait_for

POLICIES = ["consistent_hash", "cache_aware", "round_robin"]


async def one_conversation(url: str, index: int, run: str) -> list[dict]:
    raw = RawEngine(url, max_tokens=MAX_TOKENS)
    history = [{"role": "system", "content": LONG_SYSTEM_PROMPT}]
    salt, key = new_salt(), f"conversation-{run}-{index}"
    rows = []
    try:
        for content in conversation(index):
            history.append({"role": "user", "content": content})
            answer = await raw.chat(history, cache_salt=salt, headers={"X-Session-ID": key})
            history.append({"role": "assistant", "content": answer.text})
            rows.append(
                {
                    "ttft_ms": answer.ttft * 1000,
                    "prompt_tokens": answer.prompt_tokens or 0,
                    "cached_tokens": answer.cached_tokens or 0,
                    "completion_tokens": answer.completion_tokens or 0,
                }
            )
    finally:
        await raw.close()
    return rows


async def conversations(url: str, count: int, run: str) -> tuple[list[list[dict]], float]:
    started = time.monotonic()
    results = await asyncio.gather(*(one_conversation(url, index, run) for index in range(count)))
    return list(results), time.monotonic() - started


def measure(url: str, count: int, run: str) -> dict:
    # One conversation first: imports, connections and the first requests' compilation are not measured.
    asyncio.run(conversations(url, 1, f"{run}-warm-up"))
    results, wall = asyncio.run(conversations(url, count, run))
    rows = [row for conv in results for row in conv]
    prompt = sum(row["prompt_tokens"] for row in rows)
    cached = sum(row["cached_tokens"] for row in rows)
    return {
        "hit_rate": round(cached / prompt, 4) if prompt else None,
        "prompt_tokens": prompt,
        # What the engines had to prefill: the prompt tokens no cache served.
        "computed_prompt_tokens": prompt - cached,
        "turn8_ttft_p50_ms": round(percentile([conv[-1]["ttft_ms"] for conv in results], 50), 1),
        "turn8_cached_tokens_p50": round(percentile([conv[-1]["cached_tokens"] for conv in results], 50)),
        "ttft_p50_ms": round(percentile([row["ttft_ms"] for row in rows], 50), 1),
        "tokens_per_s": round(sum(row["completion_tokens"] for row in rows) / wall, 1),
        "wall_s": round(wall, 1),
    }


@contextlib.contextmanager
def router_running(worker_urls: list[str], policy: str) -> Iterator[str]:
    url = f"http://127.0.0.1:{free_port()}"
    config = RouterConfig(url=url, worker_urls=tuple(worker_urls), policy=policy, metrics_port=free_port())
    log = log_file(f"router-{policy}")
    process = subprocess.Popen(
        config.command(), env=config.environment(), stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_for(lambda: answers(url + "/health") or process.poll() is not None, 120, "the router")
        if process.poll() is not None:
            raise SystemExit(f"the router exited; see {log.name}")
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def parser():
    return arguments(__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    count = 4 if options.quick else 8
    single = engine_config()
    with engine_process(single, "router-single-engine") as (url, _):
        runs = {"one engine": measure(url, count, "single")}
    replicas = [replace(engine_config(), replica=index, replicas=2) for index in range(2)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(engine_process(c, f"router-replica-{c.replica}"))[0] for c in replicas]
        for policy in POLICIES:
            with router_running(urls, policy) as url:
                runs[f"2 replicas, {policy}"] = measure(url, count, policy)
    one = runs["one engine"]["hit_rate"] or 0
    chosen = runs["2 replicas, consistent_hash"]["hit_rate"] or 0
    result = {
        "benchmark": "router",
        "quick": options.quick,
        "conversations": count,
        "max_tokens": MAX_TOKENS,
        "engine": engine_settings(single),
        "replica_devices": [c.replica_devices() for c in replicas],
        "runs": runs,
        "hit_rate_vs_one_engine": round(chosen / one, 3) if one else None,
    }
    print({name: (run["hit_rate"], run["turn8_ttft_p50_ms"]) for name, run in runs.items()}, flush=True)
    save(options.output, "router", result)
    return result


if __name__ == "__main__":
    setup()
    main()

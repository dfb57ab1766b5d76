"""Benchmark 8: the product against vLLM as its users run it, with its default flags.

On the same host: vLLM started with the model and an address and nothing else
(`python -m vllm.entrypoints.openai.api_server --model M`: its own block size, batch limits and
scheduling, graph compilation on; the KV cache's size, which the CPU build needs from its users,
as the product's), and the product's engine with its settings. Both engines are up for the whole
run and take turns, repetition after repetition (the best of each side kept), so a host whose
speed drifts during the run moves both sides alike. Two workloads, the same requests on every side:
- chat: 64 concurrent chats of 64 output tokens (benchmark 1's prompts, temperature 0), straight
  to each engine over streaming HTTP, and end to end through the product's WebSocket;
- bulk: the same documents summarized (the bulk jobs' paragraph summary and temperature), straight
  to each engine at the bulk workers' concurrency, and as a bulk job through a real Celery worker
  on the product's engine.
Targets: chat tokens/s at 64 concurrent at least 1.2x the default-flag engine's; bulk documents
per minute at least 1.5x.
"""

import asyncio
import os
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from bench import setup
from bench.bench_bulk_chat import document, job_until_done, raw_bulk, submit_job
from bench.bench_streaming import MAX_TOKENS, jobs_for, product_level, raw_level
from bench.processes import (
    bench_users,
    celery_worker,
    engine_config,
    engine_process,
    product_environment,
    product_process,
    redis_running,
)
from bench.prompts import PROMPTS, SHORT_SYSTEM_PROMPT
from bench.results import arguments, engine_settings, repeats, save
from harness.processes import free_port
from inference.client import OpenAIEngineClient

CHATS = 64
DOCUMENTS = 24
QUICK_DOCUMENTS = 8
# vLLM with its default flags; the product's engine, straight; the product end to end.
SIDES = ("default_flags", "product_engine", "product")


@dataclass(frozen=True)
class DefaultFlags:
    """vLLM as its users start it: the model and an address, nothing else (what the product's
    launcher needs of a configuration: `model`, `url`, `nice`, `command()`, `environment()`)."""

    model: str
    served_model_name: str
    url: str
    nice: int = 0  # as a user's shell starts it

    def command(self) -> list[str]:
        address = urlsplit(self.url)
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", address.hostname or "127.0.0.1",
            "--port", str(address.port),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        # The one setting the CPU build asks of its users: the KV cache's size (the product's).
        # Without it vLLM reserves 92% of the host's memory (its --gpu-memory-utilization default),
        # more than this host has free, and does not start.
        space = str(settings.INFERENCE_KV_CACHE_SPACE_GB)
        return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": space, "HF_HUB_OFFLINE": "1"}


def engine_client(url: str) -> OpenAIEngineClient:
    return OpenAIEngineClient(url, settings.INFERENCE_MODEL_NAME, connect_timeout=10, token_timeout=600)


async def raw_documents(url: str, texts: list[str]) -> dict:
    client = engine_client(url)
    try:
        # The bulk workers' concurrency, priority 0: a default-flag engine schedules first come, first served.
        return await raw_bulk(client, texts, settings.BULK_CONCURRENCY, 0)
    finally:
        await client.aclose()


def best(runs: list[dict], key: str) -> dict:
    """The repetition with the most `key`, with every repetition's figure beside it."""
    top = max(runs, key=lambda run: run[key])
    return {**top, "runs": [run[key] for run in runs]}


def parser():
    return arguments(__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    texts = [document(i, 12) for i in range(QUICK_DOCUMENTS if options.quick else DOCUMENTS)]
    jobs = jobs_for(CHATS, options.quick)
    default = DefaultFlags(
        settings.INFERENCE_MODEL, settings.INFERENCE_MODEL_NAME, f"http://127.0.0.1:{free_port()}"
    )
    shipped = engine_config()
    chat: dict[str, list[dict]] = {side: [] for side in SIDES}
    bulk: dict[str, list[dict]] = {side: [] for side in SIDES}
    environment = product_environment(system_prompt=SHORT_SYSTEM_PROMPT, max_tokens=MAX_TOKENS)
    with (
        redis_running(),
        engine_process(default, "defaults-vllm-default-flags") as (default_url, _),
        engine_process(shipped, "defaults-product-engine") as (url, _),
    ):
        with product_process(url, **environment) as (base_url, _), bench_users(CHATS) as cookies:
            for engine in (default_url, url):
                asyncio.run(raw_level(engine, 1, PROMPTS[:1]))
            asyncio.run(product_level(base_url, cookies[:1], PROMPTS[:1]))
            for _ in range(repeats(options)):
                chat["default_flags"].append(asyncio.run(raw_level(default_url, CHATS, jobs)))
                chat["product_engine"].append(asyncio.run(raw_level(url, CHATS, jobs)))
                chat["product"].append(asyncio.run(product_level(base_url, cookies, jobs)))
        with celery_worker(url):
            for _ in range(repeats(options)):
                bulk["default_flags"].append(asyncio.run(raw_documents(default_url, texts)))
                bulk["product_engine"].append(asyncio.run(raw_documents(url, texts)))
                bulk["product"].append(asyncio.run(job_until_done(submit_job(texts))))
    result: dict = {
        "benchmark": "defaults",
        "quick": options.quick,
        "chats": CHATS,
        "max_tokens": MAX_TOKENS,
        "engines": {"default_flags": default.command()[3:], "product": engine_settings(shipped)},
    }
    for side in SIDES:
        result[f"chat_{side}"] = best(chat[side], "tokens_per_s")
        result[f"bulk_{side}"] = best(bulk[side], "docs_per_minute")
    for workload, key in (("chat", "tokens_per_s"), ("bulk", "docs_per_minute")):
        ratio = result[f"{workload}_product"][key] / result[f"{workload}_default_flags"][key]
        result[f"{workload}_ratio"] = round(ratio, 2)
    print({k: result[k] for k in ("chat_ratio", "bulk_ratio")}, flush=True)
    save(options.output, "defaults", result)
    return result


if __name__ == "__main__":
    setup()
    main()

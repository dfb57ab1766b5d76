"""Benchmark 8: the product against vLLM as its users run it, with its default flags.

On the same host, one engine after the other: vLLM started with the model and an address and
nothing else (`python -m vllm.entrypoints.openai.api_server --model M`: its own block size,
batch limits and scheduling, graph compilation on; the KV cache's size, which the CPU build
needs from its users, as the product's), against the product with its engine settings. Two
workloads, the same requests on both sides, temperature 0:
- chat: 64 concurrent chats of 64 output tokens (benchmark 1's prompts), straight to the
  default-flag engine over streaming HTTP, and end to end through the product's WebSocket;
- bulk: the same documents summarized (the bulk jobs' paragraph summary), straight to the
  default-flag engine at the bulk workers' concurrency, and as a bulk job through a real Celery
  worker and the product's bulk engine profile (n-gram speculation, docs/deploy.md).
Targets: chat tokens/s at 64 concurrent at least 1.2x the default-flag engine's; bulk documents
per minute at least 1.5x.
"""

import asyncio
import os
import sys
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from django.conf import settings

from bench.bench_bulk_chat import celery_worker, document, job_until_done, raw_bulk, submit_job
from bench.bench_streaming import MAX_TOKENS, jobs_for, raw_and_product, raw_level
from bench.processes import engine_config, engine_process, redis_running
from bench.prompts import PROMPTS
from bench.results import arguments, engine_settings, save
from harness.processes import free_port
from inference.client import OpenAIEngineClient

CHATS = 64
DOCUMENTS = 24
QUICK_DOCUMENTS = 8


@dataclass(frozen=True)
class DefaultFlags:
    """vLLM as its users start it: the model and an address, nothing else (what the product's
    launcher needs of a configuration: `model`, `url`, `command()`, `environment()`)."""

    model: str
    served_model_name: str
    url: str

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
    bulk_profile = replace(engine_config(), speculative="ngram")
    result: dict = {"benchmark": "defaults", "quick": options.quick, "chats": CHATS, "max_tokens": MAX_TOKENS}
    with redis_running():
        with engine_process(default, "defaults-vllm-default-flags") as (url, _):
            asyncio.run(raw_level(url, 1, PROMPTS[:1]))
            result["chat_default_flags"] = asyncio.run(raw_level(url, CHATS, jobs))
            result["bulk_default_flags"] = asyncio.run(raw_documents(url, texts))
        with engine_process(shipped, "defaults-product-engine") as (url, _):
            # Straight to the product's engine as well: what its flags do, apart from the web tier.
            result["chat_product_engine"], result["chat_product"] = raw_and_product(url, None, CHATS, jobs)
        with engine_process(bulk_profile, "defaults-bulk-engine") as (url, _):
            with celery_worker(url):
                job = submit_job(texts)
                result["bulk_product"] = asyncio.run(job_until_done(job))
    result["engines"] = {
        "default_flags": default.command()[3:],
        "product": engine_settings(shipped),
        "product_bulk": engine_settings(bulk_profile),
    }
    chat = result["chat_product"]["tokens_per_s"] / result["chat_default_flags"]["tokens_per_s"]
    bulk = result["bulk_product"]["docs_per_minute"] / result["bulk_default_flags"]["docs_per_minute"]
    result["chat_ratio"], result["bulk_ratio"] = round(chat, 2), round(bulk, 2)
    print({k: result[k] for k in ("chat_ratio", "bulk_ratio")}, flush=True)
    save(options.output, "defaults", result)
    return result


if __name__ == "__main__":
    main()

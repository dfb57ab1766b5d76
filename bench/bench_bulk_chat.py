"""Bulk summarization beside chat: does chat stay responsive while a job runs at full speed?

One run, one engine (started here with the product's settings, or --engine-url):

1. chat alone: time to first token (TTFT) of short chat requests, one at a time, with
   random pauses, as a person chats;
2. the raw engine alone: the same documents summarized straight through the engine
   client at BULK_CONCURRENCY in flight, equal priority, no shaping: documents/minute;
3. the job system alone: the same documents as a job through a real Celery worker:
   documents/minute;
4. chat beside the raw bulk load of (2): plain equal priority, no shaping;
5. chat beside the job system of (3): bulk priority and load shaping.

Chat requests mark themselves in Redis the way the web tier does
(`chat:generations:active`, a set of leases). Target: chat TTFT in (5) within 1.5x of (1).
Run: `python -m bench.bench_bulk_chat [--documents N] [--engine-url URL]` (on the product's
settings and database, bench.setup); prints JSON."""

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model

from bench import setup
from bench.processes import celery_worker, engine_config, engine_running, redis_running
from bench.results import RESULTS, save
from documents.uploads import DocumentInput
from inference.client import ChatRequest, Completion, OpenAIEngineClient
from jobs.summarize import PRESETS, Summarizer
from redisconn.keys import CHAT_ACTIVE

# The jobs' models load once Django is set up (bench.setup), after this module's imports.
if TYPE_CHECKING:
    from jobs.models import Job

CHAT_QUESTIONS = [
    "What is the capital of France?",
    "Give me one tip for sleeping better.",
    "How many legs does a spider have?",
    "Name a primary color.",
    "What is two plus two?",
    "Suggest a name for a cat.",
    "What does a bee make?",
    "Which planet is closest to the sun?",
]
SUBJECTS = ["The city council", "The research group", "A regional airline", "The hospital", "The library"]
TOPICS = ["road repairs", "a training program", "energy efficiency", "safety inspections", "online services"]


def document(seed: int, sentences: int) -> str:
    rng = random.Random(seed)
    return " ".join(
        f"{rng.choice(SUBJECTS)} spent {rng.randint(2, 900)} thousand dollars on {rng.choice(TOPICS)} "
        f"in {rng.choice(['March', 'June', 'October'])}, and {rng.randint(10, 95)} percent approved."
        for _ in range(sentences)
    )


def new_client(url: str) -> OpenAIEngineClient:
    return OpenAIEngineClient(url, settings.INFERENCE_MODEL_NAME, connect_timeout=5, token_timeout=120)


def summary_of(ttfts: list[float]) -> dict:
    if not ttfts:
        return {"count": 0}
    ordered = sorted(ttfts)
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 1),
        "mean_ms": round(statistics.fmean(ordered), 1),
        "max_ms": round(ordered[-1], 1),
        "samples_ms": [round(t) for t in ttfts],
        "load_average": round(os.getloadavg()[0], 2),
    }


async def chat_once(client: OpenAIEngineClient, r: aioredis.Redis, question: str) -> float:
    """One chat request marked active in Redis like the web tier marks it; its TTFT in ms."""
    member = uuid.uuid4().hex
    await r.zadd(CHAT_ACTIVE, {member: time.time() + 60})
    try:
        request = ChatRequest(
            messages=[
                {"role": "system", "content": settings.CHAT_SYSTEM_PROMPT},
                {"role": "user", "content": question},
            ],
            max_tokens=32,
            temperature=0.0,
            priority=settings.CHAT_PRIORITY,
            cache_salt=uuid.uuid4().hex,
        )
        started = time.perf_counter()
        ttft = None
        async for event in client.stream_chat(request):
            if ttft is None and not isinstance(event, Completion):
                ttft = (time.perf_counter() - started) * 1000
        return ttft if ttft is not None else (time.perf_counter() - started) * 1000
    finally:
        await r.zrem(CHAT_ACTIVE, member)


async def chat_while(client, r, *, until, minimum: int, seed: int) -> list[float]:
    """Chat with random pauses (0.5-3 s) until `until()` is true and `minimum` answers are in."""
    rng = random.Random(seed)
    ttfts: list[float] = []
    while len(ttfts) < minimum or not until():
        await asyncio.sleep(rng.uniform(0.5, 3.0))
        if until() and len(ttfts) >= minimum:
            break
        ttfts.append(await chat_once(client, r, rng.choice(CHAT_QUESTIONS)))
    return ttfts


async def raw_bulk(client: OpenAIEngineClient, texts: list[str], concurrency: int, priority: int) -> dict:
    """The documents straight through the engine at a fixed concurrency, no shaping. A fresh
    cache salt per run, so no run is served what an earlier one left in the prefix cache."""
    summarizer = Summarizer(
        client,
        instruction=PRESETS["paragraph"],
        max_tokens=settings.BULK_SUMMARY_TOKENS,
        priority=priority,
        temperature=settings.BULK_TEMPERATURE,
        chunk_tokens=settings.BULK_CHUNK_TOKENS,
        context_window=settings.INFERENCE_MAX_MODEL_LEN,
        cache_salt=uuid.uuid4().hex,
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int, text: str):
        async with gate:
            return await summarizer.summarize(text, request_id=f"bench-raw-{uuid.uuid4().hex[:8]}-{index}")

    started = time.perf_counter()
    summaries = await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    elapsed = time.perf_counter() - started
    prompt = sum(s.prompt_tokens for s in summaries)
    return {
        "documents": len(texts),
        "seconds": round(elapsed, 1),
        "docs_per_minute": round(len(texts) / elapsed * 60, 1),
        "cache_hit_ratio": round(sum(s.cached_tokens for s in summaries) / prompt, 3) if prompt else None,
        "load_average": round(os.getloadavg()[0], 2),
    }


def submit_job(texts: list[str]) -> "Job":
    """A job owned by a fresh staff user: a fresh cache salt, as for the raw runs."""
    from jobs import services

    owner = get_user_model().objects.create_user(f"bench-bulk-{uuid.uuid4().hex[:8]}", is_staff=True)
    documents = [DocumentInput(f"bench-{i}", text=t) for i, t in enumerate(texts)]
    return services.job_create(owner=owner, documents=documents, name="bench_bulk_chat")


async def job_until_done(job: "Job") -> dict:
    from jobs import selectors

    while True:
        await job.arefresh_from_db()
        if job.status not in job.ACTIVE:
            break
        await asyncio.sleep(0.5)
    progress = await sync_to_async(selectors.job_progress)(job=job)
    elapsed = (job.finished_at - job.started_at).total_seconds()
    return {
        "documents": progress.total,
        "status": job.status,
        "seconds": round(elapsed, 1),
        "docs_per_minute": round(progress.done / elapsed * 60, 1),
        "cache_hit_ratio": progress.cache_hit_ratio,
        "load_average": round(os.getloadavg()[0], 2),
    }


async def measure(engine_url: str, args) -> dict:
    client = new_client(engine_url)
    r = aioredis.Redis.from_url(settings.REDIS_URL)
    texts = [document(i, args.sentences) for i in range(args.documents)]
    out: dict = {"settings": {k: getattr(settings, k) for k in (
        "BULK_CONCURRENCY", "BULK_CONCURRENCY_MIN", "BULK_CONCURRENCY_WHILE_CHAT", "BULK_QUIET_SECONDS",
        "BULK_PRIORITY", "BULK_PREEMPT", "BULK_SUMMARY_TOKENS", "CHAT_PRIORITY", "INFERENCE_MAX_NUM_SEQS")},
        "documents": args.documents, "document_tokens": len(await client.tokenize(texts[0]))}  # fmt: skip
    try:
        # Warm-up: the first requests pay one-off costs.
        for question in CHAT_QUESTIONS[:2]:
            await chat_once(client, r, question)
        idle = await chat_while(client, r, until=lambda: True, minimum=args.chats, seed=1)

        out["raw_engine_alone"] = await raw_bulk(
            client, texts, settings.BULK_CONCURRENCY, settings.CHAT_PRIORITY
        )
        with celery_worker(engine_url):
            job = await sync_to_async(submit_job)(texts)
            out["job_system_alone"] = await job_until_done(job)

            bulk = asyncio.create_task(
                raw_bulk(client, texts, settings.BULK_CONCURRENCY, settings.CHAT_PRIORITY)
            )
            await asyncio.sleep(2)
            equal = await chat_while(client, r, until=bulk.done, minimum=args.chats, seed=2)
            out["raw_engine_beside_chat"] = await bulk
            out["chat_beside_equal_priority_bulk"] = summary_of(equal)

            job = await sync_to_async(submit_job)(texts)
            finished = asyncio.create_task(job_until_done(job))
            await asyncio.sleep(2)
            shaped = await chat_while(client, r, until=finished.done, minimum=args.chats, seed=3)
            out["job_system_beside_chat"] = await finished
            out["chat_beside_shaped_job"] = summary_of(shaped)
        # Idle again at the end: on a shared machine the background load moves.
        idle += await chat_while(client, r, until=lambda: True, minimum=args.chats, seed=4)
        out["chat_idle"] = summary_of(idle)
    finally:
        await r.aclose()
        await client.aclose()
    idle_p50, idle_p90 = out["chat_idle"]["p50_ms"], out["chat_idle"]["p90_ms"]
    out["ratios"] = {
        "equal_priority_p50": round(out["chat_beside_equal_priority_bulk"]["p50_ms"] / idle_p50, 2),
        "equal_priority_p90": round(out["chat_beside_equal_priority_bulk"]["p90_ms"] / idle_p90, 2),
        "shaped_p50": round(out["chat_beside_shaped_job"]["p50_ms"] / idle_p50, 2),
        "shaped_p90": round(out["chat_beside_shaped_job"]["p90_ms"] / idle_p90, 2),
        "job_vs_raw_throughput": round(
            out["job_system_alone"]["docs_per_minute"] / out["raw_engine_alone"]["docs_per_minute"], 2
        ),
    }
    out["target_met"] = out["ratios"]["shaped_p50"] <= 1.5
    return out


@contextlib.contextmanager
def engine(url: str | None):
    """The engine at `url`, or one started with the product's settings."""
    if url:
        yield url
        return
    with engine_running(engine_config(), name="bulk-engine") as started:
        yield started


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine-url", help="use this engine instead of starting one")
    p.add_argument("--documents", type=int, default=32)
    p.add_argument("--sentences", type=int, default=12, help="sentences per document (about 30 tokens each)")
    p.add_argument("--chats", type=int, default=10, help="fewest chat requests per phase")
    p.add_argument("--output", type=Path, default=RESULTS, help="folder for the JSON result (bulk_chat.json)")
    return p


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    with redis_running(), engine(args.engine_url) as url:
        result = asyncio.run(measure(url, args))
    print(json.dumps(result, indent=2))
    save(args.output, "bulk_chat", result)
    return result


if __name__ == "__main__":
    setup()
    main()

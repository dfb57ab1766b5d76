"""The Batch API against vLLM's offline batch runner, and beside chat.

One run, the same lines on both sides (short prompts, `max_tokens` = `min_tokens`, so every answer is
the same length), the engine built from the product's settings either way:

1. vLLM's offline runner (`python -m vllm.entrypoints.openai.run_batch`, the product's engine
   flags) on the file, timed from its "Reading batch" line (the engine loaded) to its output written;
2. the product's engine, web process (daphne, production mode) and a Celery worker of the bulk
   queue; the same file through the openai SDK (`files.create` → `batches.create` → `retrieve`
   until it ends → `files.content`), timed from `batches.create` to the batch ended, once per
   BATCH_CONCURRENCY given (each with a worker of its own), with no chat, the CPU seconds each process
   spent meanwhile (the worker, the web process, the engine's API server and its engine core) and
   the engine's running and waiting requests, sampled;
3. for each setting, a batch again with CHAT_USERS users chatting over the WebSocket for a window:
   the lines the batch completed in that window, and chat's between-token p99 against chat alone
   (before and after, pooled).

Run: `python -m bench.bench_batch_api [--requests N] [--settings 8 64]`; prints JSON and writes
docs/benchmarks/batch_api.json."""

import asyncio
import contextlib
import io
import json
import os
import random
import re
import subprocess
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import httpx

from bench.results import arguments, load_during, percentile, sampled, save, summarize

MAX_TOKENS = 32
CHAT_TOKENS = 64
ENDED = {"completed", "failed", "expired", "cancelled"}
SUBJECTS = ["a river", "the moon", "a library", "a bicycle", "the ocean", "a garden", "a train", "winter"]


def lines(count: int, model: str) -> list[dict]:
    """`count` chat completion requests in the Batch API's line shape, short and distinct."""
    rng = random.Random(42)
    return [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "messages": [
                    {"role": "user", "content": f"Write one sentence about {rng.choice(SUBJECTS)} and {i}."}
                ],
                "max_tokens": MAX_TOKENS,
                "min_tokens": MAX_TOKENS,
                "temperature": 0.0,
            },
        }
        for i in range(count)
    ]


def output_figures(text: str) -> dict:
    """Lines answered, their completion tokens, and lines that carry an error, of an output file."""
    answered = tokens = errors = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        body = (row.get("response") or {}).get("body") or {}
        if row.get("error") or not body.get("usage"):
            errors += 1
            continue
        answered += 1
        tokens += body["usage"]["completion_tokens"]
    return {"answered": answered, "errors": errors, "completion_tokens": tokens}


def rates(figures: dict, seconds: float) -> dict:
    return {
        "seconds": round(seconds, 1),
        "tokens_per_s": round(figures["completion_tokens"] / seconds, 1),
        "requests_per_s": round(figures["answered"] / seconds, 2),
    }


def run_batch_command(config, source: Path, target: Path) -> list[str]:
    """vLLM's offline runner with the engine flags the product's launcher gives its server; the
    server's own flags (address, access log, key guard) left out."""
    command = config.command()
    module = command.index("vllm.entrypoints.openai.api_server")
    command[module] = "vllm.entrypoints.openai.run_batch"
    kept, skip = [], False
    for arg in command:
        if skip:
            skip = False
        elif arg in ("--host", "--port", "--middleware"):
            skip = True
        elif arg != "--disable-uvicorn-access-log":
            kept.append(arg)
    return [*kept, "-i", str(source), "-o", str(target)]


def offline(config, source: Path, folder: Path) -> dict:
    """The file through vLLM's run_batch: timed from its engine's first line read to its output written."""
    from bench.processes import logs, tree_cpu_seconds

    target = folder / "run_batch_out.jsonl"
    marks: dict[str, float] = {}
    started = time.perf_counter()
    process = subprocess.Popen(
        run_batch_command(config, source, target),
        env=config.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=partial(os.nice, config.nice) if config.nice else None,
    )

    cpu: dict[str, float] = {}

    def follow() -> None:
        with open(logs() / "run-batch.log", "w") as log:
            for line in process.stdout:
                log.write(line)
                now = time.perf_counter()
                if re.search(r"Reading batch from", line):
                    marks.setdefault("reading", now)
                    cpu.setdefault("reading", tree_cpu_seconds(process.pid))
                elif re.search(r"Writing outputs to", line):
                    marks.setdefault("writing", now)
                    cpu.setdefault("writing", tree_cpu_seconds(process.pid))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    with load_during() as load:
        code = process.wait()
        reader.join(10)
    ended = time.perf_counter()
    if code != 0 or "reading" not in marks:
        raise RuntimeError(f"run_batch exited {code}; see var/bench-logs/run-batch.log")
    figures = output_figures(target.read_text())
    spent = cpu["writing"] - cpu["reading"] if len(cpu) == 2 else None
    return {
        **figures,
        **rates(figures, ended - marks["reading"]),
        "startup_s": round(marks["reading"] - started, 1),
        "cpu_s": {"run_batch": round(spent, 1)} if spent is not None else {},
        **load,
    }


def processes_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of the product's processes: the Celery worker (its pool's child included),
    the web process, the engine's API server and its engine core (the server's children)."""
    from bench.processes import children_cpu_seconds, cpu_seconds, tree_cpu_seconds

    return {
        "worker": tree_cpu_seconds(pids["worker"]),
        "web": cpu_seconds(pids["web"]),
        "engine_api": cpu_seconds(pids["engine"]),
        "engine_core": children_cpu_seconds(pids["engine"]),
    }


@contextlib.contextmanager
def engine_gauges(url: str, every: float = 0.5):
    """The engine's running and waiting requests sampled every `every` seconds while the block runs:
    the dict it yields gets their means and the most running on the way out."""
    from inference.topology import RUNNING, WAITING, metric_sums

    client = httpx.Client(timeout=10)

    def read() -> dict[str, float] | None:
        try:
            return metric_sums(client.get(url + "/metrics").text, [RUNNING, WAITING])
        except httpx.HTTPError:
            return None

    figures: dict = {}
    try:
        with sampled(read, every) as samples:
            yield figures
    finally:
        client.close()
    if samples:
        figures["engine_running_mean"] = round(sum(s[RUNNING] for s in samples) / len(samples), 1)
        figures["engine_running_max"] = max(s[RUNNING] for s in samples)
        figures["engine_waiting_mean"] = round(sum(s[WAITING] for s in samples) / len(samples), 1)


def api_key() -> str:
    """A key of a fresh user with the Batch API's permission and scopes."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from apitokens.services import token_issue

    person = get_user_model().objects.create_user(f"bench-batch-{time.time_ns()}")
    person.user_permissions.add(Permission.objects.get(codename="use_batch_api"))
    _, key = token_issue(user=person, scopes=["openai", "batch"])
    return key


async def submit(api, source: Path):
    content = await asyncio.to_thread(source.read_bytes)
    upload = await api.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    return await api.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


async def until_ended(api, batch, poll: float = 0.25):
    while batch.status not in ENDED:
        await asyncio.sleep(poll)
        batch = await api.batches.retrieve(batch.id)
    return batch


async def product_alone(api, source: Path, url: str, pids: dict[str, int]) -> dict:
    """The file as a batch with no chat: timed from `batches.create` to the batch ended, with the
    CPU seconds each process spent meanwhile and the engine's requests in flight."""
    with load_during() as load, engine_gauges(url) as gauges:
        before = processes_cpu(pids)
        started = time.perf_counter()
        batch = await until_ended(api, await submit(api, source))
        seconds = time.perf_counter() - started
        spent = {name: round(value - before[name], 1) for name, value in processes_cpu(pids).items()}
    if batch.status != "completed":
        raise RuntimeError(f"batch {batch.id} ended {batch.status}: {batch.errors}")
    figures = output_figures((await api.files.content(batch.output_file_id)).text)
    return {
        **figures,
        **rates(figures, seconds),
        "in_progress_to_finalizing_s": (batch.finalizing_at or 0) - (batch.in_progress_at or 0),
        "cpu_s": spent,
        **gauges,
        **load,
    }


async def chat_for(base: str, cookies: list[str], seconds: float) -> dict:
    """Each user asks one short question after another, each in a new conversation, for `seconds`."""
    from bench.bench_bulk_chat import CHAT_QUESTIONS
    from bench.clients import ProductChat

    deadline = time.perf_counter() + seconds
    answers = []

    async def user(index: int, cookie: str) -> None:
        async with ProductChat(base, cookie) as chat:
            turn = index
            while time.perf_counter() < deadline:
                question = CHAT_QUESTIONS[turn % len(CHAT_QUESTIONS)]
                answers.append(await chat.ask(question, new_conversation=True))
                turn += 1

    with load_during() as load:
        started = time.perf_counter()
        await asyncio.gather(*(user(i, c) for i, c in enumerate(cookies)))
        wall = time.perf_counter() - started
    return {**summarize(answers, wall), **load, "gaps_s": [g for a in answers for g in a.gaps]}


async def product_beside_chat(api, source: Path, base: str, cookies: list[str], seconds: float) -> dict:
    """A batch running when the users start chatting: the lines it completes in the chat's window.
    It is cancelled afterwards (its lines are all the same length: tokens = lines × MAX_TOKENS)."""
    batch = await submit(api, source)
    while (batch := await api.batches.retrieve(batch.id)).request_counts.completed < 8:
        if batch.status in ENDED:
            raise RuntimeError(f"batch {batch.id} ended {batch.status} before the chat")
        await asyncio.sleep(0.25)
    before, started = batch.request_counts.completed, time.perf_counter()
    chat = await chat_for(base, cookies, seconds)
    batch = await api.batches.retrieve(batch.id)
    window = time.perf_counter() - started
    done = batch.request_counts.completed - before
    await api.batches.cancel(batch.id)
    await until_ended(api, batch)
    figures = {"answered": done, "completion_tokens": done * MAX_TOKENS}
    return {"batch": {**figures, **rates(figures, window)}, "chat": chat}


def gap_p99(*chats: dict) -> float | None:
    value = percentile([g for chat in chats for g in chat["gaps_s"]], 99)
    return None if value is None else round(value * 1000, 1)


async def measure_product(
    url: str, base: str, key: str, cookies: list[str], source: Path, args, pids: dict[str, int]
) -> dict:
    import openai

    from bench.processes import celery_worker

    out: dict = {}
    api = openai.AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=2, timeout=600)
    await chat_for(base, cookies[:2], 5)  # warm-up: the first answers pay one-off costs
    alone = [await chat_for(base, cookies, args.chat_seconds)]
    for concurrency in args.settings:
        with celery_worker(url, BATCH_CONCURRENCY=str(concurrency)) as worker:
            await until_ended(api, await submit(api, source.with_name("warm.jsonl")))
            pids["worker"] = worker.pid
            out[f"product_{concurrency}"] = await product_alone(api, source, url, pids)
            beside = await product_beside_chat(api, source, base, cookies, args.chat_seconds)
            beside["chat_gap_p99_ms"] = gap_p99(beside["chat"])
            beside["chat"].pop("gaps_s")
            out[f"product_{concurrency}_beside_chat"] = beside
    alone.append(await chat_for(base, cookies, args.chat_seconds))
    await api.close()
    out["chat_alone_gap_p99_ms"] = gap_p99(*alone)
    out["chat_alone"] = [{k: v for k, v in chat.items() if k != "gaps_s"} for chat in alone]
    return out


def measure(args) -> dict:
    from django.conf import settings
    from django.core.management import call_command

    from bench.processes import (
        bench_users,
        engine_config,
        engine_process,
        product_environment,
        product_process,
        redis_running,
    )

    call_command("migrate", verbosity=0)
    config = engine_config()
    requests = lines(args.requests, settings.INFERENCE_MODEL_NAME)
    out: dict = {
        "requests": args.requests,
        "max_tokens": MAX_TOKENS,
        "chat_users": args.chat_users,
        "chat_seconds": args.chat_seconds,
        "chat_max_tokens": CHAT_TOKENS,
        "settings": args.settings,
        "engine": config.command()[3:],
    }
    environment = product_environment(system_prompt=settings.CHAT_SYSTEM_PROMPT, max_tokens=CHAT_TOKENS)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=settings.DATA_DIR)))
        source = folder / "in.jsonl"
        source.write_text("".join(json.dumps(line) + "\n" for line in requests))
        (folder / "warm.jsonl").write_text("".join(json.dumps(line) + "\n" for line in requests[:4]))
        if args.run_batch_from:
            out["run_batch"] = json.loads(args.run_batch_from.read_text())["run_batch"]
        else:
            out["run_batch"] = offline(config, source, folder)
            save(args.output, "batch_api", out)  # kept if the product's part fails
        stack.enter_context(redis_running())
        url, engine_pid = stack.enter_context(engine_process(config, name="batch-engine"))
        base, web = stack.enter_context(product_process(url, **environment))
        cookies = stack.enter_context(bench_users(args.chat_users))
        pids = {"engine": engine_pid, "web": web.pid}
        out.update(asyncio.run(measure_product(url, base, api_key(), cookies, source, args, pids)))
    offline_rate = out["run_batch"]["tokens_per_s"]
    out["ratios"] = {
        str(c): {
            "alone_vs_run_batch": round(out[f"product_{c}"]["tokens_per_s"] / offline_rate, 2),
            "beside_chat_vs_run_batch": round(
                out[f"product_{c}_beside_chat"]["batch"]["tokens_per_s"] / offline_rate, 3
            ),
            "chat_gap_p99_vs_alone": round(
                out[f"product_{c}_beside_chat"]["chat_gap_p99_ms"] / out["chat_alone_gap_p99_ms"], 2
            ),
        }
        for c in args.settings
    }
    return out


def options(parser) -> None:
    parser.add_argument("--requests", type=int, default=1000, help="lines in the batch (quick: 300)")
    parser.add_argument(
        "--settings", type=int, nargs="+", default=[8, 64], help="BATCH_CONCURRENCY values to run"
    )
    parser.add_argument("--chat-users", type=int, default=16)
    parser.add_argument("--chat-seconds", type=float, default=40.0, help="each chat window")
    parser.add_argument(
        "--run-batch-from", type=Path, help="take run_batch's figures from this earlier result, not a new run"
    )


def main(argv: list[str] | None = None) -> dict:
    args = arguments(__doc__.splitlines()[0], options).parse_args(argv)
    if args.quick and args.requests == 1000:
        args.requests = 300
    result = measure(args)
    print(json.dumps(result, indent=2))
    save(args.output, "batch_api", result)
    return result


if __name__ == "__main__":
    from bench import setup

    setup()
    main()

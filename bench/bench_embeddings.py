"""Benchmark 10: embedding a knowledge collection, three ways, in one run.

The same texts (about 90 tokens each, as ingestion's chunks) embedded by (a) transformers in a
process alone (the server's encoder, int8 or not as EMBEDDING_QUANTIZE says, a batch at a time, torch
on every core, no HTTP), (b) vLLM's pooling runner alone (`EMBEDDING_RUNNER=vllm`: its server,
requests of a batch each, two in flight), and
(c) the product's embedding server over HTTP as ingestion sends to it (`EMBEDDING_RUNNER=transformers`:
`runembeddings`' server, inference.embeddings' client, two workers sending a batch each at a time,
as the Celery worker's two processes do). Tokens/s and texts/s of each, per core; and the time a
question's embedding takes while (c) runs, against the server idle.
Target: (c) at least 0.8x the faster of (a) and (b), per core. It decides which runner the product
uses on CPU (docs/benchmarks.md).
"""

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from django.conf import settings

from bench import setup
from bench.results import arguments, save
from enginehost.embedlaunch import EmbeddingConfig
from enginehost.embedmodel import prepare_embedding_model
from enginehost.launcher import EngineProcess
from harness.processes import free_port
from inference.breaker import CircuitBreaker
from inference.embeddings import EmbeddingClient

BATCH = 64
WORKERS = 2
WORDS = (
    "the a of to and in for is on that by with as at from this be are or was it an which not "
    "collection document answer question model engine vector search retrieval passage chunk index "
    "user request server process memory token batch query bulk priority store database answer page "
    "report policy security network cluster service deploy configuration setting default value"
).split()


def corpus(count: int, words: int = 90, seed: int = 40) -> list[str]:
    """`count` texts of `words` words (about 90 tokens each), the same in every run."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + "." for _ in range(count)]


def cores() -> int:
    return len(os.sched_getaffinity(0))


def rates(texts: int, tokens: int, seconds: float, cpu: float | None = None) -> dict:
    """Rates over `seconds` of wall time; with `cpu`, the CPU seconds the path spent, and tokens per
    CPU second (per core-second, which a host's other tenants slow less than wall time)."""
    found = {
        "texts": texts,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "texts_per_s": round(texts / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "tokens_per_s_per_core": round(tokens / seconds / cores(), 1),
    }
    if cpu is not None:
        found.update(cpu_s=round(cpu, 2), tokens_per_cpu_s=round(tokens / cpu, 1))
    return found


def in_process(count: int, batch: int, texts: Path | None = None) -> dict:
    """(a): the model in a process of its own, `batch` texts a forward pass: `count` texts of the corpus,
    or those of the JSON file `texts`. Its own session, as the servers' (EngineProcess): where the
    kernel shares the cores out by session (autogroup), each path gets the same share of a busy host."""
    command = [sys.executable, "-m", "bench.bench_embeddings", "--alone", str(count), str(batch)]
    command += ["--texts", str(texts)] if texts else []
    done = subprocess.run(command, capture_output=True, text=True, start_new_session=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def alone(count: int, batch: int, texts_file: str | None = None) -> None:
    """The body of `in_process`' process: prints its rates as JSON."""
    from enginehost.embedserver import Encoder

    texts = json.loads(Path(texts_file).read_text()) if texts_file else corpus(count)
    encoder = Encoder(
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_MAX_TOKENS,
        threads=cores(),
        quantize=settings.EMBEDDING_QUANTIZE,
    )
    encoder(texts[:batch])  # warm
    started, cpu, tokens = time.perf_counter(), time.process_time(), 0
    for start in range(0, len(texts), batch):
        tokens += sum(encoder(texts[start : start + batch])[1])
    spent = time.process_time() - cpu
    print(json.dumps(rates(len(texts), tokens, time.perf_counter() - started, spent)))


def new_client(url: str) -> EmbeddingClient:
    return EmbeddingClient(
        url,
        settings.EMBEDDING_MODEL_NAME,
        breaker=CircuitBreaker(failure_threshold=5, cool_down=10),
        timeout=600,
        connect_timeout=5,
        api_key=settings.INFERENCE_API_KEY,
    )


QUESTION = ["What does the policy say about retention?"]


def over_http(
    url: str, texts: list[str], tokens: int, *, queries: bool = False, server: int | None = None
) -> dict:
    """(b) and (c): WORKERS threads, each with a client of its own, sending BATCH texts a request
    as ingestion's workers do; with `queries`, a question's embedding every 0.2 s beside them, timed.
    With `server` (its pid), the CPU seconds the server's processes and these clients spent."""
    from bench.processes import tree_cpu_seconds

    new_client(url).embed(texts[:BATCH])  # warm
    cpu = (tree_cpu_seconds(server), time.process_time()) if server else None
    batches = [texts[start : start + BATCH] for start in range(0, len(texts), BATCH)]
    lock, done, waits = threading.Lock(), threading.Event(), []

    def worker() -> None:
        client = new_client(url)
        while True:
            with lock:
                if not batches:
                    return
                batch = batches.pop()
            client.embed(batch, priority="bulk")

    def asker() -> None:
        client = new_client(url)
        while not done.is_set():
            started = time.perf_counter()
            client.embed(QUESTION, priority="query")
            waits.append(time.perf_counter() - started)
            done.wait(0.2)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    questions = threading.Thread(target=asker) if queries else None
    started = time.perf_counter()
    for thread in threads + ([questions] if questions else []):
        thread.start()
    for thread in threads:
        thread.join()
    spent = tree_cpu_seconds(server) - cpu[0] + time.process_time() - cpu[1] if cpu else None
    result = rates(len(texts), tokens, time.perf_counter() - started, spent)
    done.set()
    if questions:
        questions.join()
        idle = []
        client = new_client(url)
        for _ in range(10):
            started = time.perf_counter()
            client.embed(QUESTION, priority="query")
            idle.append(time.perf_counter() - started)
        result["query_ms_p50"] = round(statistics.median(waits) * 1000, 1)
        result["query_ms_max"] = round(max(waits) * 1000, 1)
        result["query_ms_idle_p50"] = round(statistics.median(idle) * 1000, 1)
    return result


@contextlib.contextmanager
def served(runner: str):
    """The embedding engine of `runner`, started by the product's launcher: its URL and pid."""
    url = f"http://127.0.0.1:{free_port()}"
    config = replace(EmbeddingConfig.from_settings(settings), runner=runner, url=url)
    with open(Path(settings.DATA_DIR) / f"bench-embeddings-{runner}.log", "w") as log:
        process = EngineProcess(config, output=log)
        process.start()
        try:
            process.wait_healthy(timeout=900)
            yield url, process.process.pid
        finally:
            process.stop()


def best(runs: list[dict]) -> dict:
    """The fastest repetition (noise on a shared host only slows a run), the others' figures kept."""
    top = max(runs, key=lambda run: run["tokens_per_s"])
    return {**top, "runs": [run["tokens_per_s"] for run in runs]}


def parser():
    def extra(parser) -> None:
        parser.add_argument("--alone", type=int, nargs=2, metavar=("TEXTS", "BATCH"), help=argparse.SUPPRESS)
        parser.add_argument("--texts", help=argparse.SUPPRESS)

    return arguments(__doc__.splitlines()[0], extra)


def main(argv: list[str] | None = None) -> dict | None:
    options = parser().parse_args(argv)
    if options.alone:
        return alone(*options.alone, options.texts)
    prepare_embedding_model(Path(settings.EMBEDDING_MODEL), report=print)
    count = 256 if options.quick else 768
    texts = corpus(count)
    repeats = options.repeats or (2 if options.quick else 3)
    direct, product, tokens = [], [], 0
    with served("transformers") as (url, _):
        # (a) and (c) in turn, so that a busy moment of the host falls on both alike.
        for _ in range(repeats):
            direct.append(in_process(count, settings.EMBEDDING_MAX_BATCH))
            # Every path reads the same tokens: the model's own count.
            tokens = direct[-1]["tokens"]
            product.append(over_http(url, texts, tokens, queries=True))
            print("in process", direct[-1]["tokens_per_s"], "product", product[-1], flush=True)
    batches = {batch: in_process(count, batch) for batch in (8, 16, 32, 64)}
    print("by batch", {batch: run["tokens_per_s"] for batch, run in batches.items()}, flush=True)
    with served("vllm") as (url, _):
        pooling = [over_http(url, texts, tokens) for _ in range(repeats)]
    print("vllm", [run["tokens_per_s"] for run in pooling], flush=True)
    direct, product, pooling = best(direct), best(product), best(pooling)
    faster = max(direct["tokens_per_s"], pooling["tokens_per_s"])
    result = {
        "benchmark": "embeddings",
        "quick": options.quick,
        "cores": cores(),
        "batch": BATCH,
        "workers": WORKERS,
        "max_batch": settings.EMBEDDING_MAX_BATCH,
        "model": settings.EMBEDDING_MODEL_NAME,
        "in_process": direct,
        "in_process_by_batch": batches,
        "vllm": pooling,
        "product": product,
        "product_share": round(product["tokens_per_s"] / faster, 2),
    }
    save(options.output, "embeddings", result)
    return result


if __name__ == "__main__":
    setup()
    main()

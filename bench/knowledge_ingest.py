"""Ingestion at scale: documents of about 500 tokens of real prose uploaded into one collection and indexed
by a real Celery worker on the bulk queue with the real embedding engine, as `make run` runs them; midway
the worker and its Redis are SIGKILLed together, Redis's data deleted (no task, no lock survives), and
both started again. Beat runs in the worker, so its sweep queues again what the lost tasks left.

The documents are consecutive passages of bench.knowledge_corpus (the installed packages' docstrings), the
same every run, a smaller set the start of a larger one; they are uploaded as zips of 1,000 .txt files
through knowledge.services, as the /collections/ page stores them. Nothing embedded twice: the embedding
engine's own count of texts embedded against the distinct texts stored (each document's passages and
windows), as tests/knowledge/test_knowledge_worker_kill.py counts them; nothing lost: every document ends
ready with each of its passages stored once. bench.bench_knowledge_chat shares the documents, the upload
and the processes.
"""

import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from bench.results import ROOT
from harness.celery_worker import CeleryWorker
from harness.processes import free_port, redis_data, redis_started, stop_group

TOKENS = 500
# The corpus's passages are about 43 tokens: passages fetched for a document of TOKENS, with room.
PASSAGES_A_DOCUMENT = 13
# Documents an upload holds at most (BULK_MAX_DOCUMENTS, the default).
PER_UPLOAD = 1000
FOLDER = ROOT / "var" / "bench" / "knowledge-ingest"


def environment(store: str) -> object | None:
    """The run's database (fresh: SQLite under var/bench, or PostgreSQL), Redis address and embedding
    engine address, in this process's environment for Django's setup and every process the run starts;
    the bundled pgvector server where `store` is pgvector (the caller cleans it up)."""
    from bench.bench_knowledge import _fresh_database, _store_url

    url, server = _store_url(store, FOLDER)
    if server is None:
        _fresh_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ["REDIS_URL"] = f"redis://:{secrets.token_hex(16)}@127.0.0.1:{free_port()}/0"
    os.environ["EMBEDDING_URL"] = f"http://127.0.0.1:{free_port()}"
    return server


def documents(count: int, tokens: int = TOKENS) -> list[str]:
    """`count` documents, each the corpus's next passages until it holds `tokens` tokens of the embedding
    model's tokenizer."""
    from bench.knowledge_corpus import passages

    texts = passages(count * PASSAGES_A_DOCUMENT + 1000)
    found: list[str] = []
    parts, size = [], 0
    for text, length in zip(texts, token_counts(texts), strict=True):
        parts.append(text)
        size += length
        if size >= tokens:
            found.append(" ".join(parts))
            parts, size = [], 0
            if len(found) == count:
                return found
    raise RuntimeError(f"the corpus made {len(found)} documents of {tokens} tokens; {count} asked")


def token_counts(texts: list[str]) -> list[int]:
    from knowledge import chunking

    return [len(e.ids) for e in chunking.tokenizer().encode_batch(texts, add_special_tokens=False)]


def upload(collection, texts: list[str]) -> int:
    """The texts as zips of PER_UPLOAD .txt files, each zip one upload (knowledge.services.documents_add,
    whose commit queues the collection's indexing): the documents added."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from knowledge import services

    added = 0
    for start in range(0, len(texts), PER_UPLOAD):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for i, text in enumerate(texts[start : start + PER_UPLOAD], start):
                archive.writestr(f"doc-{i:05d}.txt", text)
        name = f"part-{start // PER_UPLOAD}.zip"
        result = services.documents_add(
            collection=collection, uploads=[SimpleUploadedFile(name, buffer.getvalue())]
        )
        if result["failed"] or result["duplicates"]:
            raise RuntimeError(f"{name}: {result['failed'][:3]} failed, {result['duplicates'][:3]} repeated")
        added += len(result["added"])
    return added


def progress(collection) -> dict:
    """Documents ready and passages stored, now."""
    from knowledge.models import Chunk, Document

    return {
        "ready": Document.objects.filter(collection=collection, status=Document.Status.READY).count(),
        "passages": Chunk.objects.filter(collection=collection).count(),
    }


def watch(collection, until: Callable[[dict], bool], timeout: float, began: float, timeline: list) -> dict:
    """Progress every 5 s, kept in `timeline` as [seconds since `began`, ready, passages], until `until`
    holds; TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        now = progress(collection)
        timeline.append([round(time.perf_counter() - began, 1), now["ready"], now["passages"]])
        if until(now):
            return now
        if time.monotonic() > deadline:
            raise TimeoutError(f"indexing: {now} after {timeout:.0f} s")
        time.sleep(5)


@dataclass
class Indexing:
    """The run's Redis (bundled, as `make run` starts it), embedding engine and bulk worker with beat."""

    redis_url: str
    redis: object
    worker: CeleryWorker
    engine: object

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far of the embedding engine, the worker (its pool's children included) and
        Redis."""
        from bench.processes import tree_cpu_seconds

        pids = {"engine": self.engine.process.pid, "worker": self.worker.process.pid, "redis": self.redis.pid}
        return {name: tree_cpu_seconds(pid) for name, pid in pids.items()}

    def kill_and_restart(self) -> float:
        """SIGKILL the worker and Redis, delete Redis's data, start both again: the seconds it took."""
        began = time.perf_counter()
        self.worker.kill()
        stop_group(self.redis, signal.SIGKILL, 10)
        shutil.rmtree(redis_data(self.redis_url), ignore_errors=True)
        self.redis = redis_started(self.redis_url)
        self.worker.start()
        return round(time.perf_counter() - began, 1)


@contextlib.contextmanager
def indexing(
    *, redis=None, nice: int | None = None, inference_url: str = "http://127.0.0.1:1", **worker_settings: str
) -> Iterator[Indexing]:
    """The embedding engine (at `nice` where given, instead of EMBEDDING_NICE) and the worker (with
    `worker_settings`) on the addresses `environment` chose, and Redis: the one started as `redis`, or
    one of its own."""
    from django.conf import settings

    from bench.processes import PRODUCTION, log_file, logs
    from enginehost.embedlaunch import EmbeddingConfig
    from enginehost.launcher import EngineProcess

    config = EmbeddingConfig.from_settings(settings)
    if nice is not None:
        config = replace(config, nice=nice)
    log = log_file("embeddings")
    engine = EngineProcess(config, output=log)
    redis_url = os.environ["REDIS_URL"]
    own_redis = redis is None
    FOLDER.mkdir(parents=True, exist_ok=True)
    schedule = FOLDER / "beat-schedule"
    schedule.unlink(missing_ok=True)
    env = dict(os.environ, **PRODUCTION, INFERENCE_URL=inference_url, **worker_settings)
    worker = CeleryWorker(
        env, logs() / "knowledge-celery.log", hostname=f"bench-{os.getpid()}@%h", beat_schedule=schedule
    )
    stack = Indexing(redis_url, redis or redis_started(redis_url), worker, engine)
    try:
        engine.start()
        engine.wait_healthy(timeout=300)
        worker.start()
        yield stack
    finally:
        worker.stop()
        engine.stop()
        log.flush()
        if own_redis:
            stop_redis(stack.redis, redis_url)


def stop_redis(process, url: str) -> None:
    stop_group(process, signal.SIGTERM, 10)
    shutil.rmtree(redis_data(url), ignore_errors=True)


def accounting(collection, count: int, texts_embedded: float) -> dict:
    """Documents lost, passages stored twice, and texts embedded (the engine's count over the run)
    against the distinct texts stored: each document's passages and windows, a text two of its passages
    share counted once, as indexing embeds it."""
    from django.conf import settings
    from django.db.models import Count, F, Sum

    from knowledge import chunking
    from knowledge.models import Chunk, Document, Window

    documents = Document.objects.filter(collection=collection)
    complete = documents.filter(status=Document.Status.READY, chunks_done=F("chunks_total"))
    passages = Chunk.objects.filter(collection=collection)
    expected = documents.aggregate(n=Sum("chunks_total"))["n"] or 0
    distinct: dict[int, set[str]] = {}
    for document_id, text in passages.order_by().values_list("document_id", "text").iterator(2000):
        distinct.setdefault(document_id, set()).update((text, *chunking.windows(text)))
    most_windows = passages.annotate(n=Count("windows")).order_by("-n").values_list("n", flat=True).first()
    # A batch is at most KNOWLEDGE_EMBED_BATCH texts, or one passage with its windows; a run has one in
    # flight for each document it indexes at once.
    batch = max(settings.KNOWLEDGE_EMBED_BATCH, 1 + (most_windows or 0)) * settings.KNOWLEDGE_INDEX_DOCUMENTS
    total = sum(len(texts) for texts in distinct.values())
    return {
        "uploaded": count,
        "stored": documents.count(),
        "lost": count - complete.count(),
        "failed": documents.filter(status=Document.Status.FAILED).count(),
        "passages": passages.count(),
        "passages_expected": expected,
        "windows": Window.objects.filter(collection=collection).count(),
        "distinct_texts": total,
        "texts_embedded": int(texts_embedded),
        "embedded_again": int(texts_embedded) - total,
        # What the kill may cost: the batch in flight, and the sentences the next passage shares with
        # the last one stored (tests/knowledge/test_knowledge_worker_kill.py).
        "embedded_again_allowed": 2 * batch,
    }


def run_ingest(count: int, *, kill: bool) -> dict:
    """`count` documents uploaded and indexed, the worker and Redis killed once half are ready (`kill`)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db.models import Max
    from django.utils import timezone

    from bench.knowledge_pdf import _engine_counts
    from knowledge import services

    call_command("migrate", verbosity=0)
    texts = documents(count)
    tokens = sum(token_counts(texts))
    owner, _ = get_user_model().objects.get_or_create(username="bench-ingest")
    collection = services.collection_create(owner=owner, name="Ingestion")
    timeline: list = []
    result: dict = {"documents": count, "document_tokens": tokens, "killed": kill}
    result["collection"] = collection.pk
    with indexing() as stack:
        before, cpu = _engine_counts(), stack.cpu_seconds()
        began, began_at, uploading = time.perf_counter(), timezone.now(), time.process_time()
        upload(collection, texts)
        result["upload_s"] = round(time.perf_counter() - began, 1)
        # This process stores the upload, as the web process does.
        upload_cpu = time.process_time() - uploading
        if kill:
            at = watch(collection, lambda now: now["ready"] >= count // 2, 4 * 3600, began, timeline)
            result["kill"] = {"at_s": timeline[-1][0], **at, "restart_s": stack.kill_and_restart()}
        watch(collection, lambda now: now["ready"] + failed(collection) >= count, 4 * 3600, began, timeline)
        # To the last document's own time ready, not the poll that saw it.
        last = collection.documents.aggregate(last=Max("finished_at"))["last"]
        wall = (last - began_at).total_seconds()
        engine = _engine_counts(before)
        spent = {name: round(now - cpu[name], 2) for name, now in stack.cpu_seconds().items()}
        spent["upload"] = round(upload_cpu, 2)
    cores = os.cpu_count() or 1
    result.update(
        wall_s=round(wall, 1),
        documents_per_s=round(count / wall, 2),
        tokens_per_s=round(tokens / wall, 1),
        tokens_per_s_per_core=round(tokens / wall / cores, 1),
        # What the embedding engine embedded (passages and their windows), over the whole ingestion.
        embedded_tokens_per_s=round(engine["tokens"] / wall, 1),
        cores=cores,
        **({} if kill else cpu_figures(spent, engine["tokens"])),
        engine=engine,
        timeline=timeline,
        **accounting(collection, count, engine["texts"]),
    )
    return result


def cpu_figures(spent: dict[str, float], embedded_tokens: float) -> dict:
    """The CPU seconds the ingestion's processes spent (a killed worker's are lost, so a run without the
    kill only), and embedded tokens per CPU second: the embedding paths' per core-second."""
    total = sum(spent.values())
    return {"cpu_s": {**spent, "total": round(total, 2)},
            "embedded_tokens_per_cpu_s": round(embedded_tokens / total, 1)}  # fmt: skip


def failed(collection) -> int:
    from knowledge.models import Document

    return Document.objects.filter(collection=collection, status=Document.Status.FAILED).count()


def embedding_paths(collection, sample: int) -> dict:
    """Benchmark 10's two embedding paths alone, on texts the ingestion embedded (up to `sample` of its
    distinct passages and windows, every n-th): (a) transformers in a process of its own, longest first
    in the server's passes, and (b) vLLM's pooling runner over HTTP; tokens/s of each and per core."""
    from django.conf import settings

    from bench.bench_embeddings import in_process, over_http, served
    from knowledge import chunking
    from knowledge.models import Chunk

    distinct: set[str] = set()
    for text in Chunk.objects.filter(collection=collection).order_by("id").values_list("text", flat=True):
        distinct.update((text, *chunking.windows(text)))
    texts = sorted(distinct)
    texts = sorted(texts[:: max(len(texts) // sample, 1)][:sample], key=len, reverse=True)
    path = FOLDER / "path-texts.json"
    path.write_text(json.dumps(texts))
    direct = in_process(len(texts), settings.EMBEDDING_MAX_BATCH, path)
    with served("vllm") as (url, pid):
        pooling = over_http(url, texts, direct["tokens"], server=pid)
    return {"in_process": direct, "vllm": pooling}

"""A 1.3 MB text PDF from upload to searchable (the issue's target: within 60 s on this 2-core host).

The PDF (bench/data/handbook.pdf, committed) is written by `handbook_pdf()`, the same bytes every time:
pages of made-up policy prose from a seeded generator, with one planted sentence whose passage the search
must find. The run takes the product's path with the real embedding engine, started here as `make run`
starts it: the upload as the web process stores it (knowledge.services.documents_add), then indexing as
the Celery task runs it (knowledge.indexing.index_collection: read in the bounded child process, cut,
embedded in batches, written), in this process, until the document is ready; then a question is embedded
and searched. Searchable: the planted passage is among the results.
"""

import asyncio
import random
import time
from pathlib import Path

from harness.pdf import pdf_with_lines

PDF = Path(__file__).resolve().parent / "data" / "handbook.pdf"
TARGET_BYTES = 1_300_000
LINES_A_PAGE = 50
PLANTED = "Claims under the equipment warranty must reach the Oslo service desk within 45 days of delivery."
QUESTION = "How long do I have to file an equipment warranty claim?"

_SUBJECTS = [
    "The team",
    "Each employee",
    "The finance office",
    "A manager",
    "The service desk",
    "Every contractor",
]
_VERBS = ["reviews", "records", "approves", "archives", "reports", "checks", "schedules", "updates"]
_OBJECTS = [
    "travel requests", "expense reports", "the quarterly budget", "access badges", "purchase orders",
    "the training calendar", "safety inspections", "supplier contracts", "leave requests",
    "the asset register",
]  # fmt: skip
_WHEN = [
    "every Monday",
    "before the end of each month",
    "within five working days",
    "once a quarter",
    "on request",
]


def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_WHEN)}."


def handbook_pdf() -> bytes:
    """About TARGET_BYTES of PDF, the planted sentence on the middle page."""
    rng = random.Random(1300)
    pages: list[list[str]] = []
    size = 0
    while size < TARGET_BYTES:
        lines, line = [], ""
        while len(lines) < LINES_A_PAGE:
            sentence = _sentence(rng)
            if len(line) + len(sentence) > 88:
                lines.append(line.strip())
                line = ""
            line += sentence + " "
        pages.append(lines)
        size += sum(len(x) + 8 for x in lines) + 180
    middle = pages[len(pages) // 2]
    middle[LINES_A_PAGE // 2] = PLANTED
    return pdf_with_lines(pages)


def _engine_counts(before: dict | None = None) -> dict:
    """The embedding engine's counters (since `before`): texts, tokens, forward passes and seconds."""
    import httpx
    from django.conf import settings
    from prometheus_client.parser import text_string_to_metric_families

    names = {
        "embedding_texts_total": "texts",
        "embedding_tokens_total": "tokens",
        "embedding_forward_passes_total": "passes",
        "embedding_forward_seconds_sum": "forward_s",
    }
    counts = dict.fromkeys(names.values(), 0.0)
    for family in text_string_to_metric_families(httpx.get(settings.EMBEDDING_URL + "/metrics").text):
        for sample in family.samples:
            if sample.name in names:
                counts[names[sample.name]] += sample.value
    return {name: round(value - (before or {}).get(name, 0), 2) for name, value in counts.items()}


def run_pdf() -> dict:
    """Upload to searchable, with the embedding engine and a Redis of this run's own."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.core.management import call_command

    from chatsite.celery import app
    from enginehost.embedlaunch import EmbeddingConfig
    from enginehost.launcher import EngineProcess
    from harness.processes import free_port, redis_serving
    from inference.engine import embedding_client
    from knowledge import indexing, search, services
    from knowledge.models import Document, Window

    data = PDF.read_bytes()
    assert data == handbook_pdf(), "bench/data/handbook.pdf is not what handbook_pdf() writes"
    call_command("migrate", verbosity=0)
    redis_url = f"redis://:bench-{free_port()}@127.0.0.1:{free_port()}/0"
    settings.REDIS_URL = redis_url
    # The upload queues its indexing task there (nothing here consumes it: this process indexes). The
    # write URL is the one the producer reads: the settings' broker URL takes precedence over broker_url.
    app.conf.broker_write_url = redis_url
    log = open(Path(settings.DATA_DIR) / "bench-embeddings.log", "w")  # noqa: SIM115 - closed below
    engine = EngineProcess(EmbeddingConfig.from_settings(settings), output=log)
    with redis_serving(redis_url, bundled=True):
        engine.start()
        try:
            engine.wait_healthy(timeout=300)
            owner, _ = get_user_model().objects.get_or_create(username="bench-pdf")
            collection = services.collection_create(owner=owner, name="Handbook")
            engine_before = _engine_counts()
            began = time.perf_counter()
            services.documents_add(collection=collection, uploads=[SimpleUploadedFile("handbook.pdf", data)])
            stored = time.perf_counter()
            outcome = "continue"
            while outcome == "continue":
                outcome = asyncio.run(
                    indexing.index_collection(collection_id=collection.pk, worker="bench/1", seconds=600)
                )
            indexed = time.perf_counter()
            counts = _engine_counts(engine_before)
            vector = embedding_client().embed([QUESTION], priority="query")[0]
            found = search.passages(question=QUESTION, query_vector=vector, collection_ids=[collection.pk])
            searchable = time.perf_counter()
        finally:
            engine.stop()
            log.close()
    document = Document.objects.get(collection=collection)
    return {
        "bytes": len(data),
        "pages": document.text.count("\f") + 1,
        "status": document.status,
        "error": document.error,
        "chunks": document.chunks_total,
        "tokens": sum(document.chunks.values_list("tokens", flat=True)),
        "upload_s": round(stored - began, 2),
        "indexing_s": round(indexed - stored, 2),
        "upload_to_searchable_s": round(searchable - began, 2),
        "windows": Window.objects.filter(chunk__document=document).count(),
        # What the embedding engine did while the document was indexed (its /metrics): texts, the
        # tokens it read, forward passes and their seconds; the rest of indexing_s is reading,
        # cutting and writing.
        "engine": counts,
        "planted_found": any(PLANTED in p.text for p in found),
        "outcome": outcome,
    }

"""Indexing survives its worker and Redis killed together (SIGKILL) mid-collection: a real Celery worker
(with beat, whose sweep queues again what the lost tasks left) on a Redis of its own, and the real
embedding engine, whose own counter of texts embedded shows that no stored passage was embedded twice."""

import shutil
import signal

import httpx
import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db.models import Count, F, Sum
from prometheus_client.parser import text_string_to_metric_families

from harness.processes import free_port, redis_data, redis_started, stop_group
from harness.waiting import wait_for
from knowledge import chunking, services
from knowledge.models import Chunk, Document
from tests.support.celery_worker import CeleryWorker, purge_broker
from tests.support.jobs_corpus import report

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]

DOCUMENTS = 24
BATCH = 8
LANES = 2  # documents indexed at once: each may have a batch in flight at the kill


def texts_embedded() -> int:
    """The embedding engine's own count of texts it embedded, every lane."""
    headers = {"Authorization": f"Bearer {settings.INFERENCE_API_KEY}"} if settings.INFERENCE_API_KEY else {}
    text = httpx.get(settings.EMBEDDING_URL + "/metrics", headers=headers, timeout=10).text
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "embedding_texts"
            for sample in family.samples
            if sample.name == "embedding_texts_total"
        )
    )


def kill(process) -> None:
    stop_group(process, signal.SIGKILL, 10)


def test_no_document_is_lost_or_embedded_twice_when_the_worker_and_redis_are_killed(tmp_path, alice):
    port = free_port()
    redis_url = f"redis://:kill-{free_port()}@127.0.0.1:{port}/0"
    data = redis_data(redis_url)
    redis_process = redis_started(redis_url)
    worker = CeleryWorker(
        "http://127.0.0.1:1",  # no chat engine: indexing needs only the embedding engine
        beat_schedule=tmp_path / "beat-schedule",
        REDIS_URL=redis_url,
        KNOWLEDGE_SWEEP_SECONDS="2",
        KNOWLEDGE_LEASE_SECONDS="10",
        KNOWLEDGE_EMBED_BATCH=str(BATCH),
        KNOWLEDGE_INDEX_DOCUMENTS=str(LANES),
    )
    before = texts_embedded()
    collection = services.collection_create(owner=alice, name="Reports")
    uploads = [
        SimpleUploadedFile(f"report-{i}.txt", report(400 + i, sentences=24).encode())
        for i in range(DOCUMENTS)
    ]
    services.documents_add(collection=collection, uploads=uploads)
    purge_broker()  # the upload's task went to the suite's Redis: the sweep finds the collection instead
    try:
        worker.start()
        stored = lambda: Chunk.objects.filter(collection=collection).count()  # noqa: E731
        # Killed with several batches stored and documents left: a run that embedded them again would show.
        wait_for(lambda: stored() >= 3 * BATCH, 300, "passages stored")
        worker.kill()
        kill(redis_process)
        shutil.rmtree(data, ignore_errors=True)  # a Redis that lost everything: no task, no lock survives
        stored_at_kill = stored()
        assert Document.objects.filter(collection=collection).exclude(status="ready").exists()

        redis_process = redis_started(redis_url)
        worker.start()
        wait_for(
            lambda: not Document.objects.filter(collection=collection).exclude(status="ready").exists(),
            300,
            "every document ready",
        )
    finally:
        worker.stop()
        kill(redis_process)
        shutil.rmtree(data, ignore_errors=True)

    documents = Document.objects.filter(collection=collection)
    assert documents.count() == DOCUMENTS
    assert not documents.exclude(chunks_done=F("chunks_total")).exists()
    passages = documents.aggregate(n=Sum("chunks_total"))["n"]
    assert Chunk.objects.filter(collection=collection).count() == passages > stored_at_kill
    # A batch is at most BATCH texts, a passage and its windows, or one passage with more windows.
    windows = (
        Chunk.objects.filter(collection=collection).annotate(n=Count("windows")).values_list("n", flat=True)
    )
    batch = max(BATCH, 1 + max(windows))
    # Each document's distinct texts: a sentence in two passages' overlap is embedded once.
    total = sum(
        len({text for passage in document.chunks.values_list("text", flat=True)
             for text in (passage, *chunking.windows(passage))})
        for document in documents
    )  # fmt: skip
    embedded = texts_embedded() - before
    # Every distinct text once, and at most each lane's batch in flight when the worker died again and
    # the overlap of the first passage stored after it (embedded with the passage before, stored before
    # the kill); embedding what was stored before the kill again would add at least 3 batches of passages
    # with their windows.
    assert total <= embedded <= total + 2 * batch * LANES, (embedded, total, stored_at_kill)

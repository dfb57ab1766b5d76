"""Documents into a collection: stored once by content, read, chunked, embedded and stored once each,
an interrupted document finished without embedding its stored chunks again, indexing waiting while chat
streams, quotas refused whole."""

import asyncio
import time
from datetime import timedelta

import numpy as np
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from httpkit.errors import Refusal
from inference.engine import embedding_client
from knowledge import chunking, claims, fulltext, indexing, services, tasks, vectors
from knowledge.models import Chunk, Document, Window
from redisconn.keys import CHAT_ACTIVE
from tests.support.jobs_pdf import pdf_with_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]


def upload(name: str, text: str | bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode() if isinstance(text, str) else text)


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("reader", password="pw-reader-123")


@pytest.fixture
def collection(owner):
    return services.collection_create(owner=owner, name="Handbook")


class CountingEmbedder:
    """The real embedding client, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = embedding_client()
        self.texts: list[str] = []
        self.requests: list[list[str]] = []

    async def aembed(self, texts, *, priority="bulk"):
        self.texts.extend(texts)
        self.requests.append(list(texts))
        return await self.inner.aembed(texts, priority=priority)


def index_counted(collection_id: int) -> CountingEmbedder:
    embedder = CountingEmbedder()
    real = indexing.embedding_client
    indexing.embedding_client = lambda: embedder
    try:
        assert index(collection_id) == "done"
    finally:
        indexing.embedding_client = real
    return embedder


def index(collection_id: int) -> str:
    return asyncio.run(indexing.index_collection(collection_id=collection_id, worker="test/1", seconds=120))


def long_text(topic: str, n: int = 400) -> str:
    return " ".join(f"{topic} sentence {i} about the {topic} policy." for i in range(n))


def test_it_stores_a_document_once_and_indexes_every_chunk_once(collection):
    result = services.documents_add(
        collection=collection,
        uploads=[upload("a.txt", long_text("holiday")), upload("b.md", "# Travel\n\nTrains are booked.")],
    )
    assert [d.name for d in result["added"]] == ["a.txt", "b.md"]
    again = services.documents_add(collection=collection, uploads=[upload("copy.txt", long_text("holiday"))])
    assert again["added"] == [] and again["duplicates"] == ["copy.txt"]
    assert index(collection.pk) == "done"
    for document in Document.objects.filter(collection=collection):
        assert document.status == Document.Status.READY, document.error
        positions = list(document.chunks.values_list("position", flat=True))
        assert positions == list(range(document.chunks_total)) and document.chunks_done == len(positions)
        assert document.chunker == chunking.chunker_id()
    assert fulltext.search("trains", [collection.pk], 5)


def test_an_interrupted_document_is_finished_without_embedding_its_stored_chunks_again(collection):
    services.documents_add(collection=collection, uploads=[upload("long.txt", long_text("pension", 600))])
    document = Document.objects.get(collection=collection)
    # A first worker reads the document, stores its first batch and dies.
    held = claims.document_claim(collection_id=collection.pk, worker="dead/1")
    pieces = chunking.pieces(held.text)
    assert len(pieces) > 10
    claims.document_chunker_set(
        document_id=held.pk, worker="dead/1", chunker=chunking.chunker_id(), total=len(pieces), tokens=0
    )
    first = pieces[:4]
    claims.chunks_store(
        document_id=held.pk,
        collection_id=collection.pk,
        worker="dead/1",
        chunker=chunking.chunker_id(),
        rows=[embedded(piece) for piece in first],
    )
    Document.objects.filter(pk=held.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    embedder = index_counted(collection.pk)
    # The pieces not stored, each distinct text once (a sentence in two passages' overlap too).
    left = [text for p in pieces[4:] for text in (p.text, *chunking.windows(p.text))]
    assert sorted(embedder.texts) == sorted(set(left)) and len(set(left)) < len(left)
    document.refresh_from_db()
    assert document.status == Document.Status.READY and document.attempts == 2
    assert list(document.chunks.values_list("position", flat=True)) == list(range(len(pieces)))
    assert Window.objects.filter(chunk__document=document).count() == sum(
        len(chunking.windows(p.text)) for p in pieces
    )
    # The dead worker, come back, can no longer write.
    assert not claims.chunks_store(
        document_id=held.pk, collection_id=collection.pk, worker="dead/1", chunker="x", rows=[]
    )
    assert not claims.document_finish(document_id=held.pk, worker="dead/1")


def indexed_while_chat_streams(collection, seconds: float) -> tuple[str, CountingEmbedder]:
    """A run of `seconds` over the collection with a long document, an answer streaming throughout."""
    services.documents_add(collection=collection, uploads=[upload("long.txt", long_text("leave"))])
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.zadd(CHAT_ACTIVE, {"answer-streaming": time.time() + 60})
    embedder = CountingEmbedder()
    real, indexing.embedding_client = indexing.embedding_client, lambda: embedder
    try:
        run = indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=seconds)
        return asyncio.run(run), embedder
    finally:
        indexing.embedding_client = real
        client.zrem(CHAT_ACTIVE, "answer-streaming")


@override_settings(KNOWLEDGE_EMBED_BATCH_WHILE_CHAT=0)
def test_while_chat_streams_indexing_waits_and_gives_its_document_back_at_the_runs_deadline(collection):
    outcome, embedder = indexed_while_chat_streams(collection, seconds=1)
    document = Document.objects.get(collection=collection)
    assert outcome == "continue" and embedder.texts == []
    # Given back whole, no attempt spent: chat ended, the next run indexes it.
    assert (document.status, document.claimed_by, document.attempts) == (Document.Status.PENDING, "", 0)
    assert index(collection.pk) == "done"


@override_settings(KNOWLEDGE_EMBED_BATCH_WHILE_CHAT=0, KNOWLEDGE_CHAT_WAIT_SECONDS=0.5)
def test_indexing_that_waited_its_longest_for_chat_sends_a_few_texts_all_the_same(collection):
    _, embedder = indexed_while_chat_streams(collection, seconds=3)
    # A request of 8 texts at most after each half second of waiting: some, never more.
    assert embedder.requests and all(len(texts) <= indexing.STARVED_BATCH for texts in embedder.requests)


@override_settings(KNOWLEDGE_EMBED_BATCH=40)
def test_each_distinct_text_is_embedded_once_in_requests_of_texts_of_about_one_length(collection):
    services.documents_add(collection=collection, uploads=[upload("long.txt", long_text("travel", 300))])
    embedder = index_counted(collection.pk)
    texts = [
        text
        for passage in Chunk.objects.filter(collection=collection).values_list("text", flat=True)
        for text in (passage, *chunking.windows(passage))
    ]
    assert sorted(embedder.texts) == sorted(set(texts)) and len(set(texts)) < len(texts)
    assert len(embedder.requests) > 1
    for request in embedder.requests:
        # Longest first, so a forward pass pads its texts to about one length.
        assert len(request) <= 40 and [len(t) for t in request] == sorted(map(len, request), reverse=True)
    # Every vector stored is its text's.
    chunk = Chunk.objects.filter(collection=collection).order_by("position")[3]
    own, *windows = embedding_client().embed([chunk.text, *chunking.windows(chunk.text)])
    stored = [vectors.from_bytes(bytes(w)) for w in chunk.windows.order_by("position").values_list(
        "embedding", flat=True)]  # fmt: skip
    assert np.allclose(vectors.from_bytes(bytes(chunk.embedding)), own, atol=1e-4)
    assert np.allclose(stored, windows, atol=1e-4)


def embedded(piece: chunking.Piece) -> tuple:
    """(piece, its vector, its windows' vectors), as indexing stores them."""
    own, *windows = embedding_client().embed([piece.text, *chunking.windows(piece.text)])
    return piece, own, windows


SENTENCES = (
    "The cafeteria menu changes every Monday and lists a soup, two salads and one hot dish. "
    "Printer toner is ordered by the office manager when the warning light turns amber. "
    "The fire drill takes place on the first Tuesday of each quarter at ten in the morning. "
    "Guests find the wireless network password on the card at the reception desk. "
)


def test_each_passage_is_stored_with_the_vectors_of_its_sentences(collection):
    services.documents_add(collection=collection, uploads=[upload("office.txt", SENTENCES * 4)])
    assert index(collection.pk) == "done"
    chunks = list(Chunk.objects.filter(collection=collection).order_by("position"))
    assert len(chunks) > 1
    for chunk in chunks:
        expected = chunking.windows(chunk.text)
        assert len(expected) > 3
        stored = list(
            chunk.windows.order_by("position").values_list("position", "embedding", "collection_id")
        )
        assert [(position, owner) for position, _, owner in stored] == [
            (i, collection.pk) for i in range(len(expected))
        ]
        # Each window's vector is its own sentence's, not its neighbour's.
        for (_, data, _), vector in zip(stored, embedding_client().embed(expected), strict=True):
            assert vectors.from_bytes(bytes(data)) @ np.asarray(vector) > 0.999


def test_a_new_window_size_cuts_and_embeds_the_windows_again(collection, monkeypatch):
    services.documents_add(collection=collection, uploads=[upload("office.txt", SENTENCES)])
    assert index(collection.pk) == "done"
    before = set(Window.objects.values_list("id", flat=True))
    chunk = Chunk.objects.get(collection=collection)
    assert len(before) == len(chunking.windows(chunk.text)) == 4
    queued = []
    monkeypatch.setattr(tasks.collection_index, "delay", queued.append)
    assert tasks.knowledge_sweep() == [] and queued == []  # the same chunker: nothing to do
    with override_settings(KNOWLEDGE_WINDOW_TOKENS=8):
        # The sweep sends the ready document back: searchable meanwhile, from its old passages.
        assert tasks.knowledge_sweep() == [collection.pk] and queued == [collection.pk]
        assert Document.objects.get(collection=collection).status == Document.Status.PENDING
        assert Chunk.objects.filter(collection=collection).exists()
        assert index(collection.pk) == "done"
        assert tasks.knowledge_sweep() == []
        document = Document.objects.get(collection=collection)
        assert document.chunker == chunking.chunker_id()
    chunk = Chunk.objects.get(collection=collection)
    after = set(chunk.windows.values_list("id", flat=True))
    assert not before & after
    assert len(after) == len(chunking.windows(chunk.text, size=8)) > len(before)


def test_a_pdf_is_read_in_the_child_process_and_its_passages_name_their_pages(collection):
    data = pdf_with_text(
        "The first page is about apples. " + "Apples grow on trees in orchards. " * 3,
        "The second page is about bicycles. " + "Bicycles have two wheels and pedals. " * 3,
    )
    services.documents_add(collection=collection, uploads=[upload("fruit.pdf", data)])
    with override_settings(KNOWLEDGE_CHUNK_TOKENS=16, KNOWLEDGE_CHUNK_OVERLAP=0):
        assert index(collection.pk) == "done"
    document = Document.objects.get(collection=collection)
    assert document.status == Document.Status.READY and document.source is None
    pages = dict(Chunk.objects.filter(document=document).values_list("text", "page"))
    assert any("bicycles" in text and page == 2 for text, page in pages.items())
    assert any("apples" in text and page == 1 for text, page in pages.items())


def test_an_unreadable_document_fails_with_its_reason_and_the_others_go_on(collection):
    services.documents_add(
        collection=collection,
        uploads=[upload("broken.pdf", b"%PDF-1.4 not really"), upload("fine.txt", "Fine text here.")],
    )
    assert index(collection.pk) == "done"
    broken = Document.objects.get(name="broken.pdf")
    assert broken.status == Document.Status.FAILED and broken.error
    assert Document.objects.get(name="fine.txt").status == Document.Status.READY


def test_deleting_a_document_or_a_collection_deletes_its_chunks_and_their_search_rows(collection, owner):
    services.documents_add(
        collection=collection, uploads=[upload("a.txt", "Zebras graze at noon. Lions sleep at dusk.")]
    )
    index(collection.pk)
    assert fulltext.search("zebras", [collection.pk], 5)
    assert Window.objects.count() == 2
    services.document_delete(document=Document.objects.get(collection=collection))
    assert not Chunk.objects.exists() and not Window.objects.exists()
    assert vectors.nearest(embedding_client().embed(["zebras"])[0], [collection.pk], 5) == []
    assert fulltext.search("zebras", [collection.pk], 5) == []
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM knowledge_chunk_fts WHERE knowledge_chunk_fts MATCH 'zebras'"
            )
            assert cursor.fetchone()[0] == 0
    other = services.collection_create(owner=owner, name="Other")
    services.documents_add(collection=other, uploads=[upload("b.txt", "Lions sleep. Zebras graze.")])
    index(other.pk)
    assert Window.objects.count() == 2
    services.collection_delete(collection=other)
    assert not Chunk.objects.exists() and not Document.objects.exists() and not Window.objects.exists()


def test_a_quota_refuses_the_whole_upload_and_stores_nothing(collection):
    with override_settings(KNOWLEDGE_MAX_DOCUMENTS_PER_USER=2):
        with pytest.raises(Refusal) as refused:
            services.documents_add(
                collection=collection, uploads=[upload(f"{i}.txt", f"text {i}") for i in range(3)]
            )
    assert refused.value.code == "quota_exceeded"
    assert not Document.objects.exists()
    with override_settings(KNOWLEDGE_MAX_BYTES_PER_USER=10):
        with pytest.raises(Refusal):
            services.documents_add(collection=collection, uploads=[upload("big.txt", "x" * 11)])
    assert not Document.objects.exists()

"""Run by test_knowledge_pgvector.py on a PostgreSQL with pgvector: the index is there and used, and it
finds what exact search finds."""

import asyncio

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from inference.engine import embedding_client
from knowledge import indexing, services, vectors
from knowledge.models import Chunk, Window

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]


def test_the_database_has_the_vector_index():
    assert vectors.has_index()


def test_the_index_finds_what_exact_search_finds():
    owner = get_user_model().objects.create_user("owner", password="pw-owner-123")
    collection = services.collection_create(owner=owner, name="Topics")
    topics = ["river", "forest", "harbour", "library", "stadium", "museum", "garden", "bridge"] * 25
    texts = [
        f"Note {i}: the {w} committee meets on day {i} to discuss {w} budgets." for i, w in enumerate(topics)
    ]
    services.documents_add(
        collection=collection,
        uploads=[SimpleUploadedFile(f"{i}.txt", t.encode()) for i, t in enumerate(texts)],
    )
    asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=300))
    assert collection.documents.filter(status="ready").count() == len(texts)
    found = 0
    for question in ("Who talks about the harbour?", "library money", "when does the garden group meet"):
        query = embedding_client().embed([question], priority="query")[0]
        approximate = [pk for pk, _ in vectors.approximate(query, [collection.pk], 10)]
        exact = [pk for pk, _ in vectors.exact(query, [collection.pk], 10)]
        assert len(approximate) == 10
        found += len(set(approximate) & set(exact))
    assert found / 30 >= 0.9
    assert np.isclose(
        vectors.approximate(query, [collection.pk], 1)[0][1],
        vectors.exact(query, [collection.pk], 1)[0][1],
        atol=1e-4,
    )


def test_windows_are_in_the_index_and_a_passage_ranks_by_its_best_one():
    owner = get_user_model().objects.create_user("owner", password="pw-owner-123")
    collection = services.collection_create(owner=owner, name="Office")
    text = (
        "The cafeteria menu changes every Monday. Printer toner is ordered when the light turns amber. "
        "The fire drill takes place on the first Tuesday of each quarter. Guests find the network "
        "password at reception."
    )
    services.documents_add(collection=collection, uploads=[SimpleUploadedFile("office.txt", text.encode())])
    asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=60))
    assert Window.objects.filter(collection=collection).count() == 4
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_window WHERE vector IS NULL")
        assert cursor.fetchone()[0] == 0
    query = embedding_client().embed(["When is the fire drill held?"], priority="query")[0]
    found = vectors.approximate(query, [collection.pk], 5)
    exact = vectors.exact(query, [collection.pk], 5)
    assert len(found) == 1 and found[0][0] == exact[0][0]
    assert np.isclose(found[0][1], exact[0][1], atol=1e-4)
    # Its best window's similarity, above the passage's own vector's.
    own = vectors.from_bytes(bytes(Chunk.objects.get(pk=found[0][0]).embedding)) @ np.asarray(query)
    assert found[0][1] > own + 0.1

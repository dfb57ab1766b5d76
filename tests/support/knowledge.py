"""What the chat page's knowledge tests share: a collection indexed in the test process, and a stored
answer whose question quoted passages."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections

from knowledge import indexing, services
from knowledge.models import Chunk, Collection, Document, Quote
from tests.support.chat_client import answered_turn

# One document of a few passages, each long enough that passages are most of a prompt, as real ones
# are (the prefix cache serves whole blocks of 32 tokens), and each about leave, so the first question
# quotes all of them and the follow-up finds the same ones.
LEAVE = (
    "Annual leave: every employee accrues twenty-five days of paid vacation per calendar year. "
    + (
        "Unused vacation days carry over until the end of March of the following year, after which "
        "they lapse; requests for vacation days go to your manager two weeks ahead and the team "
        "calendar shows who is away. "
    )
    * 6
)
HANDBOOK = {"leave.txt": LEAVE}


def _index(collection_id: int) -> str:
    try:
        return asyncio.run(indexing.index_collection(collection_id=collection_id, worker="t/1", seconds=120))
    finally:
        connections.close_all()


def indexed_collection(owner, name: str, documents: dict[str, str]) -> Collection:
    """A collection of `documents` ({name: text}), read, cut and embedded here."""
    collection = services.collection_create(owner=owner, name=name)
    uploads = [SimpleUploadedFile(n, text.encode()) for n, text in documents.items()]
    services.documents_add(collection=collection, uploads=uploads)
    # In a thread of its own: a browser test's thread runs Playwright's event loop.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(_index, collection.pk).result() == "done"
    return collection


def answered_with_sources(
    user, question: str, answer: str, passages: list[tuple[str, int | None, str]], collection: str = "Quoted"
):
    """A new conversation with one question and its finished answer, the question having quoted
    `passages` ((document name, page, text)) of a new collection as [1], [2], ... (stored as retrieval
    stores them). The conversation keeps the collection."""
    turn = answered_turn(user, question, answer)
    collection = services.collection_create(owner=user, name=collection)
    for n, (name, page, text) in enumerate(passages, 1):
        document = Document.objects.create(
            collection=collection, name=name, content_hash=f"{n:064x}", size=len(text), text=text,
            status=Document.Status.READY,
        )  # fmt: skip
        chunk = Chunk.objects.create(
            document=document, collection=collection, position=0, text=text, page=page, chunker="test",
            embedding=b"",
        )  # fmt: skip
        Quote.objects.create(message_id=turn.user_message_id, chunk=chunk, number=n)
    collection.conversations.add(turn.conversation_id)
    return turn

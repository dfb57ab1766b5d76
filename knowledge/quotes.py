"""The collections a conversation retrieves from, and the passages each of its questions quoted.

A conversation's questions retrieve from the collections attached to it that its owner may read at
the time of asking (sharing can be taken back). What a question quoted is stored (knowledge.models.Quote)
so every later prompt of the conversation is rebuilt with the same passages and numbers.
"""

from collections.abc import Iterable, Sequence

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction

from httpkit.errors import Refusal
from knowledge.models import Collection, Quote
from knowledge.search import Passage
from knowledge.selectors import collection_ids_checked, collection_ids_readable

# Collections one conversation may retrieve from at once.
MAX_COLLECTIONS = 20


def conversation_collections(*, conversation_id: int, user: AbstractBaseUser) -> list[int]:
    """The conversation's collections its owner, `user`, may read now (their groups as they are now)."""
    attached = list(Collection.objects.filter(conversations=conversation_id).values_list("pk", flat=True))
    if not attached:
        return []
    return collection_ids_readable(user, attached)


def conversation_collections_set(*, conversation_id: int, user, collection_ids: Sequence[int]) -> list[int]:
    """Attach exactly these collections to the user's conversation (the caller checked it is theirs);
    one the user may not read is `not_found`, as if it did not exist."""
    wanted = list(dict.fromkeys(collection_ids))
    if len(wanted) > MAX_COLLECTIONS:
        raise Refusal("invalid_field", f"a conversation retrieves from at most {MAX_COLLECTIONS} collections")
    collection_ids_checked(user, wanted)
    through = Collection.conversations.through
    with transaction.atomic():
        through.objects.filter(conversation_id=conversation_id).delete()
        through.objects.bulk_create(
            [through(conversation_id=conversation_id, collection_id=pk) for pk in wanted]
        )
    return wanted


def quotes_and_collections(
    *,
    message_ids: Iterable[int],
    asked: int,
    conversation_id: int,
    user: AbstractBaseUser | None,
    user_id: int,
) -> tuple[dict[int, list[tuple[int, bool, Passage]]], list[int]]:
    """What the messages quoted (quotes_of) and, unless the newest question `asked` quoted already,
    the collections it retrieves from now (its asker `user`, read by `user_id` where None): one trip
    to the database, on every answer of a conversation that has a history."""
    message_ids = list(message_ids)
    if not _quotes_or_collections(message_ids, conversation_id):
        return {}, []  # most conversations: the two reads below cost ten times this one
    quoted = quotes_of(message_ids)
    if asked in quoted:
        return quoted, []
    if user is None:
        user = get_user_model().objects.get(pk=user_id)
    return quoted, conversation_collections(conversation_id=conversation_id, user=user)


def _quotes_or_collections(message_ids: list[int], conversation_id: int) -> bool:
    """Whether the messages quoted anything or the conversation has collections: one small query,
    written out (the ORM's two would compile their joins on every answer)."""
    attached = Collection.conversations.through._meta.db_table
    marks = ", ".join(["%s"] * len(message_ids))
    quoted = f"SELECT 1 FROM {Quote._meta.db_table} WHERE message_id IN ({marks})"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {attached} WHERE conversation_id = %s)"
            + (f" OR EXISTS ({quoted})" if message_ids else ""),
            [conversation_id, *message_ids],
        )
        return bool(cursor.fetchone()[0])


def _passage(quote: Quote) -> Passage:
    chunk = quote.chunk
    return Passage(
        chunk_id=chunk.pk,
        document_id=chunk.document_id,
        document=chunk.document.name,
        collection_id=chunk.collection_id,
        position=chunk.position,
        page=chunk.page,
        text=chunk.text,
        tokens=chunk.tokens,
        score=0.0,
        similarity=None,
    )


def quotes_of(message_ids: Iterable[int]) -> dict[int, list[tuple[int, bool, Passage]]]:
    """{message id: [(number, new, passage)]} of the messages that quoted passages."""
    found: dict[int, list[tuple[int, bool, Passage]]] = {}
    rows = Quote.objects.filter(message_id__in=list(message_ids)).select_related("chunk__document")
    for quote in rows.order_by("message_id", "number"):
        found.setdefault(quote.message_id, []).append((quote.number, quote.new, _passage(quote)))
    return found


def quotes_store(
    *, message_id: int, numbered: Sequence[tuple[int, Passage]], cited: Sequence[tuple[int, int]]
) -> None:
    """What a question quoted: `numbered` new passages and `cited` (number, chunk id) quoted before."""
    Quote.objects.bulk_create(
        [Quote(message_id=message_id, chunk_id=p.chunk_id, number=n, new=True) for n, p in numbered]
        + [Quote(message_id=message_id, chunk_id=chunk, number=n, new=False) for n, chunk in cited],
        ignore_conflicts=True,
    )


def source_as_dict(number: int, passage: Passage) -> dict:
    return {
        "n": number,
        "document": passage.document_id,
        "document_name": passage.document,
        "collection": passage.collection_id,
        "page": passage.page,
        "chunk": passage.chunk_id,
        "text": passage.text,
    }


def sources_of(message_ids: Iterable[int]) -> dict[int, list[dict]]:
    """{user message id: its sources}: every passage its prompt held, by number."""
    return {
        message: [source_as_dict(n, p) for n, _, p in quoted]
        for message, quoted in quotes_of(message_ids).items()
    }

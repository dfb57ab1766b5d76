"""Recording reads of other users' conversations. Callers record before they answer, so a read
that could not be recorded is not served."""

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser

from audit.models import ConversationRead

SHELL = "(shell)"


def _reader(reader: AbstractBaseUser | None) -> dict:
    return {"reader": reader, "reader_name": reader.get_username() if reader is not None else SHELL}


def conversation_read_record(
    *,
    reader: AbstractBaseUser | None,
    owner_id: int | None,
    conversation_id: int | None,
    through: str,
    detail="",
) -> None:
    """One read: of a conversation, or (conversation_id None) of a list of them."""
    ConversationRead.objects.create(
        **_reader(reader),
        owner_id=owner_id,
        conversation_id=conversation_id,
        through=through,
        detail=detail[:500],
    )


def conversation_reads_record(
    *, reader: AbstractBaseUser | None, conversations: Iterable[tuple[int, int]], through: str, detail=""
) -> None:
    """Several reads at once: (conversation id, owner id) pairs; the reader's own are not recorded."""
    who = _reader(reader)
    own = reader.pk if reader is not None else None
    ConversationRead.objects.bulk_create(
        ConversationRead(**who, owner_id=owner, conversation_id=pk, through=through, detail=detail[:500])
        for pk, owner in conversations
        if owner != own
    )

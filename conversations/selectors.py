"""Reads of the conversation store, scoped to the requesting user (those with the
read_all_conversations permission may read all, recorded by their callers in audit)."""

from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.timezone import get_current_timezone, is_naive, make_aware

from conversations.models import Conversation, ConversationDocument, Message, SharedLink
from inference.engine import default_model

# The longest search term: a substring match reads every message it may match, and its cost grows
# with the term's length.
SEARCH_MAX_CHARS = 200

# Stopped answers count (the user saw them); failed or empty ones do not.
_PROMPT_STATUSES = (Message.Status.COMPLETE, Message.Status.STOPPED)


def conversation_list(
    *,
    user: AbstractBaseUser,
    search: str = "",
    since: datetime | None = None,
    owner_username: str | None = None,
    all_users: bool = False,
    archived: bool | None = None,
) -> QuerySet[Conversation]:
    """The user's conversations, newest first; `all_users` (callers check may_read_all) widens it
    to everyone's.

    `search` matches the title or any message's text, case-insensitively (a part of a word finds
    the word), within the conversations the other filters keep: only their messages are read.
    It is at most SEARCH_MAX_CHARS characters (ValueError). `archived`: only the archived ones
    (True) or only the others (False); None: both.
    """
    conversations = Conversation.objects.all() if all_users else Conversation.objects.filter(owner=user)
    if owner_username:
        conversations = conversations.filter(owner__username=owner_username)
    if since is not None:
        conversations = conversations.filter(updated_at__gte=since)
    if archived is not None:
        conversations = conversations.filter(archived=archived)
    if search:
        if len(search) > SEARCH_MAX_CHARS:
            raise ValueError(f"a search is at most {SEARCH_MAX_CHARS} characters")
        matching = Message.objects.filter(
            conversation__in=conversations.values("pk"), content__icontains=search
        ).values("conversation_id")
        conversations = conversations.filter(Q(title__icontains=search) | Q(pk__in=matching))
    return conversations.order_by("-updated_at", "-id")


def may_read_all(user: AbstractBaseUser) -> bool:
    """Whether `user` may read other users' conversations (each read is then recorded)."""
    # frontend: the store's app label, kept from before the rename (conversations.apps).
    return user.is_active and user.has_perm("frontend.read_all_conversations")


def since_from(raw: str) -> datetime:
    """The `since` filter: an ISO 8601 date (midnight) or date-time, naive ones in TIME_ZONE."""
    moment = parse_datetime(raw)
    if moment is None:
        day = parse_date(raw)
        if day is None:
            raise ValueError(f"{raw!r} is not an ISO 8601 date or date-time")
        moment = datetime(day.year, day.month, day.day)
    return make_aware(moment, get_current_timezone()) if is_naive(moment) else moment


def conversation_get(*, user: AbstractBaseUser, conversation_id: int) -> Conversation | None:
    """The user's conversation, or None: another user's id reads as missing."""
    return Conversation.objects.filter(owner=user, pk=conversation_id).first()


def message_get(*, user: AbstractBaseUser, message_id: int) -> Message | None:
    return Message.objects.filter(conversation__owner=user, pk=message_id).first()


def message_path(*, message: Message, messages: dict[int, Message] | None = None) -> list[Message]:
    """The messages from the conversation's root down to `message`, inclusive.

    `messages`, the conversation's messages by id, saves loading them again."""
    by_id = messages if messages is not None else {m.pk: m for m in message.conversation.messages.all()}
    path = []
    current: Message | None = by_id.get(message.pk, message)
    while current is not None:
        path.append(current)
        current = by_id.get(current.parent_id) if current.parent_id else None
    return path[::-1]


def conversation_prompt(*, leaf: Message) -> list[Message]:
    """The messages of the prompt ending at `leaf`: the path from the root that carries text."""
    return prompt_messages(message_path(message=leaf))


def prompt_messages(path: list[Message]) -> list[Message]:
    """A path's messages that carry text for the prompt."""
    return [m for m in path if m.status in _PROMPT_STATUSES and m.content]


def latest_leaf(*, message: Message) -> Message:
    """Follow the newest child from `message` down to a leaf."""
    children: dict[int, list[Message]] = {}
    for m in message.conversation.messages.exclude(parent=None):
        children.setdefault(m.parent_id, []).append(m)
    current = message
    while current.pk in children:
        current = max(children[current.pk], key=lambda m: (m.created_at, m.pk))
    return current


def message_as_dict(message: Message) -> dict:
    return {
        "id": message.pk,
        "parent": message.parent_id,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "note": message.note,
        "error_code": message.error_code,
        "finish_reason": message.finish_reason,
        "model": message.model_name,
        "usage": {
            "prompt_tokens": message.prompt_tokens,
            "cached_tokens": message.cached_tokens,
            "completion_tokens": message.completion_tokens,
        },
        "ttft_ms": message.ttft_ms,
        "duration_ms": message.duration_ms,
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "finished_at": message.finished_at.isoformat() if message.finished_at else None,
    }


def conversation_settings(conversation: Conversation) -> dict:
    return {
        "model": conversation.model_name or default_model(),
        "system_prompt": conversation.system_prompt,
        "temperature": conversation.temperature,
        "max_tokens": conversation.max_tokens,
        "min_tokens": conversation.min_tokens,
    }


def conversation_summary(conversation: Conversation) -> dict:
    return {
        "id": conversation.pk,
        "title": conversation.title,
        "owner": conversation.owner.get_username(),
        "created_at": conversation.created_at.isoformat(),
        "updated_at": conversation.updated_at.isoformat(),
        "pinned": conversation.pinned,
        "archived": conversation.archived,
        "settings": conversation_settings(conversation),
    }


# A search result's snippet: this many characters before the match, and after it.
SNIPPET_BEFORE, SNIPPET_AFTER = 40, 90


def search_snippets(conversation_ids: list[int], search: str) -> dict[int, str]:
    """For each conversation whose messages match `search`, the text around the first match in its
    earliest matching message, on one line; conversations matched by their title alone get none."""
    needle, snippets = search.lower(), {}
    matching = (
        Message.objects.filter(conversation_id__in=conversation_ids, content__icontains=search)
        .order_by("conversation_id", "created_at", "pk")
        .values_list("conversation_id", "content")
    )
    for conversation_id, content in matching.iterator():
        at = content.lower().find(needle)
        if conversation_id in snippets or at < 0:
            continue
        start, end = max(0, at - SNIPPET_BEFORE), at + len(needle) + SNIPPET_AFTER
        text = " ".join(content[start:end].split())
        snippets[conversation_id] = ("…" if start else "") + text + ("…" if end < len(content) else "")
    return snippets


def preamble(system_prompt: str, documents: Iterable[tuple[str, str]]) -> str:
    """The system message: the system prompt, then each attached document, named. It opens every
    turn's prompt unchanged, so the engine's prefix cache serves it after the first turn."""
    blocks = [system_prompt] if system_prompt else []
    documents = list(documents)
    if documents:
        blocks.append("The user attached these documents to the conversation:")
        blocks += [f'<document name="{name}">\n{text}\n</document>' for name, text in documents]
    return "\n\n".join(blocks)


def conversation_preamble(conversation: Conversation) -> str:
    return preamble(conversation.system_prompt, conversation.documents.values_list("name", "text"))


def document_as_dict(document: ConversationDocument) -> dict:
    return {
        "id": document.pk,
        "name": document.name,
        "tokens": document.tokens,
        "text": document.text,
        "created_at": document.created_at.isoformat(),
    }


def conversation_path(conversation: Conversation) -> list[Message]:
    """The version the conversation shows: its messages from the root to the current leaf."""
    if conversation.current_leaf_id is None:
        return []
    messages = {m.pk: m for m in conversation.messages.all()}
    leaf = messages.get(conversation.current_leaf_id)
    return message_path(message=leaf, messages=messages) if leaf is not None else []


def conversation_markdown(conversation: Conversation) -> str:
    """The shown version as a Markdown document: title, system prompt, then each turn."""
    parts = [f"# {conversation.title or 'Conversation'}", ""]
    if conversation.system_prompt:
        parts += ["**System prompt**", "", conversation.system_prompt, ""]
    for document in conversation.documents.all():
        parts += [f"**Document: {document.name}** ({document.tokens} tokens)", "", document.text, ""]
    for message in conversation_path(conversation):
        heading = "User" if message.role == Message.Role.USER else "Assistant"
        status = "" if message.status == Message.Status.COMPLETE else f" ({message.status})"
        parts += [f"## {heading}{status}", "", message.content, ""]
    return "\n".join(parts)


def shared_link_get(*, token: str) -> SharedLink | None:
    """A live shared link by its token; revoked ones, a deactivated owner's and unknown ones read alike."""
    return SharedLink.objects.filter(
        token=token, revoked_at=None, conversation__owner__is_active=True
    ).first()


def shared_links_live(*, user: AbstractBaseUser, conversation_id: int) -> list[SharedLink] | None:
    """The user's conversation's links that still work, newest first; None: no such conversation."""
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        return None
    return list(conversation.shared_links.filter(revoked_at=None).order_by("-created_at", "-pk"))


def conversation_detail(conversation: Conversation) -> dict:
    """A conversation with every message of every version, and the shown version's leaf."""
    return {
        **conversation_summary(conversation),
        "current_leaf": conversation.current_leaf_id,
        "documents": [document_as_dict(d) for d in conversation.documents.all()],
        "messages": [message_as_dict(m) for m in conversation.messages.all()],
    }


def answers_generating(*, started_before: datetime) -> list[int]:
    """The ids of the answers still generating that started before `started_before`."""
    return list(
        Message.objects.filter(status=Message.Status.GENERATING, created_at__lt=started_before).values_list(
            "pk", flat=True
        )
    )

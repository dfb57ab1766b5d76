"""The OpenAI API's exchanges kept in the store (`store: true`), each as a conversation of its own,
and their reads and changes as `/v1/chat/completions` lists, updates and deletes them."""

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from conversations.models import Conversation, Message, StoredCompletion
from conversations.services import title_from
from httpkit.pages import cursor_page


@transaction.atomic
def api_exchange_store(
    *,
    user: AbstractBaseUser,
    messages: list[dict[str, str]],
    model_name: str,
    answer: dict,
    completion_id: str | None = None,
    metadata: dict[str, str] | None = None,
) -> Conversation:
    """Record one OpenAI-API exchange (`store: true`) as a conversation of its own: the system
    messages as its system prompt, the other messages as one version, then the answer, whose
    fields are message_finish's; under `completion_id` it is a stored completion too."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    turns = [m for m in messages if m["role"] != "system"]
    first_question = next((m["content"] for m in turns if m["role"] == Message.Role.USER), "")
    conversation = Conversation.objects.create(
        owner=user,
        system_prompt=system,
        title=title_from(first_question) or "API request",
        model_name=model_name,
    )
    parent = None
    for turn in turns:
        parent = Message.objects.create(
            conversation=conversation, parent=parent, role=turn["role"], content=turn["content"]
        )
    reply = Message.objects.create(
        conversation=conversation,
        parent=parent,
        role=Message.Role.ASSISTANT,
        model_name=model_name,
        finished_at=timezone.now(),
        **answer,
    )
    conversation.current_leaf = reply
    conversation.save(update_fields=["current_leaf", "updated_at"])
    if completion_id is not None:
        StoredCompletion.objects.get_or_create(
            completion_id=completion_id,
            defaults={
                "owner": user,
                "conversation": conversation,
                "answer": reply,
                "model_name": model_name,
                "metadata": metadata or {},
            },
        )
    return conversation


def _visible(user: AbstractBaseUser, everyone: bool) -> QuerySet[StoredCompletion]:
    completions = StoredCompletion.objects.select_related("answer", "conversation")
    return completions if everyone else completions.filter(owner=user)


@dataclass(frozen=True)
class Page:
    completions: list[StoredCompletion]
    has_more: bool


def stored_completion_list(
    *,
    user: AbstractBaseUser,
    everyone: bool = False,
    model: str | None = None,
    metadata: dict[str, str] | None = None,
    after: str | None = None,
    limit: int = 20,
    order: str = "asc",
) -> Page:
    """One page of the user's stored completions (everyone's with `everyone`: callers check and
    record it), oldest first unless `order` is desc, past `after`'s when given (LookupError when
    `after` is not one the user sees)."""
    completions = _visible(user, everyone)
    if model:
        completions = completions.filter(model_name=model)
    for index, (key, value) in enumerate((metadata or {}).items()):
        # The key is a parameter of the query, never part of a lookup's name.
        completions = completions.annotate(**{f"meta_{index}": KeyTransform(key, "metadata")}).filter(
            **{f"meta_{index}": value}
        )
    rows, more = cursor_page(
        completions,
        visible=_visible(user, everyone),
        key="completion_id",
        after=after,
        limit=limit,
        descending=order == "desc",
    )
    return Page(rows, more)


def stored_completion_get(
    *, user: AbstractBaseUser, completion_id: str, everyone: bool = False
) -> StoredCompletion | None:
    """A stored completion the user sees, or None: another user's reads as missing."""
    return _visible(user, everyone).filter(completion_id=completion_id).first()


def stored_completion_messages(completion: StoredCompletion) -> list[dict[str, str]]:
    """The request's messages as they were sent: the system prompt (the system messages, joined)
    and the turns before the answer, each with an id of its own."""
    path, message = [], completion.answer.parent
    while message is not None:
        path.append(message)
        message = message.parent
    system = completion.conversation.system_prompt
    first = [{"id": f"{completion.completion_id}-system", "role": "system", "content": system}]
    return (first if system else []) + [
        {"id": f"{completion.completion_id}-{m.pk}", "role": m.role, "content": m.content}
        for m in reversed(path)
    ]


def stored_completion_update(
    *, user: AbstractBaseUser, completion_id: str, metadata: dict
) -> StoredCompletion:
    """Replace the metadata of one of the user's stored completions (LookupError when not theirs)."""
    completion = stored_completion_get(user=user, completion_id=completion_id)
    if completion is None:
        raise LookupError(completion_id)
    completion.metadata = metadata
    completion.save(update_fields=["metadata"])
    return completion


@transaction.atomic
def stored_completion_delete(*, user: AbstractBaseUser, completion_id: str) -> None:
    """Delete one of the user's stored completions with its conversation, which the chat and the
    store API then no longer show (LookupError when not theirs)."""
    completion = stored_completion_get(user=user, completion_id=completion_id)
    if completion is None:
        raise LookupError(completion_id)
    completion.conversation.delete()

"""A turn's life in the store: the user's message and the empty answer it starts, written
before the answer generates (a new conversation, the next turn, an edit, a regeneration, a
continuation past the length limit), the turn of an answer another process continues, and the
answer's end, written once. Consumers and views start turns here; what they refuse, they refuse
with a Refusal (httpkit.errors)."""

from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from conversations import selectors
from conversations.models import Conversation, Message
from conversations.services import conversation_create, title_from
from httpkit.errors import Refusal, not_found
from inference.access import models_for
from inference.engine import default_model


@dataclass(frozen=True)
class Turn:
    """A started chat turn: the stored user message and the assistant message to fill."""

    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    system_prompt: str
    history: list[dict[str, str]]
    temperature: float
    max_tokens: int
    min_tokens: int = 0
    model: str | None = None
    # The answer's text before this turn's stream: empty for a new answer, the text so far for one
    # continued past its length limit (chat_turn_continue), which the stream's tokens extend.
    prefix: str = ""
    # The ids of the user messages in `history`, in order: what each quoted is found by them.
    user_message_ids: tuple[int, ...] = ()
    # Whether the conversation may have collections to retrieve from: one made in this turn has none.
    retrieves: bool = True


def _owned_message(user: AbstractBaseUser, message_id: int, role: str) -> Message:
    message = selectors.message_get(user=user, message_id=message_id)
    if message is None:
        raise not_found("message")
    if message.role != role:
        raise Refusal("invalid_field", f"message {message_id} is not a {role} message")
    return message


def _refuse_if_busy(conversation: Conversation, messages: Iterable[Message] | None = None) -> None:
    """One answer at a time in a conversation; checked inside the transaction that stores the turn.

    `messages`, the conversation's messages when the caller has them, saves a query."""
    if messages is None:
        busy = conversation.messages.filter(status=Message.Status.GENERATING).exists()
    else:
        busy = any(m.status == Message.Status.GENERATING for m in messages)
    if busy:
        raise Refusal(
            "conversation_busy",
            "an answer is still being generated in this conversation",
            conversation=conversation.pk,
        )


def _available_model(conversation: Conversation, model: str) -> str:
    """`model` (empty: the default), refused unless its owner may use it."""
    model = model or default_model()
    # The default model is everyone's (inference.access): the common case costs no query.
    if model != default_model() and model not in models_for(user=conversation.owner):
        raise Refusal("invalid_field", f"the model {model!r} of this conversation is not available to you")
    return model


def _answer(
    conversation: Conversation,
    user_message: Message,
    earlier: list[Message] | None = None,
    *,
    new: bool = False,
) -> Turn:
    """Add an empty assistant answer to `user_message` and show it.

    `earlier`, the path down to the user message's parent when the caller has it, saves a query;
    so does `new` (a conversation made in this call has no documents yet)."""
    model = _available_model(conversation, conversation.model_name)
    assistant = Message.objects.create(
        conversation=conversation,
        parent=user_message,
        role=Message.Role.ASSISTANT,
        status=Message.Status.GENERATING,
        model_name=model,
    )
    conversation.current_leaf = assistant
    conversation.save(update_fields=["current_leaf", "updated_at"])
    return _turn(
        conversation,
        assistant,
        retrieves=not new,
        system_prompt=conversation.system_prompt if new else selectors.conversation_preamble(conversation),
        messages=(
            selectors.conversation_prompt(leaf=user_message)
            if earlier is None
            else selectors.prompt_messages([*earlier, user_message])
        ),
    )


def _turn(
    conversation: Conversation,
    assistant: Message,
    *,
    system_prompt: str,
    messages: list[Message],
    retrieves: bool = True,
) -> Turn:
    # A generating answer's stored text is what came before its stream (chat_turn_continue).
    return Turn(
        conversation_id=conversation.pk,
        user_message_id=assistant.parent_id,
        assistant_message_id=assistant.pk,
        system_prompt=system_prompt,
        history=[{"role": m.role, "content": m.content} for m in messages],
        user_message_ids=tuple(m.pk for m in messages if m.role == Message.Role.USER),
        temperature=(
            settings.CHAT_TEMPERATURE if conversation.temperature is None else conversation.temperature
        ),
        max_tokens=conversation.max_tokens or settings.CHAT_MAX_TOKENS,
        min_tokens=conversation.min_tokens or 0,
        model=assistant.model_name,
        prefix=assistant.content,
        retrieves=retrieves,
    )


def chat_turn_of_answer(*, message_id: int) -> Turn | None:
    """The turn of an answer still generating, for the process that continues it
    (answers.takeover); None when it has ended or is gone."""
    answer = (
        Message.objects.select_related("conversation", "parent")
        .filter(pk=message_id, role=Message.Role.ASSISTANT, status=Message.Status.GENERATING)
        .first()
    )
    if answer is None or answer.parent is None:
        return None
    return _turn_of(answer)


def _turn_of(answer: Message) -> Turn:
    """The turn of an answer already stored (continued by another process, or past its limit)."""
    conversation = answer.conversation
    return _turn(
        conversation,
        answer,
        system_prompt=selectors.conversation_preamble(conversation),
        messages=selectors.conversation_prompt(leaf=answer.parent),
    )


def _ask(
    conversation: Conversation,
    parent: Message | None,
    content: str,
    earlier: list[Message] | None = None,
    *,
    new: bool = False,
) -> Turn:
    if not conversation.title:
        conversation.title = title_from(content)
        conversation.save(update_fields=["title"])
    user_message = Message.objects.create(
        conversation=conversation, parent=parent, role=Message.Role.USER, content=content
    )
    return _answer(conversation, user_message, earlier, new=new)


@transaction.atomic
def chat_turn_start(
    *, user: AbstractBaseUser, conversation_id: int | None, content: str, parent_id: int | None = None
) -> Turn:
    """Store the user's message and an empty assistant message marked generating.

    The message follows `parent_id` when given (a message of the same conversation),
    otherwise the version the conversation shows.
    """
    # On the path of every answer's first token: as few queries as it takes.
    if conversation_id is None:
        if parent_id is not None:
            raise not_found("message")  # a new conversation has no messages to follow
        conversation = Conversation.objects.create(
            owner=user, system_prompt=settings.CHAT_SYSTEM_PROMPT, title=title_from(content)
        )
        return _ask(conversation, None, content, earlier=[], new=True)
    conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise not_found("conversation")
    messages = {m.pk: m for m in conversation.messages.all()}
    parent_key = conversation.current_leaf_id if parent_id is None else parent_id
    parent = messages.get(parent_key) if parent_key is not None else None
    if parent_id is not None and parent is None:
        raise not_found("message")
    _refuse_if_busy(conversation, messages.values())
    earlier = [] if parent is None else selectors.message_path(message=parent, messages=messages)
    return _ask(conversation, parent, content, earlier)


@transaction.atomic
def chat_turn_from_messages(
    *, user: AbstractBaseUser, messages: list[dict[str, str]], settings_data: dict
) -> Turn:
    """A new conversation from a whole message list (the OpenAI-style body of `POST /chat/stream`,
    checked by chat.protocol.StreamMessages): its system messages as the system prompt, the others
    stored as history, the last (a user message) answered. `settings_data`: temperature and
    max_tokens, checked as settings are."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    conversation = conversation_create(
        user=user, settings_data={**settings_data, **({"system_prompt": system} if system else {})}
    )
    parent = None
    for message in messages[:-1]:
        if message["role"] != "system":
            parent = Message.objects.create(conversation=conversation, parent=parent, **message)
    earlier = [] if parent is None else selectors.message_path(message=parent)
    return _ask(conversation, parent, messages[-1]["content"], earlier)


@transaction.atomic
def chat_turn_edit(*, user: AbstractBaseUser, message_id: int, content: str) -> Turn:
    """Send an edited copy of a user message as a new version of that turn."""
    original = _owned_message(user, message_id, Message.Role.USER)
    _refuse_if_busy(original.conversation)
    return _ask(original.conversation, original.parent, content)


@transaction.atomic
def chat_turn_regenerate(*, user: AbstractBaseUser, message_id: int) -> Turn:
    """Answer the user message that `message_id` (an answer) replied to once more, as a new version."""
    answer = _owned_message(user, message_id, Message.Role.ASSISTANT)
    _refuse_if_busy(answer.conversation)
    return _answer(answer.conversation, answer.parent)


@transaction.atomic
def chat_turn_continue(*, user: AbstractBaseUser, message_id: int) -> Turn:
    """Extend an answer that reached its length limit, in place: the same message generates again,
    from its text so far, with a fresh token budget (the engine gets the partial answer with
    `continue_final_message`, so the prefix cache serves the conversation and the answer)."""
    owned = _owned_message(user, message_id, Message.Role.ASSISTANT)
    # The conversation's row locked first (PostgreSQL): two continues at once see each other's
    # status, and only one starts generating.
    Conversation.objects.select_for_update().filter(pk=owned.conversation_id).first()
    answer = Message.objects.select_related("conversation").get(pk=owned.pk)
    if answer.status != Message.Status.COMPLETE or answer.finish_reason != "length":
        raise Refusal(
            "not_continuable",
            "only an answer cut off at its length limit can be continued",
            message=message_id,
        )
    conversation = answer.conversation
    _refuse_if_busy(conversation)
    _available_model(conversation, answer.model_name)
    # Its stored text stays as it is while it generates: the stream carries what follows.
    answer.status = Message.Status.GENERATING
    answer.finish_reason = answer.note = answer.error_code = ""
    answer.finished_at = None
    answer.save(update_fields=["status", "finish_reason", "note", "error_code", "finished_at"])
    conversation.current_leaf = answer
    conversation.save(update_fields=["current_leaf", "updated_at"])
    return _turn_of(answer)


def message_finish(
    *,
    message_id: int,
    content: str,
    status: str,
    finish_reason: str = "",
    note: str = "",
    error_code: str = "",
    prompt_tokens: int | None = None,
    cached_tokens: int | None = None,
    completion_tokens: int | None = None,
    ttft_ms: float | None = None,
    duration_ms: float | None = None,
) -> None:
    """Write the final state of an assistant message, once, when it ends."""
    Message.objects.filter(pk=message_id).update(
        content=content,
        status=status,
        finish_reason=finish_reason,
        note=note,
        error_code=error_code,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        ttft_ms=ttft_ms,
        duration_ms=duration_ms,
        finished_at=timezone.now(),
    )


def message_interrupt(*, message_id: int, streamed: str, note: str) -> int:
    """End an answer still generating as interrupted, its text what came before its stream and
    `streamed`, what its stream holds; 1, or 0 when it had ended meanwhile."""
    return Message.objects.filter(pk=message_id, status=Message.Status.GENERATING).update(
        content=Concat(F("content"), Value(streamed)),
        status=Message.Status.INTERRUPTED,
        error_code="interrupted",
        note=note,
        finished_at=timezone.now(),
    )

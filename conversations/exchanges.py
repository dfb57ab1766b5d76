"""The OpenAI API's exchanges kept in the store (`store: true`), each as a conversation of its own."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from conversations.models import Conversation, Message
from conversations.services import title_from


@transaction.atomic
def api_exchange_store(
    *, user: AbstractBaseUser, messages: list[dict[str, str]], model_name: str, answer: dict
) -> Conversation:
    """Record one OpenAI-API exchange (`store: true`) as a conversation of its own: the system
    messages as its system prompt, the other messages as one version, then the answer, whose
    fields are message_finish's."""
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
    return conversation

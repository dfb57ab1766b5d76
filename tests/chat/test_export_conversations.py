"""`manage.py export_conversations` writes one JSON line per conversation, filtered."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations import turns
from conversations.models import Conversation

pytestmark = pytest.mark.django_db


def export(*args: str) -> list[dict]:
    out = StringIO()
    call_command("export_conversations", "--format", "jsonl", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_it_exports_every_conversation_with_its_messages_and_filters_by_user_and_date():
    User = get_user_model()
    alice = User.objects.create_user("alice", password="pw-alice-123")
    bob = User.objects.create_user("bob", password="pw-bob-12345")
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="Ünïcode question")
    turns.message_finish(message_id=first.assistant_message_id, content="answer", status="complete")
    turns.chat_turn_start(user=bob, conversation_id=None, content="bob's")
    old = turns.chat_turn_start(user=alice, conversation_id=None, content="old")
    Conversation.objects.filter(pk=old.conversation_id).update(updated_at=timezone.now() - timedelta(days=30))

    lines = export()
    assert [line["id"] for line in lines] == sorted(line["id"] for line in lines)
    assert len(lines) == 3
    row = next(line for line in lines if line["id"] == first.conversation_id)
    assert [(m["role"], m["content"]) for m in row["messages"]] == [
        ("user", "Ünïcode question"),
        ("assistant", "answer"),
    ]
    assert {line["owner"] for line in export("--user", "alice")} == {"alice"}
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert {line["id"] for line in export("--since", since, "--user", "alice")} == {first.conversation_id}


def test_it_refuses_an_unknown_user_or_a_bad_date():
    with pytest.raises(CommandError, match="no such user"):
        export("--user", "nobody")
    with pytest.raises(CommandError, match="since"):
        export("--since", "last week")

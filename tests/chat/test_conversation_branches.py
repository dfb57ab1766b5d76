"""Versions of a turn: edit and regenerate add siblings that share their history."""

import pytest
from asgiref.sync import sync_to_async

from chat import retrieval
from conversations import selectors, services, turns
from conversations.models import Conversation, Message
from httpkit.errors import Refusal
from knowledge import quotes
from knowledge.models import Collection
from tests.support.knowledge import answered_with_sources

pytestmark = pytest.mark.django_db


def answered(turn: turns.Turn, text: str) -> Message:
    turns.message_finish(message_id=turn.assistant_message_id, content=text, status="complete")
    return Message.objects.get(pk=turn.assistant_message_id)


def test_it_chains_turns_and_titles_the_conversation_from_the_first_message(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="  Hello   there  ")
    answered(first, "Hi!")
    second = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="And?")
    conversation = Conversation.objects.get(pk=first.conversation_id)
    assert conversation.title == "Hello there"
    assert second.history == [
        {"role": "user", "content": "  Hello   there  "},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "And?"},
    ]
    user_message = Message.objects.get(pk=second.user_message_id)
    assert user_message.parent_id == first.assistant_message_id
    assert conversation.current_leaf_id == second.assistant_message_id


def test_it_sends_an_edit_as_a_sibling_that_shares_the_earlier_history(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    answered(first, "1")
    second = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Two")
    answered(second, "2")
    edited = turns.chat_turn_edit(user=alice, message_id=second.user_message_id, content="Zwei")
    original = Message.objects.get(pk=second.user_message_id)
    copy = Message.objects.get(pk=edited.user_message_id)
    assert copy.parent_id == original.parent_id == first.assistant_message_id
    assert [m["content"] for m in edited.history] == ["One", "1", "Zwei"]
    assert Conversation.objects.get(pk=first.conversation_id).current_leaf_id == edited.assistant_message_id


def test_it_edits_the_first_message_into_a_second_root(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    answered(first, "1")
    edited = turns.chat_turn_edit(user=alice, message_id=first.user_message_id, content="Uno")
    assert Message.objects.get(pk=edited.user_message_id).parent_id is None
    assert edited.history == [{"role": "user", "content": "Uno"}]


def test_it_regenerates_an_answer_beside_the_old_one_from_the_same_question(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    old = answered(first, "1")
    again = turns.chat_turn_regenerate(user=alice, message_id=old.pk)
    new = Message.objects.get(pk=again.assistant_message_id)
    assert new.parent_id == old.parent_id == first.user_message_id
    assert again.user_message_id == first.user_message_id
    assert again.history == [{"role": "user", "content": "One"}]


def test_it_refuses_to_regenerate_a_user_message_or_edit_an_answer(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    with pytest.raises(Refusal):
        turns.chat_turn_regenerate(user=alice, message_id=first.user_message_id)
    with pytest.raises(Refusal):
        turns.chat_turn_edit(user=alice, message_id=first.assistant_message_id, content="x")


def test_it_treats_another_users_messages_as_missing(alice, bob):
    theirs = turns.chat_turn_start(user=bob, conversation_id=None, content="secret")
    with pytest.raises(Refusal, match="no such"):
        turns.chat_turn_regenerate(user=alice, message_id=theirs.assistant_message_id)
    with pytest.raises(Refusal, match="no such"):
        turns.chat_turn_edit(user=alice, message_id=theirs.user_message_id, content="x")
    with pytest.raises(Refusal, match="no such"):
        services.conversation_show(
            user=alice, conversation_id=theirs.conversation_id, message_id=theirs.user_message_id
        )


def test_it_shows_the_newest_continuation_of_a_chosen_version(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    answered(first, "1")
    later = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Two")
    answered(later, "2")
    edited = turns.chat_turn_edit(user=alice, message_id=first.user_message_id, content="Uno")
    answered(edited, "uno")
    leaf = services.conversation_show(
        user=alice, conversation_id=first.conversation_id, message_id=first.user_message_id
    )
    assert leaf.pk == later.assistant_message_id
    following = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Three")
    assert [m["content"] for m in following.history] == ["One", "1", "Two", "2", "Three"]


def test_it_follows_an_explicit_parent_when_one_is_given(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    old = answered(first, "1")
    answered(turns.chat_turn_regenerate(user=alice, message_id=old.pk), "one")
    turn = turns.chat_turn_start(
        user=alice, conversation_id=first.conversation_id, content="Next", parent_id=old.pk
    )
    assert Message.objects.get(pk=turn.user_message_id).parent_id == old.pk
    with pytest.raises(Refusal, match="no such"):
        turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="x", parent_id=10**9)


def test_it_leaves_failed_and_empty_answers_out_of_the_prompt(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    turns.message_finish(message_id=first.assistant_message_id, content="", status="error")
    second = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Two")
    assert [m["content"] for m in second.history] == ["One", "Two"]


def test_it_uses_the_conversations_own_settings_for_its_answers(alice, settings):
    conversation = services.conversation_create(
        user=alice,
        settings_data={"system_prompt": "Be brief.", "temperature": 0, "max_tokens": 16, "min_tokens": 8},
    )
    turn = turns.chat_turn_start(user=alice, conversation_id=conversation.pk, content="Hi")
    assert (turn.system_prompt, turn.temperature, turn.max_tokens, turn.min_tokens) == (
        "Be brief.",
        0.0,
        16,
        8,
    )
    services.conversation_update_settings(
        user=alice,
        conversation_id=conversation.pk,
        data={"temperature": None, "max_tokens": None, "min_tokens": None},
    )
    answered(turn, "Hello")
    later = turns.chat_turn_start(user=alice, conversation_id=conversation.pk, content="Again")
    defaults = (settings.CHAT_TEMPERATURE, settings.CHAT_MAX_TOKENS, 0)
    assert (later.temperature, later.max_tokens, later.min_tokens) == defaults
    assert Conversation.objects.get(pk=conversation.pk).title == "Hi"


@pytest.mark.parametrize(
    "data, code",
    [
        ({"temperature": 2.5}, "invalid_field"),
        ({"temperature": -0.1}, "invalid_field"),
        ({"temperature": "hot"}, "invalid_field"),
        ({"temperature": True}, "invalid_field"),
        ({"max_tokens": 0}, "invalid_field"),
        ({"max_tokens": 1.5}, "invalid_field"),
        ({"max_tokens": 10**6}, "invalid_field"),
        ({"min_tokens": -1}, "invalid_field"),
        ({"min_tokens": 2.5}, "invalid_field"),
        ({"min_tokens": 10**6}, "invalid_field"),
        ({"system_prompt": 7}, "invalid_field"),
        ({"system_prompt": "x" * 5000}, "too_large"),
    ],
)
def test_it_refuses_settings_outside_their_bounds(alice, data, code):
    conversation = services.conversation_create(user=alice)
    with pytest.raises(Refusal) as refused:
        services.conversation_update_settings(user=alice, conversation_id=conversation.pk, data=data)
    assert refused.value.code == code


def test_it_searches_titles_and_message_text_of_the_users_own_conversations(alice, bob):
    about_tea = turns.chat_turn_start(user=alice, conversation_id=None, content="Tell me about tea")
    answered(about_tea, "Green and BLACK varieties.")
    turns.chat_turn_start(user=alice, conversation_id=None, content="Coffee")
    turns.chat_turn_start(user=bob, conversation_id=None, content="black tea for bob")
    found = lambda q: [c.pk for c in selectors.conversation_list(user=alice, search=q)]  # noqa: E731
    assert found("TEA") == [about_tea.conversation_id]
    assert found("black") == [about_tea.conversation_id]
    assert found("nothing like it") == []


def test_it_renames_without_reordering_and_deletes_with_every_message(alice):
    older = turns.chat_turn_start(user=alice, conversation_id=None, content="Older")
    newer = turns.chat_turn_start(user=alice, conversation_id=None, content="Newer")
    services.conversation_rename(user=alice, conversation_id=older.conversation_id, title="  Renamed  one ")
    assert [c.title for c in selectors.conversation_list(user=alice)] == ["Newer", "Renamed one"]
    with pytest.raises(Refusal):
        services.conversation_rename(user=alice, conversation_id=older.conversation_id, title="  ")
    services.conversation_delete(user=alice, conversation_id=newer.conversation_id)
    assert not Message.objects.filter(conversation_id=newer.conversation_id).exists()


def test_it_refuses_a_turn_while_the_conversation_is_still_answering(alice):
    first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    with pytest.raises(Refusal) as refused:
        turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Two")
    assert (refused.value.code, refused.value.extra) == (
        "conversation_busy",
        {"conversation": first.conversation_id},
    )
    assert Message.objects.filter(conversation_id=first.conversation_id).count() == 2
    with pytest.raises(Refusal, match="still being generated"):
        turns.chat_turn_edit(user=alice, message_id=first.user_message_id, content="One again")
    with pytest.raises(Refusal, match="still being generated"):
        turns.chat_turn_regenerate(user=alice, message_id=first.assistant_message_id)
    assert Message.objects.filter(conversation_id=first.conversation_id).count() == 2


def test_it_stores_a_turn_in_few_queries_whatever_the_history(alice, django_assert_max_num_queries):
    # Storing the turn is on the path of every answer's first token.
    with django_assert_max_num_queries(6):  # BEGIN, conversation, 2 messages, leaf, COMMIT
        first = turns.chat_turn_start(user=alice, conversation_id=None, content="One")
    answered(first, "1")
    for n in range(5):
        answered(
            turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content=f"{n}"), "ok"
        )
    with django_assert_max_num_queries(8):  # ... plus the conversation's messages and its documents
        turn = turns.chat_turn_start(user=alice, conversation_id=first.conversation_id, content="Last")
    assert len(turn.history) == 2 * 6 + 1


@pytest.mark.django_db(transaction=True)
async def test_a_follow_up_reads_what_its_history_quoted_and_its_collections_in_one_trip(alice, monkeypatch):
    # Every answer of a conversation with a history reads both, in the database thread answers queue for.
    first = await sync_to_async(turns.chat_turn_start)(user=alice, conversation_id=None, content="One")
    await sync_to_async(answered)(first, "1")
    turn = await sync_to_async(turns.chat_turn_start)(
        user=alice, conversation_id=first.conversation_id, content="Two"
    )
    trips, real = [], retrieval.database_sync_to_async
    monkeypatch.setattr(retrieval, "database_sync_to_async", lambda call: trips.append(call) or real(call))
    retrieved = await retrieval.with_passages(turn, user=None, user_id=alice.pk, history=turn.history)
    assert retrieved.history == turn.history and retrieved.sources == []
    assert trips == [quotes.quotes_and_collections]


def test_a_follow_up_still_reads_what_its_history_quoted_once_its_collections_are_gone(alice):
    passage = ("leave.txt", None, "25 days of leave.")
    quoted = answered_with_sources(alice, "Leave?", "25 days [1].", [passage])
    follow_up = turns.chat_turn_start(user=alice, conversation_id=quoted.conversation_id, content="And?")

    def read(turn: turns.Turn):
        found, collections = quotes.quotes_and_collections(
            message_ids=turn.user_message_ids,
            asked=turn.user_message_id,
            conversation_id=turn.conversation_id,
            user=alice,
            user_id=alice.pk,
        )
        return {message: [n for n, _, _ in rows] for message, rows in found.items()}, collections

    attached = Collection.objects.filter(conversations=quoted.conversation_id)
    attached = list(attached.values_list("pk", flat=True))
    assert read(follow_up) == ({quoted.user_message_id: [1]}, attached)
    Collection.conversations.through.objects.filter(conversation_id=quoted.conversation_id).delete()
    assert read(follow_up) == ({quoted.user_message_id: [1]}, [])
    bare = turns.chat_turn_start(user=alice, conversation_id=None, content="Hi")
    answered(bare, "Hello")
    bare_follow_up = turns.chat_turn_start(user=alice, conversation_id=bare.conversation_id, content="So?")
    assert read(bare_follow_up) == ({}, [])

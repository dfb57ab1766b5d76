"""Store search reads only the requester's messages, and its term is bounded: another user's stored
text costs a search nothing, and a long term is refused before any query."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations import selectors, turns
from tests.support.api_keys import bearer

pytestmark = pytest.mark.django_db


def message_reads(queries) -> list[str]:
    """The part of each query from its read of the messages' table on."""
    # frontend: the store's app label, kept from before the rename (conversations.apps), names its tables.
    return [
        q["sql"][q["sql"].index('FROM "frontend_message"') :]
        for q in queries
        if 'FROM "frontend_message"' in q["sql"]
    ]


def test_the_message_match_reads_only_the_requesters_conversations(client, alice, bob):
    turns.chat_turn_start(user=alice, conversation_id=None, content="the needle of alice")
    turns.chat_turn_start(user=bob, conversation_id=None, content="the needle of bob")
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/conversations/?search=needle", headers=bearer(alice, "store.read"))
    assert response.status_code == 200
    assert [r["snippet"] for r in response.json()["results"]] == ["the needle of alice"]
    reads = message_reads(queries.captured_queries)
    assert reads, "the search reads messages"
    for sql in reads:
        # The messages' subquery is restricted to conversations of the requester, not all users' rows.
        assert '"owner_id" =' in sql or 'conversation_id" IN (' in sql, sql


def test_the_subquery_is_scoped_by_the_same_filters_as_the_list(alice, bob):
    query = str(selectors.conversation_list(user=alice, search="needle").query)
    messages = query[query.index('FROM "frontend_message"') :]
    assert '"owner_id" =' in messages, "the messages' subquery scans every user's rows"


def test_a_search_term_past_its_bound_is_refused_clearly(client, alice):
    headers = bearer(alice, "store.read")
    longest = "x" * selectors.SEARCH_MAX_CHARS
    assert client.get(f"/api/conversations/?search={longest}", headers=headers).status_code == 200
    response = client.get(f"/api/conversations/?search={longest}x", headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_field"
    assert str(selectors.SEARCH_MAX_CHARS) in error["detail"]
    with pytest.raises(ValueError):
        selectors.conversation_list(user=alice, search=longest + "x")

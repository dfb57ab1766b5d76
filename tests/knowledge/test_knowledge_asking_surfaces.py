"""Asking collections over the chat's HTTP stream (SSE) and the OpenAI-compatible API, with the real
engines behind a real web process: the answer names its sources, and nobody retrieves from a collection
they cannot read, whether it is another user's, a group's they are not in, or one taken back since."""

import json

import httpx
import pytest
from django.contrib.auth.models import Group

from conversations.models import Conversation
from knowledge import quotes
from knowledge.models import Collection, Quote
from tests.support.api_keys import bearer
from tests.support.knowledge import HANDBOOK, indexed_collection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]

PAY = {
    "pay.txt": "Payroll: salaries are paid on the last working day of every month, by bank transfer; "
    "vacation days taken are shown on each payslip. " * 4
}
QUESTION = "How many vacation days do I get, and when are salaries paid?"


@pytest.fixture
def library(alice, django_user_model):
    """alice's private handbook, and her pay collection shared with the group `hr`, which carol is in."""
    hr = Group.objects.create(name="hr")
    carol = django_user_model.objects.create_user("carol", password="pw-carol-12345")
    carol.groups.add(hr)
    private = indexed_collection(alice, "Handbook", HANDBOOK)
    shared = indexed_collection(alice, "Pay", PAY)
    shared.visibility = Collection.Visibility.GROUPS
    shared.save()
    shared.groups.add(hr)
    return {"private": private, "shared": shared, "carol": carol, "hr": hr}


def api_ask(base: str, user, collections: list[int], *, stream: bool = False) -> httpx.Response | list:
    headers = bearer(user, "openai")
    model = httpx.get(base + "/v1/models", headers=headers).json()["data"][0]["id"]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 8,
        "temperature": 0,
        "collections": collections,
        "stream": stream,
    }
    if not stream:
        return httpx.post(base + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=120) as r:
        assert r.status_code == 200, r.read()
        return [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]


def sse_ask(base: str, user, conversation: int) -> tuple[dict, dict]:
    """The opening and closing events of a question asked over `POST /chat/stream`."""
    with httpx.stream(
        "POST",
        base + "/chat/stream",
        json={"prompt": QUESTION, "conversation": conversation},
        headers=bearer(user, "chat"),
        timeout=120,
    ) as response:
        assert response.status_code == 200, response.read()
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return json.loads(events[0]), json.loads(events[-2])


def not_found_body(response: httpx.Response, collection_id: int) -> dict:
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["param"] == "collections"
    return {**error, "message": error["message"].replace(str(collection_id), "ID")}


def test_the_api_answers_from_the_collections_a_key_may_read_and_refuses_the_others(
    product_server, alice, bob, library
):
    private, shared, carol = library["private"], library["shared"], library["carol"]
    answered = api_ask(product_server, alice, [private.pk])
    assert answered.status_code == 200, answered.text
    sources = answered.json()["sources"]
    assert sources and {s["document_name"] for s in sources} == {"leave.txt"}
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))

    missing = not_found_body(api_ask(product_server, bob, [10**9]), 10**9)
    # Another user's collection, and a group's the asker is not in, read as one that does not exist.
    assert not_found_body(api_ask(product_server, bob, [private.pk]), private.pk) == missing
    assert not_found_body(api_ask(product_server, bob, [shared.pk]), shared.pk) == missing
    # One of two not readable refuses the whole request: nothing is answered from the other.
    assert not_found_body(api_ask(product_server, carol, [shared.pk, private.pk]), private.pk) == missing

    events = api_ask(product_server, carol, [shared.pk], stream=True)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    closing = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert closing["sources"] and {s["collection"] for s in closing["sources"]} == {shared.pk}
    assert all("sources" not in c for c in chunks if c is not closing)

    carol.groups.remove(library["hr"])
    assert not_found_body(api_ask(product_server, carol, [shared.pk]), shared.pk) == missing


def test_the_chat_stream_retrieves_only_from_the_collections_its_asker_reads_now(
    product_server, bob, library
):
    private, shared, carol = library["private"], library["shared"], library["carol"]
    private.visibility = Collection.Visibility.SITE
    private.save()
    conversations = []
    for user in (carol, bob, carol):
        conversation = Conversation.objects.create(owner=user, max_tokens=8, temperature=0)
        readable = [shared.pk, private.pk] if user == carol else [private.pk]
        quotes.conversation_collections_set(
            conversation_id=conversation.pk, user=user, collection_ids=readable
        )
        conversations.append(conversation.pk)

    # While both are readable, the question finds passages of both.
    _, both = sse_ask(product_server, carol, conversations[0])
    assert {s["collection"] for s in both["sources"]} == {shared.pk, private.pk}

    # The handbook is taken back: bob's conversation retrieves nothing, carol's only the group's.
    private.visibility = Collection.Visibility.PRIVATE
    private.save()
    _, nothing = sse_ask(product_server, bob, conversations[1])
    assert nothing["status"] == "complete" and "sources" not in nothing
    assert not Quote.objects.filter(message__conversation_id=conversations[1]).exists()
    _, group_only = sse_ask(product_server, carol, conversations[2])
    assert group_only["sources"] and {s["collection"] for s in group_only["sources"]} == {shared.pk}
    # Out of the group, carol's conversation holding both retrieves nothing new.
    carol.groups.remove(library["hr"])
    started, after = sse_ask(product_server, carol, conversations[0])
    assert after["status"] == "complete" and "sources" not in after
    assert not Quote.objects.filter(message_id=started["user_message"]).exists()

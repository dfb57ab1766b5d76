"""Documents in a chat: attached files' text opens every turn's prompt after the system prompt,
counted against the context window (refused with the numbers, never cut), removable, in the store."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from chat import consumers, views
from conversations import services
from conversations.models import ConversationDocument
from harness.waiting import wait_for
from tests.support.chat_client import browser, collect_answer, open_chat, send
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def engine(monkeypatch):
    # The fake engine counts a word as a token, plus 10 for the template.
    fake = FakeEngine(["ok"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    monkeypatch.setattr(views, "engine_client", lambda: fake)
    return fake


def attach(client: Client, conversation_id: int, name: str, data: bytes):
    token = client.cookies["csrftoken"].value
    return client.post(
        f"/c/{conversation_id}/documents", {"file": SimpleUploadedFile(name, data)}, HTTP_X_CSRFTOKEN=token
    )


async def ask(user, conversation_id: int, content: str) -> dict:
    communicator = await connected(user)
    try:
        await communicator.send_json_to(
            {"type": "chat.send", "conversation": conversation_id, "content": content}
        )
        return (await until_closed(communicator))[-1]
    finally:
        await communicator.disconnect()


async def test_it_puts_attached_documents_after_the_system_prompt_on_every_turn(alice, engine):
    conversation = await sync_to_async(services.conversation_create)(
        user=alice, settings_data={"system_prompt": "Be brief."}
    )
    client = await sync_to_async(browser)(alice)
    response = await sync_to_async(attach)(
        client, conversation.pk, "notes.md", b"The lighthouse is 42 metres tall."
    )
    assert response.status_code == 201
    assert response.json()["name"] == "notes.md" and response.json()["tokens"] > 5
    for question in ("How tall is it?", "And in feet?"):
        assert (await ask(alice, conversation.pk, question))["type"] == "chat.done"
    for request in engine.requests:
        system = request.messages[0]
        assert system["role"] == "system" and system["content"].startswith("Be brief.\n\n")
        assert (
            '<document name="notes.md">\nThe lighthouse is 42 metres tall.\n</document>' in system["content"]
        )
    # The same opening both times: what the prefix cache serves from the second turn on.
    assert engine.requests[0].messages[0] == engine.requests[1].messages[0]
    detail = await sync_to_async(lambda: client.get(f"/api/conversations/{conversation.pk}/").json())()
    assert [(d["name"], d["text"]) for d in detail["documents"]] == [
        ("notes.md", "The lighthouse is 42 metres tall.")
    ]
    exported = await sync_to_async(
        lambda: client.get(f"/c/{conversation.pk}/export?format=md").content.decode()
    )()
    assert "**Document: notes.md**" in exported

    [document] = [d async for d in ConversationDocument.objects.all()]
    token = client.cookies["csrftoken"].value
    removed = await sync_to_async(client.post)(
        f"/c/{conversation.pk}/documents/{document.pk}/remove",
        "{}",
        "application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert removed.status_code == 200
    await ask(alice, conversation.pk, "Still there?")
    assert "lighthouse" not in engine.requests[-1].messages[0]["content"]


def test_it_refuses_a_document_that_does_not_fit_with_the_numbers_and_keeps_nothing(alice, engine, settings):
    settings.INFERENCE_MAX_MODEL_LEN = 1000
    settings.CHAT_MAX_TOKENS = 512
    conversation = services.conversation_create(user=alice)
    client = browser(alice)
    response = attach(client, conversation.pk, "long.txt", ("word " * 400).encode())
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "too_large"
    assert "long.txt is 4" in error["detail"] and "1,000-token context window" in error["detail"]
    assert "512-token answer" in error["detail"] and "Nothing was cut" in error["detail"]
    assert not ConversationDocument.objects.exists()
    assert attach(client, conversation.pk, "short.txt", b"A few words.").status_code == 201


def test_it_refuses_other_files_other_users_and_strangers(alice, bob, engine):
    conversation = services.conversation_create(user=alice)
    client = browser(alice)
    refused = attach(client, conversation.pk, "tool.exe", b"MZ")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_field")
    assert attach(browser(bob), conversation.pk, "a.txt", b"hi").status_code == 404
    assert (
        Client()
        .post(f"/c/{conversation.pk}/documents", {"file": SimpleUploadedFile("a.txt", b"x")})
        .status_code
        == 401
    )
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(alice)
    assert (
        forged.post(
            f"/c/{conversation.pk}/documents", {"file": SimpleUploadedFile("a.txt", b"x")}
        ).status_code
        == 403
    )
    assert not ConversationDocument.objects.exists()
    assert json.loads(client.get(f"/api/conversations/{conversation.pk}/").content)["documents"] == []


def test_the_engines_prefix_cache_serves_an_attached_document_from_the_second_turn(
    product_server, ws_url, origin
):
    user = get_user_model().objects.create_user("mia", password="pw-mia-123456")
    conversation = services.conversation_create(user=user, settings_data={"max_tokens": 8, "temperature": 0})
    report = " ".join(f"Section {i}: the harbour lamp was relit on day {i} of the storm." for i in range(30))
    client = browser(user)
    response = attach(client, conversation.pk, "harbour.txt", report.encode())
    assert response.status_code == 201
    tokens = response.json()["tokens"]
    assert tokens > 300  # counted by the real engine
    usages = []
    with open_chat(ws_url, origin, user) as ws:
        for question in ("When was the lamp relit?", "On which day of the storm?"):
            send(ws, {"type": "chat.send", "conversation": conversation.pk, "content": question})
            _, _, done = collect_answer(ws)
            assert done["type"] == "chat.done", done
            usages.append(done["usage"])
    assert usages[0]["prompt_tokens"] > tokens
    # The second turn's prompt opens with the same system message and document: served from cache.
    assert usages[1]["cached_tokens"] >= tokens


def test_a_hostile_html_attachment_is_refused_clearly_and_other_chats_wait_for_nothing(product_server):
    """`<a<a<a…` made the standard library's parser quadratic: 64 KB stalled the web process for
    seconds and every chat it served with it; 10 MiB would have taken a day. It is read in the
    bounded child process now, and the web process only awaits it."""
    import threading
    import time

    import httpx

    from tests.support.chat_client import session_cookie

    user = get_user_model().objects.create_user("hal", password="pw-hal-123456")
    conversation = services.conversation_create(user=user)
    cookies = {"sessionid": session_cookie(user), "csrftoken": "t" * 32}
    headers = {"X-CSRFToken": "t" * 32, "Referer": product_server + "/"}
    payload = b"<html><body>" + b"<a" * (4 * 1024 * 1024)
    outcome = {}

    def upload() -> None:
        with httpx.Client(base_url=product_server, cookies=cookies, headers=headers, timeout=120) as client:
            outcome["response"] = client.post(
                f"/c/{conversation.pk}/documents", files={"file": ("page.html", payload, "text/html")}
            )

    uploading = threading.Thread(target=upload)
    uploading.start()
    slowest = 0.0
    with httpx.Client(base_url=product_server, timeout=30) as other:
        while uploading.is_alive():
            started = time.monotonic()
            assert other.get("/healthz/live").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.02)
    uploading.join()
    response = outcome["response"]
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_field")
    assert response.json()["error"]["detail"] == "page.html: The HTML has no text."
    # Another client's probe is answered in its usual time throughout (5 ms idle; the old parse of
    # 64 KB alone held it 200 ms, and this file is 128 times that).
    assert slowest < 1.0, slowest
    assert not ConversationDocument.objects.exists()


def test_a_long_text_is_refused_by_its_length_before_the_engine_counts_it(
    alice, engine, settings, monkeypatch
):
    """A 1 MiB text was counted by the engine (362,263 tokens), twice, before it was refused."""
    settings.INFERENCE_MAX_MODEL_LEN = 4096
    settings.CHAT_MAX_TOKENS = 512
    counted = []
    monkeypatch.setattr(engine, "count_prompt_tokens", lambda messages: counted.append(messages))
    conversation = services.conversation_create(user=alice)
    response = attach(browser(alice), conversation.pk, "big.txt", b"word " * (1024 * 1024 // 5))
    assert (response.status_code, response.json()["error"]["code"]) == (413, "too_large")
    assert "1,048,575 characters" in response.json()["error"]["detail"]
    assert counted == []
    assert not ConversationDocument.objects.exists()


def test_a_user_reads_one_attachment_at_a_time_and_a_process_a_few(alice, bob, engine, settings, monkeypatch):
    """Each attachment is read by a child process of the web process: three at once from one user were
    all parsed. The child here spins until its wall-clock limit, so the first holds its slot."""
    from documents import reader

    monkeypatch.setattr(reader, "CHILD", "tests.support.document_probe")
    settings.BULK_PDF_TIMEOUT = 3
    settings.CHAT_DOCUMENT_READS_PER_PROCESS = 2
    carol = get_user_model().objects.create_user("carol", password="pw-carol-12345")
    chats = {user: services.conversation_create(user=user) for user in (alice, bob, carol)}

    def spin(user, name):
        return attach(browser(user), chats[user].pk, name, b"spin")

    import threading

    from django.db import connections

    results = {}

    def in_thread(user, name):
        try:
            results[user.username] = spin(user, name)
        finally:
            connections.close_all()  # the thread's own database connection

    first = threading.Thread(target=in_thread, args=(alice, "a.txt"))
    first.start()
    wait_for(lambda: redis_reads(alice) == 1, 20, "the first read started", every=0.02)
    second = spin(alice, "b.txt")
    assert (second.status_code, second.json()["error"]["reason"]) == (429, "user_document_reads")
    assert second["Retry-After"]
    other = threading.Thread(target=in_thread, args=(bob, "c.txt"))
    other.start()
    wait_for(lambda: redis_reads(bob) == 1, 20, "bob's read started", every=0.02)
    third = spin(carol, "d.txt")
    assert (third.status_code, third.json()["error"]["reason"]) == (429, "document_reads")
    first.join()
    other.join()
    for response in results.values():  # the spinning children ended at their wall-clock limit
        assert "took longer than 3 s" in response.json()["error"]["detail"]
    assert redis_reads(alice) == redis_reads(bob) == 0
    assert not ConversationDocument.objects.exists()


def redis_reads(user) -> int:
    import redis
    from django.conf import settings

    from redisconn import keys

    return int(redis.Redis.from_url(settings.REDIS_URL).get(keys.chat_user_document_reads(user.pk)) or 0)

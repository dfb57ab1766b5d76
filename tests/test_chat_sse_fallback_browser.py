"""Where a proxy blocks WebSockets, the chat page streams over HTTP (POST /chat/stream, Server-Sent
Events), with the same rendering, stop, and resume after a reload: Chromium, daphne, the real engine."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from frontend import services
from frontend.models import Message
from tests.conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def block_websockets(page) -> dict:
    """Every WebSocket the page opens is closed before it opens, as by a proxy that refuses them."""
    seen = {"refused": 0}

    def refuse(ws):
        seen["refused"] += 1
        ws.close()

    page.route_web_socket("**/ws/chat/", refuse)
    return seen


def test_it_chats_stops_and_resumes_after_a_reload_over_http_when_websockets_are_blocked(
    page, product_server
):
    user = get_user_model().objects.create_user("lea", password="pw-lea-123456")
    # 300 tokens by construction: the answer is still running when the page reloads.
    conversation = services.conversation_create(
        user=user, settings_data={"max_tokens": 300, "min_tokens": 300, "temperature": 0}
    )
    refused = block_websockets(page)
    streams = []
    page.on("request", lambda r: streams.append((r.method, r.url)) if "/chat/stream" in r.url else None)
    log_in(page, product_server, "lea", "pw-lea-123456", f"/accounts/login/?next=/c/{conversation.pk}/")
    page.fill("#prompt", "Write a long story about a lighthouse keeper.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant .body").last
    expect(answer).not_to_be_empty(timeout=90_000)
    assert refused["refused"] >= 3 and ("POST", f"{product_server}/chat/stream") in streams
    message = Message.objects.get(conversation=conversation, role="assistant")

    # Reload mid-answer: the new page finds the answer generating and resumes it from its last token.
    page.wait_for_function("() => document.querySelector('.message.assistant .body').innerText.length > 40")
    page.reload()
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=120_000)
    assert any(method == "GET" and f"message={message.pk}" in url for method, url in streams)
    message.refresh_from_db()
    assert message.status == "complete" and message.completion_tokens == 300
    shown = page.locator(".message.assistant .body").last.inner_text()
    assert shown.split()[:5] == message.content.split()[:5] and len(shown) > 0.8 * len(
        message.content.strip()
    )

    # Stop, over HTTP too.
    page.fill("#prompt", "Now tell it again, from the keeper's daughter's view.")
    page.keyboard.press("Enter")
    expect(page.locator("#stop")).to_be_visible(timeout=90_000)
    page.wait_for_function("() => document.querySelectorAll('.message.assistant').length === 2")
    expect(page.locator(".message.assistant .body").last).not_to_be_empty(timeout=90_000)
    page.click("#stop")
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=60_000)
    second = Message.objects.filter(conversation=conversation, role="assistant").order_by("pk").last()
    assert second.status == "stopped" and second.finish_reason == "abort"

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


# Every text the status line shows, kept by the page for the test to read.
STATUS_RECORDER = """
window.__statuses = [];
document.addEventListener("DOMContentLoaded", () => {
  const status = document.getElementById("status");
  if (!status) return;
  new MutationObserver(() => window.__statuses.push(status.textContent))
    .observe(status, { childList: true, characterData: true, subtree: true });
});
"""


def lost_connection_said(page) -> bool:
    return any("Connection lost" in text for text in page.evaluate("window.__statuses"))


def test_it_chats_stops_and_resumes_after_a_reload_over_http_when_websockets_are_blocked(
    page, product_server
):
    user = get_user_model().objects.create_user("lea", password="pw-lea-123456")
    # 300 tokens by construction: the answer is still running when the page reloads.
    conversation = services.conversation_create(
        user=user, settings_data={"max_tokens": 300, "min_tokens": 300, "temperature": 0}
    )
    refused = block_websockets(page)
    page.add_init_script(STATUS_RECORDER)
    streams = []
    page.on("request", lambda r: streams.append((r.method, r.url)) if "/chat/stream" in r.url else None)
    log_in(page, product_server, "lea", "pw-lea-123456", f"/accounts/login/?next=/c/{conversation.pk}/")
    page.fill("#prompt", "Write a long story about a lighthouse keeper.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant .body").last
    expect(answer).not_to_be_empty(timeout=90_000)
    assert refused["refused"] >= 3 and ("POST", f"{product_server}/chat/stream") in streams
    message = Message.objects.get(conversation=conversation, role="assistant")

    # A socket that never opened is no lost connection: nothing says so.
    assert not lost_connection_said(page)

    # Reload mid-answer: the new page finds the answer generating and resumes it from its last token,
    # over HTTP at once: the tab remembers that its sockets are refused.
    page.wait_for_function("() => document.querySelector('.message.assistant .body').innerText.length > 40")
    tries = refused["refused"]
    page.reload()
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=120_000)
    assert any(method == "GET" and f"message={message.pk}" in url for method, url in streams)
    assert refused["refused"] == tries
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
    assert not lost_connection_said(page)

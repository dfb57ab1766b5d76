"""Where a proxy blocks WebSockets, the chat page streams over HTTP (POST /chat/stream, Server-Sent
Events), with the same rendering, stop, and resume after a reload: Chromium, daphne, the real engine."""

import json
import re
import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from conversations import services
from conversations.models import Message
from tests.support.browser import log_in

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


def test_a_socket_refused_as_busy_opens_again_when_told_and_loses_no_message(page, product_server):
    """A web process at its bound on handshakes accepts, says `busy` (reason `web_pending`, with
    `retry_after`) and closes with 4429, reading nothing the page sent: the page waits as told,
    opens again and sends once more what the refused socket was given; it does not take the
    refusal for a blocked socket and go to HTTP; each next socket brings its slot's ticket back.
    The first socket is refused at once, the second once the page has sent the question into it,
    the third reaches the web process."""
    get_user_model().objects.create_user("noor", password="pw-noor-123456")
    opened, urls = [], []
    busy = {"type": "chat.error", "code": "busy", "detail": "This server is busy; try again in a moment."}

    def refuse(ws):
        slot = f"ticket-{len(opened)}"
        ws.send(json.dumps({**busy, "reason": "web_pending", "retry_after": 3.0, "slot": slot}))
        ws.close(code=4429)

    def route(ws):
        opened.append(time.monotonic())
        urls.append(ws.url)
        if len(opened) == 1:
            refuse(ws)
        elif len(opened) == 2:
            ws.on_message(lambda message: refuse(ws))
        else:
            ws.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/chat/(\?|$)"), route)
    streams = []
    page.on("request", lambda r: streams.append(r.url) if "/chat/stream" in r.url else None)
    log_in(page, product_server, "noor", "pw-noor-123456", "/accounts/login/?next=/")
    page.fill("#prompt", "Name one colour.")
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .body").last).not_to_be_empty(timeout=90_000)
    expect(page.locator(".message.assistant.generating")).to_have_count(0, timeout=90_000)
    assert len(opened) == 3
    # Each wait is the refusal's retry_after, not the reconnect backoff's 0.5 s.
    assert opened[1] - opened[0] >= 2.5 and opened[2] - opened[1] >= 2.5
    # Each next socket brings back the ticket of the slot it was given, and only that one.
    assert [url.partition("/ws/chat/")[2] for url in urls] == ["", "?slot=ticket-1", "?slot=ticket-2"]
    assert streams == []  # the socket, not the HTTP fallback
    # The refusal is the connection's: had the chat read it, the question would be back in the composer.
    expect(page.locator("#prompt")).to_have_value("")
    question = Message.objects.get(role="user", conversation__owner__username="noor")
    assert question.content == "Name one colour."
    assert Message.objects.get(role="assistant", conversation=question.conversation).content

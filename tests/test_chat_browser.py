"""The chat UI in a real browser, against daphne and the real engine."""

import time

import pytest
from django.contrib.auth import get_user_model

from frontend.models import Message

pytestmark = pytest.mark.django_db(transaction=True)


def log_in(page, base: str, username: str, password: str) -> None:
    page.goto(base + "/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_selector("#prompt")


def test_it_shows_the_answer_growing_token_by_token_and_keeps_it_after_reload(page, product_server):
    get_user_model().objects.create_user("carol", password="pw-carol-123")
    log_in(page, product_server, "carol", "pw-carol-123")
    page.fill("#prompt", "Describe the sea in three sentences.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant .body").first
    answer.wait_for()
    lengths = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and page.locator(".message.assistant.generating").count():
        lengths.append(len(answer.inner_text()))
        time.sleep(0.05)
    growing = sorted({n for n in lengths if n > 0})
    assert len(growing) >= 2, f"text did not grow while streaming: {lengths}"
    page.wait_for_selector(".message.assistant:not(.generating)")
    final = answer.inner_text()
    assert "first token" in page.locator(".message.assistant .meta").first.inner_text()
    assert "/c/" in page.url

    stored = Message.objects.get(role="assistant")
    assert stored.status == "complete"
    assert stored.content.strip() == final.strip()

    page.reload()
    page.wait_for_selector("#prompt")
    assert page.locator(".message").count() == 2
    assert page.locator(".message.assistant .body").first.inner_text().strip() == final.strip()


def test_it_renders_model_and_user_text_as_text_never_as_html(page, product_server):
    user = get_user_model().objects.create_user("dave", password="pw-dave-1234")
    from frontend.models import Conversation

    conversation = Conversation.objects.create(owner=user, title="<img src=x onerror=alert(1)>")
    payload = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script>'
    Message.objects.create(conversation=conversation, role="user", content=payload)
    Message.objects.create(conversation=conversation, role="assistant", content=payload)
    log_in(page, product_server, "dave", "pw-dave-1234")
    page.goto(f"{product_server}/c/{conversation.pk}/")
    page.wait_for_selector(".message.assistant")
    assert page.evaluate("window.__owned") is None
    assert page.locator("#messages img, #messages script, #conversation-list img").count() == 0
    assert page.locator(".message.assistant .body").inner_text() == payload

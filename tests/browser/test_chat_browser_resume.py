"""In a real browser: an answer survives a reload and shows in a second tab while it streams."""

import time

import pytest
from django.contrib.auth import get_user_model

from conversations import services
from conversations.models import Message
from tests.support.browser import log_in

pytestmark = pytest.mark.django_db(transaction=True)

LONG = "Write a long story about a lighthouse keeper and her cat, in many paragraphs."


def answer_text(page) -> str:
    return page.locator(".message.assistant .body").last.inner_text()


def grows(page, seconds: float) -> list[int]:
    """Lengths of the last answer's text while it streams, for up to `seconds`."""
    lengths = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and page.locator(".message.assistant.generating").count():
        lengths.append(len(answer_text(page)))
        time.sleep(0.1)
    return lengths


def test_it_continues_the_answer_after_a_reload_and_in_a_second_tab(page, product_server):
    user = get_user_model().objects.create_user("kate", password="pw-kate-1234")
    conversation = services.conversation_create(
        user=user, settings_data={"max_tokens": 400, "min_tokens": 400, "temperature": 0}
    )
    log_in(page, product_server, "kate", "pw-kate-1234")
    page.goto(f"{product_server}/c/{conversation.pk}/")
    page.wait_for_selector("#prompt")
    page.fill("#prompt", LONG)
    page.keyboard.press("Enter")
    streaming = page.locator(".message.assistant.generating .body")
    streaming.wait_for()
    deadline = time.monotonic() + 60
    while len(streaming.inner_text()) <= 20:
        assert time.monotonic() < deadline, "the answer did not start streaming"
        time.sleep(0.1)
    page.reload()
    page.wait_for_selector(".message.assistant")
    after_reload = grows(page, 60)
    assert len(set(after_reload)) >= 2, f"the answer did not go on after the reload: {after_reload}"

    second = page.context.new_page()
    second.goto(page.url)
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=120_000)
    second.wait_for_selector(".message.assistant.generating", state="detached", timeout=30_000)

    stored = Message.objects.filter(role="assistant").latest("created_at")
    assert stored.status == "complete"
    assert answer_text(page).strip() and answer_text(second).strip()
    assert " ".join(answer_text(page).split()) == " ".join(answer_text(second).split())

"""The chat page as people expect it, in Chromium: a sidebar grouped by date with pin and archive from the
keyboard, search snippets, a footer that fits; icons that need no emoji font, each button named; and the
small things (favicon, example prompts, a character counter, the documents a question was sent with, no
empty chat left by a failed attachment, the share dialog's state, the API key's copy button)."""

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from conversations.models import Conversation, ConversationDocument
from tests.support.browser import log_in
from tests.support.chat_client import answered_turn

pytestmark = pytest.mark.django_db(transaction=True)
# The docs' pictures of the sidebar, in both themes; rewritten only on request (a run leaves the tree clean).
PICTURES = Path(__file__).resolve().parents[2] / ("docs" if os.environ.get("UPDATE_SCREENSHOTS") else "var")
# Emoji and dingbats the page once drew its buttons with; a machine without an emoji font shows boxes.
PICTOGRAPHS = re.compile("[\u2190-\u2bff\U0001f000-\U0001faff]")


def answered(user, question: str, answer: str, days_ago: float = 0) -> int:
    turn = answered_turn(user, question, answer)
    if days_ago:
        Conversation.objects.filter(pk=turn.conversation_id).update(
            updated_at=timezone.now() - timedelta(days=days_ago)
        )
    return turn.conversation_id


def groups(page) -> list[str]:
    return page.locator("#conversation-list .conv-group").all_inner_texts()


def test_it_groups_pins_and_archives_from_the_keyboard_and_search_finds_the_archived(page, product_server):
    user = get_user_model().objects.create_user("sid", password="pw-sid-123456")
    old = answered(user, "Old question", "An old answer about lighthouses.", days_ago=30)
    answered(user, "This week's question", "Something about tides.", days_ago=3)
    today = answered(user, "Today's question", "Penguins eat krill.")
    log_in(page, product_server, "sid", "pw-sid-123456")
    expect(page.locator("#conversation-list .conv")).to_have_count(3)
    assert groups(page) == ["Today", "Previous 7 days", "Older"]

    # Pin by keyboard: Tab from the search box reaches the first row's link, then its actions.
    page.focus("#search")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_attribute("href", f"/c/{today}/")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_accessible_name("Pin Today's question")
    page.keyboard.press("Enter")
    expect(page.locator("#conversation-list .conv-group").first).to_have_text("Pinned")
    # The keyboard stays on the button, now the way back.
    expect(page.locator(":focus")).to_have_accessible_name("Unpin Today's question")
    assert Conversation.objects.get(pk=today).pinned

    # Archive the old one by keyboard: it leaves the list, and search still finds it.
    row = page.locator(f'.conv[data-id="{old}"]')
    row.locator(".conv-archive").focus()
    expect(row.locator(".conv-actions")).to_have_css("opacity", "1")  # shown while the keyboard is there
    page.keyboard.press("Enter")
    expect(row).to_have_count(0)
    expect(page.locator("#sidebar-status")).to_have_text("Archived. Search finds it.")
    assert Conversation.objects.get(pk=old).archived and groups(page) == ["Pinned", "Previous 7 days"]
    page.fill("#search", "lighthouse")
    expect(row).to_have_count(1)
    expect(row.locator(".conv-badge")).to_have_text("Archived")
    expect(row.locator(".conv-snippet mark")).to_have_text("lighthouse")
    expect(row.locator(".conv-archive")).to_have_accessible_name("Unarchive Old question")

    # A reload keeps it all.
    page.reload()
    expect(page.locator("#conversation-list .conv")).to_have_count(2)
    assert groups(page) == ["Pinned", "Previous 7 days"]
    page.goto(f"{product_server}/c/{today}/")
    page.fill("#search", "krill")
    expect(page.locator(".conv-snippet mark")).to_have_count(1)
    page.screenshot(path=str(PICTURES / "sidebar.png"))
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(PICTURES / "sidebar-dark.png"))


def test_every_button_has_a_name_and_a_tooltip_and_no_emoji_and_the_footer_fits(page, product_server):
    user = get_user_model().objects.create_user("ico", password="pw-ico-123456")
    conversation = answered(user, "A question", "An **answer**.\n\n```python\nprint(1)\n```")
    long = answered(user, "A long one", "Yes.")
    Conversation.objects.filter(pk=long).update(title="A title longer than the page is wide. " * 5)
    log_in(page, product_server, "ico", "pw-ico-123456")
    page.goto(f"{product_server}/c/{conversation}/")
    expect(page.locator(".message.assistant .body strong")).to_have_text("answer")
    expect(page.locator("#stop")).to_be_hidden()  # nothing to stop
    assert page.evaluate("() => document.querySelector('link[rel=icon]').href").endswith(".svg")
    buttons = page.locator("button:visible, a.new-chat, a.foot-link")
    assert buttons.count() > 10
    for index in range(buttons.count()):
        button = buttons.nth(index)
        name = button.evaluate("(b) => b.getAttribute('aria-label') || b.textContent.trim()")
        assert name, button.evaluate("(b) => b.outerHTML")
        assert not PICTOGRAPHS.search(button.inner_text()), button.inner_text()
        if not button.inner_text().strip():  # an icon alone says what it does on hover
            assert button.get_attribute("title"), button.evaluate("(b) => b.outerHTML")
    # Icons are drawn (a mask over the vendored SVG), not boxes.
    attach = page.locator("#attach .i")
    assert attach.evaluate("(i) => getComputedStyle(i).maskImage").startswith('url("')
    assert attach.bounding_box()["width"] > 10
    # A long title ends with an ellipsis, in the list and in the header.
    cut = "(t) => getComputedStyle(t).textOverflow === 'ellipsis' && t.scrollWidth > t.clientWidth"
    assert page.locator(f'.conv[data-id="{long}"] .conv-title').evaluate(cut)
    page.goto(f"{product_server}/c/{long}/")
    assert page.locator("#chat-title").evaluate(cut)
    page.goto(f"{product_server}/c/{conversation}/")
    # The footer fits the sidebar at desktop width.
    edge = page.locator("#sidebar").bounding_box()
    for selector in ("#usage-link", "#keys-link", "#theme", ".logout button", ".sidebar-foot .username"):
        box = page.locator(selector).bounding_box()
        assert box["x"] >= edge["x"] and box["x"] + box["width"] <= edge["x"] + edge["width"], selector


def test_the_small_things(page, product_server, settings):
    user = get_user_model().objects.create_user("tim", password="pw-tim-123456")
    conversation = answered(user, "A question", "An answer.")
    log_in(page, product_server, "tim", "pw-tim-123456")

    # An empty chat says what to do; an example goes into the composer.
    expect(page.locator(".welcome h2")).to_have_text("What can I help with?")
    page.locator(".welcome .example").first.click()
    assert page.input_value("#prompt").startswith("Explain how a prefix cache")
    expect(page.locator("#prompt")).to_be_focused()

    # Near the limit a counter appears, and says when it is past it.
    limit = settings.CHAT_MAX_CONTENT_CHARS
    expect(page.locator("#counter")).to_be_hidden()
    page.fill("#prompt", "x" * (limit - 10))
    expect(page.locator("#counter")).to_be_visible()
    expect(page.locator("#counter")).not_to_have_class(re.compile("over"))
    page.fill("#prompt", "x" * (limit + 1))
    expect(page.locator("#counter")).to_have_class(re.compile("over"))
    page.fill("#prompt", "")

    # A failed attachment leaves no empty "New chat" behind.
    before = Conversation.objects.filter(owner=user).count()
    with page.expect_response("**/documents") as upload:
        page.set_input_files(
            "#attach-file",
            files=[{"name": "tool.exe", "mimeType": "application/x-msdownload", "buffer": b"MZ"}],
        )
    assert upload.value.status >= 400
    expect(page.locator("#status")).not_to_be_empty()
    page.wait_for_function("() => location.pathname === '/'")
    assert Conversation.objects.filter(owner=user).count() == before
    expect(page.locator("#conversation-list .conv")).to_have_count(1)

    # The question shows the documents it was sent with.
    with page.expect_response("**/documents"):
        page.set_input_files(
            "#attach-file",
            files=[{"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Notes\nTea at five."}],
        )
    expect(page.locator("#documents .chip")).to_have_count(1)
    ConversationDocument.objects.get(name="notes.md")
    page.fill("#prompt", "When is tea?")
    page.keyboard.press("Enter")
    question = page.locator(".message.user").first
    expect(question.locator(".turn-documents li")).to_have_text("notes.md")
    expect(page.locator(".message.assistant")).to_have_count(1, timeout=60_000)  # started: stored
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=120_000)
    page.reload()
    expect(page.locator(".message.user .turn-documents li")).to_have_text("notes.md")
    expect(page).to_have_title(re.compile("^When is tea"))

    # The share dialog says whether a link is live.
    page.goto(f"{product_server}/c/{conversation}/")
    page.click("#open-conversation-menu")
    expect(page.locator("#share-note")).to_have_text(re.compile("^Not shared"))
    page.click("#share-create")
    expect(page.locator("#share-url")).not_to_have_value("")
    page.click("#conversation-close")
    page.click("#open-conversation-menu")
    expect(page.locator("#share-note")).to_have_text(re.compile("^Shared: this link is live"))
    expect(page.locator("#share-url")).to_have_value(re.compile("/s/"))
    page.click("#conversation-close")

    # A new API key has a copy button; revoking asks first.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{product_server}/keys/")
    page.fill("input[name=name]", "laptop")
    page.click("#new-key-form [type=submit]")
    page.click("#copy-key")
    expect(page.locator("#copy-key")).to_have_text("Copied")
    assert page.evaluate("() => navigator.clipboard.readText()") == page.inner_text("#plain-key")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("form.revoke button")
    assert asked and "laptop" in asked[0]
    assert user.api_tokens.get().revoked_at is None

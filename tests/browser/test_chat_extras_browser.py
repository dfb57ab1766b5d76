"""What people notice, in Chromium: the cached share of each answer at a glance, export, a read-only
share link and its revocation, keyboard shortcuts, and dark mode (following the system, or chosen)."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from conversations import turns
from conversations.models import Message
from tests.support.browser import log_in
from tests.support.chat_client import long_answer_conversation

pytestmark = pytest.mark.django_db(transaction=True)
DARK_BACKGROUND = "rgb(23, 24, 28)"


def stored_conversation(user):
    turn = turns.chat_turn_start(user=user, conversation_id=None, content="Name a colour.")
    turns.message_finish(
        message_id=turn.assistant_message_id,
        content="**Blue**, as the sky.",
        status="complete",
        prompt_tokens=120,
        cached_tokens=96,
        completion_tokens=7,
    )
    return turn.conversation_id


def test_it_shows_the_cache_exports_and_shares_read_only_until_revoked(page, browser, product_server):
    user = get_user_model().objects.create_user("ivy", password="pw-ivy-123456")
    conversation = stored_conversation(user)
    log_in(page, product_server, "ivy", "pw-ivy-123456")
    page.goto(f"{product_server}/c/{conversation}/")
    expect(page.locator(".message.assistant .cached")).to_have_text("96/120 cached")

    page.click("#open-conversation-menu")
    with page.expect_download() as download:
        page.click("#export-md")
    text = open(download.value.path(), encoding="utf-8").read()
    assert text.startswith("# Name a colour.") and "**Blue**, as the sky." in text

    page.click("#share-create")
    expect(page.locator("#share-url")).not_to_have_value("")
    url = page.input_value("#share-url")
    stranger = browser.new_context()
    try:
        shared = stranger.new_page()
        assert shared.goto(url).status == 200
        expect(shared.locator("#messages .message")).to_have_count(2)
        expect(shared.locator("#messages .assistant strong")).to_have_text("Blue")
        assert shared.locator("#conversation-list, #prompt").count() == 0  # nothing else of the owner's
        page.click("#share-revoke")
        expect(page.locator("#share-note")).to_contain_text("Stopped")
        assert shared.goto(url).status == 404
    finally:
        stranger.close()


def test_it_lists_and_obeys_the_keyboard_shortcuts(page, product_server):
    user = get_user_model().objects.create_user("jon", password="pw-jon-123456")
    conversation = stored_conversation(user)
    log_in(page, product_server, "jon", "pw-jon-123456")
    page.goto(f"{product_server}/c/{conversation}/")
    page.keyboard.press("Control+/")
    expect(page.locator("#shortcuts-dialog")).to_be_visible()
    assert page.locator("#shortcuts-dialog dt").count() >= 5
    expect(page.locator("#shortcuts-dialog")).to_contain_text("Copy the last answer")
    page.click("#shortcuts-close")
    page.keyboard.press("Control+k")
    expect(page.locator("#search")).to_be_focused()
    page.keyboard.press("Control+Shift+O")
    page.wait_for_url(product_server + "/")


def test_it_follows_the_systems_dark_mode_and_remembers_a_chosen_theme(browser, product_server):
    get_user_model().objects.create_user("kim", password="pw-kim-123456")
    context = browser.new_context(color_scheme="dark")
    try:
        page = context.new_page()
        log_in(page, product_server, "kim", "pw-kim-123456")
        background = "() => getComputedStyle(document.body).backgroundColor"
        assert page.evaluate(background) == DARK_BACKGROUND  # "auto" follows the system
        expect(page.locator("#theme")).to_have_accessible_name("Theme: auto")
        page.click("#theme")  # dark
        page.click("#theme")  # light
        expect(page.locator("#theme")).to_have_accessible_name("Theme: light")
        expect(page.locator("#theme .i-sun")).to_be_visible()
        assert page.evaluate(background) != DARK_BACKGROUND
        page.reload()
        assert page.evaluate("() => document.documentElement.dataset.theme") == "light"
        assert page.evaluate(background) != DARK_BACKGROUND
        page.click("#theme")  # auto again
        assert page.evaluate("() => document.documentElement.dataset.theme") is None
        assert page.evaluate(background) == DARK_BACKGROUND
    finally:
        context.close()


def test_it_attaches_a_document_as_a_removable_chip(page, product_server):
    user = get_user_model().objects.create_user("ned", password="pw-ned-123456")
    log_in(page, product_server, "ned", "pw-ned-123456")
    name = "<img src=x onerror=window.__owned=1>.txt"
    notes = {"name": name, "mimeType": "text/plain", "buffer": b"The lighthouse is 42 metres tall."}
    page.set_input_files("#attach-file", notes)
    chip = page.locator("#documents .chip")
    expect(chip).to_have_count(1)
    expect(chip.locator(".chip-name")).to_have_text(name)  # as text, never markup
    conversation = user.conversations.get()
    assert [d.name for d in conversation.documents.all()] == [name]
    page.reload()
    expect(page.locator("#documents .chip")).to_have_count(1)
    assert page.locator("#documents img").count() == 0 and page.evaluate("window.__owned") is None
    page.click("#documents .chip-remove")
    expect(page.locator("#documents .chip")).to_have_count(0)
    assert not conversation.documents.exists()


def test_it_says_an_answer_was_cut_off_and_continues_it_in_place(page, product_server):
    user = get_user_model().objects.create_user("cut", password="pw-cut-123456")
    # A budget of a few tokens: the answer is cut at its limit by construction.
    conversation = long_answer_conversation(user, max_tokens=6)
    log_in(page, product_server, "cut", "pw-cut-123456")
    page.goto(f"{product_server}/c/{conversation}/")
    page.fill("#prompt", "Count from one to twenty in words, separated by commas.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant")
    expect(answer.locator(".meta")).to_have_text("Cut off at the length limit.", timeout=90_000)
    first = Message.objects.get(conversation_id=conversation, role="assistant")
    assert (first.status, first.finish_reason) == ("complete", "length")

    shown_before = len(answer.locator(".body").inner_text())
    answer.locator("button.continue").click()
    # It grows and is cut again, six tokens on: the Continue button is back on a longer answer.
    page.wait_for_function(
        """(before) => {
            const answer = document.querySelector(".message.assistant");
            const button = answer && answer.querySelector("button.continue");
            return button && !button.disabled && !answer.classList.contains("generating")
                && answer.querySelector(".body").innerText.length > before;
        }""",
        arg=shown_before,
        timeout=90_000,
    )
    expect(answer).to_have_count(1)
    continued = Message.objects.get(conversation_id=conversation, role="assistant")
    assert continued.pk == first.pk and continued.finish_reason == "length"
    assert continued.content.startswith(first.content) and len(continued.content) > len(first.content)
    # The page shows the whole answer, as stored.
    shown = " ".join(answer.locator(".body").inner_text().split())
    assert shown == " ".join(continued.content.split())

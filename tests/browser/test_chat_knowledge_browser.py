"""Collections in the chat page, in Chromium with the real engine: picked with the picker and with `#`
from the keyboard, the answer lists the passages its prompt quoted, each opening its passage, a stored
answer's [n] markers link to them, and the sources come back after a reload, mid-answer as well."""

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from knowledge import quotes, services
from tests.support.browser import log_in
from tests.support.chat_client import long_answer_conversation
from tests.support.knowledge import HANDBOOK, LEAVE, answered_with_sources, indexed_collection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]
PICTURES = Path(__file__).resolve().parents[2] / ("docs" if os.environ.get("UPDATE_SCREENSHOTS") else "var")


@pytest.fixture
def amy():
    return get_user_model().objects.create_user("amy", password="pw-amy-123456")


def attached(conversation_id: int, user) -> list[int]:
    return quotes.conversation_collections(conversation_id=conversation_id, user=user)


def conversation_id(page) -> int:
    return int(re.search(r"/c/(\d+)/", page.url).group(1))


def test_it_picks_collections_from_the_keyboard_and_the_answer_opens_its_sources(page, product_server, amy):
    handbook = indexed_collection(amy, "Handbook", HANDBOOK)
    recipes = indexed_collection(amy, "Recipes", {"soup.txt": "Tomato soup: simmer tomatoes for an hour."})
    log_in(page, product_server, "amy", "pw-amy-123456")

    # The picker, from the keyboard: it opens on its first checkbox; Space chooses; Escape closes it.
    page.focus("#collections-button")
    page.keyboard.press("Enter")
    menu = page.locator("#collections-menu")
    expect(menu).to_be_visible()
    expect(page.locator("#collections-button")).to_have_attribute("aria-expanded", "true")
    expect(menu.get_by_role("checkbox", name="Handbook")).to_be_focused()
    expect(menu.get_by_role("link", name="Manage collections")).to_have_attribute("href", "/collections/")
    page.keyboard.press("Space")
    chips = page.locator("#collection-chips .chip")
    expect(chips).to_have_text(["Handbook"])
    page.keyboard.press("Escape")
    expect(menu).to_be_hidden()
    expect(page.locator("#collections-button")).to_be_focused()
    page.wait_for_url(re.compile(r"/c/\d+/$"))  # a new chat was made for it
    conversation = conversation_id(page)
    assert attached(conversation, amy) == [handbook.pk]

    # `#`: a list of the collections not chosen yet; Enter picks one and takes "#rec" out of the message.
    page.focus("#prompt")
    page.keyboard.type("Soup #rec")
    suggestions = page.locator("#collection-suggestions [role=option]")
    expect(suggestions).to_have_text(["Recipes"])
    page.keyboard.press("Enter")
    expect(chips).to_have_text(["Handbook", "Recipes"])
    expect(page.locator("#prompt")).to_have_value("Soup ")
    assert attached(conversation, amy) == [handbook.pk, recipes.pk]
    page.keyboard.type("#nothing")
    expect(page.locator("#collection-suggestions")).to_be_hidden()
    page.fill("#prompt", "")
    page.click(f'#collection-chips .chip[data-id="{recipes.pk}"] .chip-remove')
    expect(chips).to_have_text(["Handbook"])
    assert attached(conversation, amy) == [handbook.pk]

    # The answer lists its sources (from chat.done); one opens its passage, named with its document.
    page.fill("#prompt", "How many vacation days do I get?")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant").last
    expect(answer).not_to_have_class(re.compile("generating"), timeout=120_000)
    source = answer.locator(".sources .source").first
    expect(source).to_have_text("[1] leave.txt")
    source.click()
    expect(source).to_have_attribute("aria-expanded", "true")
    passage = answer.locator(".source-passage")
    expect(passage).to_be_visible()
    expect(passage).to_contain_text("twenty-five days of paid vacation")
    expect(passage.locator("strong")).to_have_text("[1] leave.txt")
    source.click()
    expect(passage).to_be_hidden()

    # Reloaded, the page has them from its initial state, and the chosen collection too.
    page.reload()
    expect(page.locator(".message.assistant .sources .source").first).to_have_text("[1] leave.txt")
    expect(chips).to_have_text(["Handbook"])


def test_a_marker_in_an_answer_links_to_its_source_and_code_keeps_its_brackets(page, product_server, amy):
    answer = (
        "You get **twenty-five days** [1]; ask two weeks ahead [2]. There is no [3].\n\n"
        "`[1]` and\n\n```\nx = a[1]\n```"
    )
    turn = answered_with_sources(
        amy,
        "How much leave?",
        answer,
        [("handbook.pdf", 3, LEAVE), ("policies.md", None, "Requests go to your manager two weeks ahead.")],
    )
    log_in(page, product_server, "amy", "pw-amy-123456")
    page.goto(f"{product_server}/c/{turn.conversation_id}/")
    body = page.locator(".message.assistant .body")
    expect(page.locator(".message.assistant .sources .source")).to_have_text(
        ["[1] handbook.pdf p. 3", "[2] policies.md"]
    )
    markers = body.locator("a.cite")
    expect(markers).to_have_text(["[1]", "[2]"])  # [3] is not a source; code keeps its text
    assert markers.first.get_attribute("href") == f"#source-{turn.assistant_message_id}-1"
    expect(body.locator("code").first).to_have_text("[1]")
    expect(body.locator("pre code")).to_have_text("x = a[1]")
    markers.first.click()
    passage = page.locator(".message.assistant .source-passage")
    expect(passage).to_be_visible()
    expect(passage).to_contain_text("handbook.pdf · page 3")
    expect(passage).to_contain_text("twenty-five days of paid vacation")
    expect(page.locator(f"#source-{turn.assistant_message_id}-1")).to_be_focused()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # past [2], to the passage's close button
    expect(passage.get_by_role("button", name="Close the passage")).to_be_focused()
    page.keyboard.press("Enter")
    expect(passage).to_be_hidden()
    expect(page.locator(f"#source-{turn.assistant_message_id}-1")).to_be_focused()


def test_it_pictures_an_answer_with_its_sources_and_the_picker(page, product_server, amy):
    answer = (
        "You accrue **twenty-five days** of paid vacation a year [1]. Unused days carry over until the end "
        "of March [1], and requests go to your manager two weeks ahead [2]."
    )
    passages = [
        ("handbook.pdf", 3, LEAVE[: LEAVE.index("calendar shows") + len("calendar shows who is away.")]),
        ("policies.md", None, "Vacation requests go to your manager at least two weeks ahead."),
    ]
    question = "How many vacation days do I get?"
    turn = answered_with_sources(amy, question, answer, passages, collection="Handbook")
    for name in ("Engineering wiki", "Recipes"):
        services.collection_create(owner=amy, name=name)
    log_in(page, product_server, "amy", "pw-amy-123456")
    page.goto(f"{product_server}/c/{turn.conversation_id}/")
    page.locator(".message.assistant a.cite").first.click()
    page.click("#collections-button")
    expect(page.locator("#collections-menu").get_by_role("checkbox", name="Handbook")).to_be_checked()
    expect(page.locator("#collection-chips .chip")).to_have_text(["Handbook"])
    page.screenshot(path=str(PICTURES / "knowledge-chat.png"))


def test_an_answer_resumed_after_a_reload_shows_its_sources_when_it_ends(page, product_server, amy):
    handbook = indexed_collection(amy, "Handbook", HANDBOOK)
    conversation = long_answer_conversation(amy, max_tokens=160)
    quotes.conversation_collections_set(conversation_id=conversation, user=amy, collection_ids=[handbook.pk])
    log_in(page, product_server, "amy", "pw-amy-123456")
    page.goto(f"{product_server}/c/{conversation}/")
    page.fill("#prompt", "How many vacation days do I get?")
    page.keyboard.press("Enter")
    generating = page.locator(".message.assistant.generating .body")
    expect(generating).not_to_be_empty(timeout=120_000)
    page.reload()
    expect(page.locator(".message.assistant.generating")).to_have_count(1)
    expect(page.locator(".message.assistant .sources")).to_have_count(0)  # not while it streams
    expect(page.locator(".message.assistant.generating")).to_have_count(0, timeout=120_000)
    expect(page.locator(".message.assistant .sources .source").first).to_have_text("[1] leave.txt")

"""Every page a user or a staff member sees, checked with axe-core (tests/support/vendor/axe-core, from
npm) in Chromium: no serious or critical violation, in each state people meet it in (the chat empty,
streaming, finished, with each dialog open). Also the things axe cannot see: the end of an answer is
announced once, politely, and focus comes back to the button that opened a dialog."""

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from documents.uploads import DocumentInput
from jobs import services as job_services
from knowledge import services as knowledge_services
from knowledge.models import Document
from tests.support.browser import log_in
from tests.support.chat_client import answered_turn, long_answer_conversation
from tests.support.knowledge import answered_with_sources

pytestmark = pytest.mark.django_db(transaction=True)
AXE = Path(__file__).resolve().parents[1] / "support" / "vendor" / "axe-core" / "axe.min.js"
RUN_AXE = """async () => {
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations
        .filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ") + ": " + n.failureSummary),
        }));
}"""


@pytest.fixture
def context(browser):
    # axe is injected into each page: the product's strict CSP would refuse a script it did not serve.
    context = browser.new_context(viewport={"width": 1200, "height": 800}, bypass_csp=True)
    yield context
    context.close()


def serious_violations(page) -> list[dict]:
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return page.evaluate(RUN_AXE)


def assert_accessible(page, where: str) -> None:
    found = serious_violations(page)
    assert found == [], f"{where}: {found}"


def collection_with_a_failed_document(owner) -> None:
    """A collection whose page shows a document that is ready, one waiting and one that failed."""
    collection = knowledge_services.collection_create(owner=owner, name="Handbook", description="Policies.")
    knowledge_services.documents_add(
        collection=collection,
        uploads=[SimpleUploadedFile(f"{name}.txt", f"About {name}.".encode()) for name in ("a", "b", "c")],
    )
    first, _, third = collection.documents.order_by("id")
    Document.objects.filter(pk=first.pk).update(status="ready", chunks_total=3, chunks_done=3)
    Document.objects.filter(pk=third.pk).update(status="failed", error="The file has no text.")


def test_the_users_pages_have_no_serious_violations(context, product_server):
    page = context.new_page()
    page.goto(product_server + "/accounts/login/")
    assert_accessible(page, "login")
    user = get_user_model().objects.create_user("ada", password="pw-ada-123456")
    conversation = long_answer_conversation(user, max_tokens=200)
    log_in(page, product_server, "ada", "pw-ada-123456")
    assert_accessible(page, "chat, empty")
    page.click("#collections-button")  # none yet: it says so, and where to make one
    expect(page.locator("#collections-empty")).to_have_text("No collections yet")
    expect(page.locator("#collections-menu a")).to_be_focused()
    assert_accessible(page, "chat, the collections picker open with none")
    page.keyboard.press("Escape")
    expect(page.locator("#collections-menu")).to_be_hidden()

    page.goto(f"{product_server}/c/{conversation}/")
    page.fill("#prompt", "Tell me a long story about a lighthouse.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant.generating .body")
    expect(answer).not_to_be_empty(timeout=90_000)
    assert_accessible(page, "chat, streaming")
    # Tokens are not read out one by one; the end is, once.
    assert page.get_attribute("#messages", "aria-live") == "off"
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=180_000)
    expect(page.locator("#announcer")).to_have_text("The answer is complete.")
    assert page.get_attribute("#announcer", "aria-live") == "polite"
    assert_accessible(page, "chat, finished")
    # Each message says who wrote it, to a screen reader.
    assert page.locator(".message.user .visually-hidden").inner_text() == "You said:"
    assert page.locator(".message.assistant .visually-hidden").inner_text() == "The assistant said:"
    expect(page.locator("#prompt")).to_have_accessible_name("Message")

    for opener, dialog, closer in (
        ("#open-settings", "#settings-dialog", "#settings-cancel"),
        ("#open-conversation-menu", "#conversation-dialog", "#conversation-close"),
        ("#open-shortcuts", "#shortcuts-dialog", "#shortcuts-close"),
    ):
        page.click(opener)
        expect(page.locator(dialog)).to_be_visible()
        assert_accessible(page, f"chat, {dialog} open")
        page.click(closer)
        expect(page.locator(dialog)).to_be_hidden()
        expect(page.locator(opener)).to_be_focused()  # focus comes back where it was

    open_sources_and_collections(page, product_server, user)
    assert_accessible(page, "chat, an answer's passage and the collections picker open")
    page.focus("#prompt")
    page.keyboard.type("#")
    expect(page.locator("#collection-suggestions")).to_be_visible()
    assert_accessible(page, "chat, the # list of collections open")
    page.keyboard.press("Escape")

    page.click("#open-conversation-menu")
    page.click("#share-create")
    expect(page.locator("#share-url")).to_have_value(re.compile("/s/"))
    url = page.input_value("#share-url")
    page.click("#conversation-close")
    page.goto(url)
    assert_accessible(page, "shared page")
    collection_with_a_failed_document(user)
    for path in ("/usage/", "/collections/", "/keys/"):
        page.goto(product_server + path)
        assert_accessible(page, path)
    page.fill("input[name=name]", "laptop")
    page.click("#new-key-form [type=submit]")
    assert_accessible(page, "/keys/ with a new key")


def open_sources_and_collections(page, product_server: str, user) -> None:
    """An answer with its sources, one passage open, and the collections picker open."""
    passages = [("handbook.pdf", 3, "Annual leave: twenty-five days a year."), ("policies.md", None, "Ask.")]
    turn = answered_with_sources(user, "How much leave?", "Twenty-five days [1], asked ahead [2].", passages)
    user.collections.create(name="Recipes")  # one more for the picker and `#` to offer
    page.goto(f"{product_server}/c/{turn.conversation_id}/")
    page.locator(".message.assistant a.cite").first.click()
    expect(page.locator(".message.assistant .source-passage")).to_be_visible()
    page.click("#collections-button")
    expect(page.locator("#collections-menu")).to_be_visible()


def test_the_staff_pages_have_no_serious_violations(context, product_server):
    boss = get_user_model().objects.create_superuser("boss", password="pw-boss-123456")
    job = job_services.job_create(
        owner=boss, documents=[DocumentInput(f"d{i}", text="Text.") for i in range(2)], start=False
    )
    page = context.new_page()
    log_in(page, product_server, "boss", "pw-boss-123456", "/admin/login/?next=/monitoring/")
    page.wait_for_selector("#dashboard")
    assert_accessible(page, "dashboard")
    collection_with_a_failed_document(boss)  # staff see the sharing form
    for path in (
        "/admin/jobs/job/",
        f"/admin/jobs/job/{job.pk}/change/",
        "/admin/jobs/job/add/",
        "/collections/",
    ):
        page.goto(product_server + path)
        assert_accessible(page, path)


def test_the_dark_theme_has_no_serious_violations(browser, product_server):
    user = get_user_model().objects.create_user("eve", password="pw-eve-123456")
    answer = "See [the docs](https://example.com) and `code`.\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    turn = answered_turn(user, "Links, please.", answer, finish_reason="length")
    context = browser.new_context(
        viewport={"width": 1200, "height": 800}, bypass_csp=True, color_scheme="dark"
    )
    try:
        page = context.new_page()
        page.goto(product_server + "/accounts/login/")
        assert_accessible(page, "login, dark")
        log_in(page, product_server, "eve", "pw-eve-123456")
        page.goto(f"{product_server}/c/{turn.conversation_id}/")
        expect(page.locator(".message.assistant button.continue")).to_be_visible()
        assert_accessible(page, "chat, dark")
        open_sources_and_collections(page, product_server, user)
        assert_accessible(page, "chat, an answer's passage and the collections picker open, dark")
        page.goto(product_server + "/usage/")
        assert_accessible(page, "usage, dark")
        collection_with_a_failed_document(user)
        page.goto(product_server + "/collections/")
        assert_accessible(page, "collections, dark")
    finally:
        context.close()

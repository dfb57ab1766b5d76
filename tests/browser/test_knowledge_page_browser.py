"""The collections page in Chromium, on daphne with a real Celery worker indexing on the bulk queue: make
a collection, upload two files, watch them become ready, delete one; a failed document says why; a user
given the permission shares with a group."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from knowledge import services
from knowledge.models import Collection, Document
from knowledge.protocol import DOCUMENTS_PAGE
from tests.support.browser import log_in
from tests.support.chat_client import session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]


def test_it_uploads_two_files_watches_them_become_ready_and_deletes_one(
    page, product_server, celery_worker, tmp_path
):
    get_user_model().objects.create_user("reader", password="pw-reader-123")
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, product_server, "reader", "pw-reader-123")
    page.click("#collections-link")
    expect(page.locator("#no-collections")).to_be_visible()
    page.fill("#new-collection input[name=name]", "Handbook")
    page.click("#new-collection [type=submit]")
    section = page.locator("section.collection", has_text="Handbook")
    expect(section.locator(".collection-counts")).to_have_text("No documents yet.")
    parking, leave = tmp_path / "parking.txt", tmp_path / "leave.md"
    parking.write_text("Staff may park in the north garage; visitors use the south lot after nine.")
    leave.write_text("# Leave\n\nEmployees accrue twenty-five days of paid vacation per calendar year.")
    section.get_by_label("Upload documents").set_input_files([parking, leave])
    expect(section.locator(".collection-status")).to_have_text("2 added.")
    expect(section.locator("tbody tr")).to_have_count(2)
    # The worker reads and embeds them; the page polls until both are ready.
    expect(section.locator('.doc-status[data-status="ready"]')).to_have_count(2, timeout=120_000)
    expect(section.locator(".collection-counts")).to_contain_text("2 of 2 documents ready")
    assert section.locator("progress").evaluate("(bar) => [bar.value, bar.max]") == [2, 2]
    assert Document.objects.filter(status="ready", chunks_done__gt=0).count() == 2

    page.once("dialog", lambda dialog: dialog.accept())
    section.get_by_role("button", name="Delete parking.txt").click()
    expect(section.locator("tbody tr")).to_have_count(1)
    expect(section.locator("tbody tr")).to_contain_text("leave.md")
    assert list(Document.objects.values_list("name", flat=True)) == ["leave.md"]
    assert errors == []


def test_a_failed_document_says_why_and_a_reader_gets_no_buttons_to_change(page, product_server):
    markup = '<img src=x data-probe="1">'

    User = get_user_model()
    staff = User.objects.create_user("boss", password="pw-boss-123456", is_staff=True)
    User.objects.create_user("ada", password="pw-ada-123456")
    shared = services.collection_create(
        owner=staff, name="Site handbook", description=markup, visibility="site"
    )
    services.documents_add(collection=shared, uploads=[SimpleUploadedFile("broken.pdf", b"%PDF-1.4 junk")])
    Document.objects.update(status="failed", error="The PDF could not be read. " + markup)
    log_in(page, product_server, "ada", "pw-ada-123456", "/accounts/login/?next=/collections/")
    section = page.locator("section.collection", has_text="Site handbook")
    # Names, descriptions and errors are text, never markup.
    expect(section.locator(".collection-about")).to_have_text("by boss · Everyone on the site · " + markup)
    expect(section.locator(".doc-status")).to_have_text("Failed: The PDF could not be read. " + markup)
    assert page.locator("[data-probe]").count() == 0
    expect(section.locator(".collection-counts")).to_have_text("0 of 1 documents ready · 1 failed")
    # Only paging, which changes nothing, and it is hidden: one document is one page.
    assert section.locator("button:not(.more-documents), input[type=file]").count() == 0
    expect(section.locator("button.more-documents")).to_be_hidden()
    assert Collection.objects.count() == 1


def test_a_long_collection_shows_a_page_of_documents_and_more_on_request(page, product_server):
    owner = get_user_model().objects.create_user("lib", password="pw-lib-1234567")
    shelf = services.collection_create(owner=owner, name="Archive")
    Document.objects.bulk_create(
        Document(
            collection=shelf, name=f"memo-{n:03}.txt", content_hash=f"{n:064x}", size=10, text="memo",
            status=Document.Status.READY,
        )
        for n in range(DOCUMENTS_PAGE + 1)
    )  # fmt: skip
    log_in(page, product_server, "lib", "pw-lib-1234567", "/accounts/login/?next=/collections/")
    section = page.locator("section.collection", has_text="Archive")
    expect(section.locator("tbody tr")).to_have_count(DOCUMENTS_PAGE)
    expect(section.locator("tbody tr").last).to_contain_text(f"memo-{DOCUMENTS_PAGE - 1:03}.txt")
    section.get_by_role("button", name="Show more documents").click()
    expect(section.locator("tbody tr")).to_have_count(DOCUMENTS_PAGE + 1)
    expect(section.locator("tbody tr").last).to_contain_text(f"memo-{DOCUMENTS_PAGE:03}.txt")
    expect(section.get_by_role("button", name="Show more documents")).to_be_hidden()


def test_a_user_given_the_permission_shares_with_a_group_and_others_cannot(page, product_server):
    User = get_user_model()
    hr = Group.objects.create(name="hr")
    lead = User.objects.create_user("lead", password="pw-lead-1234567")
    lead.user_permissions.add(Permission.objects.get(codename="share_collection_site"))
    plain = User.objects.create_user("plain", password="pw-plain-123456")
    services.collection_create(owner=plain, name="Notes")
    mine = services.collection_create(owner=lead, name="Team handbook")

    def collections_of(user):
        page.context.clear_cookies()
        cookie = {"name": "sessionid", "value": session_cookie(user), "url": product_server}
        page.context.add_cookies([cookie])
        page.goto(product_server + "/collections/")

    collections_of(lead)
    section = page.locator("section.collection", has_text="Team handbook")
    section.get_by_label("Who reads it").select_option("groups")
    section.get_by_label("hr").check()
    section.get_by_role("button", name="Save sharing").click()
    expect(section.locator(".collection-status")).to_have_text("Sharing saved.")
    mine.refresh_from_db()
    assert mine.visibility == Collection.Visibility.GROUPS and list(mine.groups.all()) == [hr]

    collections_of(plain)
    notes = page.locator("section.collection", has_text="Notes")
    expect(notes).to_be_visible()
    expect(notes.locator("form.share")).to_have_count(0)

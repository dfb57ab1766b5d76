"""The collections API: by session or by a key with the knowledge scope; a collection the user may not
read answers 404 like a missing one on every path and is never changed; readers read, owners and
superusers change; uploads stored once, quotas and limits refused whole; search only what the user reads.

Why one module of about 340 lines: every endpoint is walked with the same people and collections."""

import asyncio
import io
import re
import zipfile

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apitokens.services import token_issue
from knowledge import indexing, services
from knowledge.models import Collection, Document

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_engine")]

MISSING = 987_654_321
JSON = "application/json"


@pytest.fixture
def people():
    make = get_user_model().objects.create_user
    team = Group.objects.create(name="team")
    member = make("member", password="pw-member-123")
    member.groups.add(team)
    return {
        "owner": make("owner", password="pw-owner-123"),
        "member": member,
        "stranger": make("stranger", password="pw-stranger-1"),
        "staff": make("staffer", password="pw-staffer-12", is_staff=True),
        "root": get_user_model().objects.create_superuser("root", password="pw-root-12345"),
        "team": team,
    }


@pytest.fixture
def shelf(people):
    """The owner's private collection with a document; one staff shared with the team."""
    private = services.collection_create(owner=people["owner"], name="Private")
    services.documents_add(collection=private, uploads=[upload("secret.txt", "The vault opens at dawn.")])
    shared = services.collection_create(
        owner=people["staff"], name="Team", visibility="groups", groups=[people["team"]]
    )
    services.documents_add(collection=shared, uploads=[upload("team.txt", "Standup is at ten.")])
    return {"private": private, "shared": shared}


def upload(name: str, text: str | bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode() if isinstance(text, str) else text)


def key(user, scopes=("knowledge",)) -> dict:
    _, plain = token_issue(user=user, scopes=scopes)
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def code(response) -> tuple[int, str | None]:
    body = response.json() if response.content else {}
    return response.status_code, body.get("error", {}).get("code")


def zipped(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def test_it_refuses_anyone_without_a_session_or_a_key_with_the_scope(client, people, shelf):
    pk = shelf["private"].pk
    paths = [
        ("get", "/api/collections/"),
        ("get", f"/api/collections/{pk}/"),
        ("get", f"/api/collections/{pk}/documents/"),
        ("post", "/api/collections/search"),
    ]
    for method, path in paths:
        assert code(getattr(client, method)(path)) == (401, "unauthenticated"), path
        bad = getattr(client, method)(path, HTTP_AUTHORIZATION="Bearer chat_nope_nope")
        assert code(bad) == (401, "unauthenticated"), path
        scoped = getattr(client, method)(path, **key(people["owner"], scopes=("openai",)))
        assert code(scoped) == (403, "forbidden"), path
    assert client.get("/api/collections/", **key(people["owner"])).status_code == 200
    assert session(people["owner"]).get("/api/collections/").status_code == 200


def test_the_keys_page_offers_the_knowledge_scope_and_its_key_reads_collections(people, shelf):
    page = session(people["owner"]).post("/keys/", {"name": "script", "scope": ["knowledge"]})
    assert 'value="knowledge"' in page.content.decode()
    [plain] = re.findall(r'<code id="plain-key">(chat_[^<]+)</code>', page.content.decode())
    listed = Client().get("/api/collections/", HTTP_AUTHORIZATION=f"Bearer {plain}").json()
    assert [c["name"] for c in listed["collections"]] == ["Private"]


def test_a_write_by_session_needs_the_csrf_token_and_one_by_key_does_not(people):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(people["owner"])
    refused = strict.post("/api/collections/", {"name": "No token"}, content_type=JSON)
    assert code(refused) == (403, "csrf_failed")
    strict.get("/collections/")  # the page sets the CSRF cookie
    token = strict.cookies["csrftoken"].value
    made = strict.post("/api/collections/", {"name": "Mine"}, content_type=JSON, HTTP_X_CSRFTOKEN=token)
    assert made.status_code == 201
    by_key = Client(enforce_csrf_checks=True).post(
        "/api/collections/", {"name": "Scripted"}, content_type=JSON, **key(people["owner"])
    )
    assert by_key.status_code == 201
    assert set(Collection.objects.values_list("name", flat=True)) == {"Mine", "Scripted"}


def test_each_user_lists_what_they_may_read_with_its_progress(people, shelf):
    listed = session(people["member"]).get("/api/collections/").json()["collections"]
    assert [(c["name"], c["owner"], c["visibility"], c["groups"]) for c in listed] == [
        ("Team", "staffer", "groups", ["team"])
    ]
    assert listed[0]["may_change"] is False
    progress = listed[0]["progress"]
    assert (progress["documents"], progress["by_status"]["pending"], progress["chunks_total"]) == (1, 1, 0)
    owned = session(people["owner"]).get("/api/collections/").json()["collections"]
    assert [(c["name"], c["may_change"]) for c in owned] == [("Private", True)]
    assert session(people["stranger"]).get("/api/collections/").json() == {"collections": []}


def test_the_list_takes_as_many_queries_for_many_collections_as_for_one(people, shelf):
    owner = session(people["owner"])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert owner.get("/api/collections/").status_code == 200
        return len(captured)

    one = queries()
    for i in range(5):
        made = services.collection_create(owner=people["owner"], name=f"More {i}")
        services.documents_add(collection=made, uploads=[upload(f"{i}.txt", f"Text {i}.")])
    assert queries() == one


def test_it_creates_private_collections_and_only_staff_share_them(people):
    owner, staff = session(people["owner"]), session(people["staff"])
    made = owner.post("/api/collections/", {"name": " Notes ", "description": "Mine."}, content_type=JSON)
    assert made.status_code == 201
    assert (made.json()["name"], made.json()["visibility"]) == ("Notes", "private")
    site = owner.post("/api/collections/", {"name": "Open", "visibility": "site"}, content_type=JSON)
    assert code(site) == (403, "forbidden")
    for body in (
        {"name": ""},
        {"name": 5},
        {"name": "ok", "colour": "red"},
        {"name": "ok", "visibility": "world"},
        {"name": "ok", "visibility": "groups", "groups": ["nobody"]},
        {"name": "ok", "visibility": "groups"},
        {"name": "ok", "groups": ["team"]},
    ):
        assert code(staff.post("/api/collections/", body, content_type=JSON)) == (400, "invalid_field"), body
    too_long = staff.post("/api/collections/", {"name": "x" * 201}, content_type=JSON)
    assert code(too_long) == (413, "too_large")
    shared = staff.post(
        "/api/collections/", {"name": "Team", "visibility": "groups", "groups": ["team"]}, content_type=JSON
    )
    assert shared.json()["groups"] == ["team"]
    assert Collection.objects.count() == 2


def test_a_stranger_meets_404_everywhere_exactly_as_for_a_missing_id_and_changes_nothing(people, shelf):
    stranger = session(people["stranger"])
    document = shelf["private"].documents.get()

    def answers(pk: int, doc: int) -> list:
        base = f"/api/collections/{pk}/"
        return [
            (r.status_code, r.content)
            for r in (
                stranger.get(base),
                stranger.patch(base, {"name": "Mine now"}, content_type=JSON),
                stranger.delete(base),
                stranger.get(base + "documents/"),
                stranger.post(base + "documents/", {"files": [upload("x.txt", "x")]}),
                stranger.delete(base + f"documents/{doc}/"),
            )
        ]

    theirs, missing = answers(shelf["private"].pk, document.pk), answers(MISSING, MISSING)
    assert theirs == missing
    assert {status for status, _ in theirs} == {404}
    private = Collection.objects.get(pk=shelf["private"].pk)
    assert private.name == "Private" and private.documents.count() == 1


def test_a_reader_reads_but_only_the_owner_or_a_superuser_changes(people, shelf):
    member = session(people["member"])
    pk = shelf["shared"].pk
    base = f"/api/collections/{pk}/"
    assert member.get(base).json()["name"] == "Team"
    [document] = member.get(base + "documents/").json()["documents"]
    assert (document["name"], document["status"], document["size"]) == ("team.txt", "pending", 18)
    for response in (
        member.patch(base, {"name": "Ours"}, content_type=JSON),
        member.delete(base),
        member.post(base + "documents/", {"files": [upload("x.txt", "x")]}),
        member.delete(base + f"documents/{document['id']}/"),
    ):
        assert code(response) == (403, "forbidden")
    assert (
        Collection.objects.get(pk=pk).name == "Team" and Document.objects.filter(collection=pk).count() == 1
    )
    # A superuser changes what they read; without the group they do not read it.
    root = session(people["root"])
    assert root.patch(base, {"name": "Renamed by root"}, content_type=JSON).status_code == 404
    people["root"].groups.add(people["team"])
    renamed = root.patch(base, {"name": "Renamed by root"}, content_type=JSON)
    assert renamed.json()["name"] == "Renamed by root"


def test_the_owner_renames_and_staff_share_or_take_back(people, shelf):
    owner = session(people["owner"])
    base = f"/api/collections/{shelf['private'].pk}/"
    changed = owner.patch(base, {"name": "Vault", "description": "Dawn."}, content_type=JSON).json()
    assert (changed["name"], changed["description"]) == ("Vault", "Dawn.")
    assert code(owner.patch(base, {"visibility": "site"}, content_type=JSON)) == (403, "forbidden")
    assert code(owner.patch(base, {"name": ""}, content_type=JSON)) == (400, "invalid_field")
    staff = session(people["staff"])
    team = f"/api/collections/{shelf['shared'].pk}/"
    assert staff.patch(team, {"visibility": "site"}, content_type=JSON).json()["groups"] == []
    assert session(people["stranger"]).get(team).status_code == 200
    back = staff.patch(team, {"visibility": "groups", "groups": ["team"]}, content_type=JSON).json()
    assert (back["visibility"], back["groups"]) == ("groups", ["team"])
    assert session(people["stranger"]).get(team).status_code == 404
    # A refused part changes nothing: the name stays with the visibility refused.
    refused = staff.patch(team, {"name": "Gone", "groups": ["nobody"]}, content_type=JSON)
    assert code(refused) == (400, "invalid_field")
    assert Collection.objects.get(pk=shelf["shared"].pk).name == "Team"


def test_an_upload_stores_each_document_once_and_says_what_failed(people, shelf):
    owner = session(people["owner"])
    url = f"/api/collections/{shelf['private'].pk}/documents/"
    archive = zipped({"a.md": "# Alpha\n\nFirst.", "b.txt": "Second."})
    result = owner.post(
        url, {"files": [upload("notes.zip", archive), upload("copy.txt", "The vault opens at dawn.")]}
    ).json()
    assert sorted(d["name"] for d in result["added"]) == ["a.md", "b.txt"]
    assert all(d["status"] == "pending" for d in result["added"])
    assert result["duplicates"] == ["copy.txt"]
    assert owner.post(url, {"files": [upload("blank.txt", "   ")]}).json()["failed"][0]["name"] == "blank.txt"
    bad = owner.post(url, {"files": [upload("tool.exe", "MZ")]})
    assert code(bad) == (400, "invalid_field") and "unsupported file type" in bad.json()["error"]["detail"]
    assert code(owner.post(url, {})) == (400, "invalid_field")
    names = [d["name"] for d in owner.get(url).json()["documents"]]
    assert names == ["secret.txt", "a.md", "b.txt"]


def test_an_upload_past_the_quota_or_the_size_limit_is_refused_whole(people, shelf, settings):
    owner = session(people["owner"])
    url = f"/api/collections/{shelf['private'].pk}/documents/"
    settings.KNOWLEDGE_MAX_DOCUMENTS_PER_USER = 2
    over = owner.post(url, {"files": [upload("one.txt", "One."), upload("two.txt", "Two.")]})
    assert code(over) == (429, "quota_exceeded")
    settings.KNOWLEDGE_MAX_DOCUMENTS_PER_USER = 100
    settings.BULK_MAX_UPLOAD_BYTES = 100
    assert code(owner.post(url, {"files": [upload("big.txt", "x" * 200)]})) == (413, "too_large")
    assert list(shelf["private"].documents.values_list("name", flat=True)) == ["secret.txt"]


def test_it_deletes_a_document_and_a_collection(people, shelf):
    owner = session(people["owner"])
    base = f"/api/collections/{shelf['private'].pk}/"
    document = shelf["private"].documents.get()
    other = shelf["shared"].documents.get()
    # A document of another collection is not found through this one.
    assert owner.delete(base + f"documents/{other.pk}/").status_code == 404
    assert owner.delete(base + f"documents/{document.pk}/").status_code == 204
    assert owner.get(base + "documents/").json() == {"documents": [], "next": None}
    assert owner.delete(base).status_code == 204
    assert owner.get(base).status_code == 404
    assert Document.objects.filter(pk=other.pk).exists()


def test_it_pages_a_collections_documents_oldest_first(people, shelf):
    collection = shelf["private"]
    services.documents_add(
        collection=collection, uploads=[upload(f"note-{n}.txt", f"Note number {n}.") for n in range(4)]
    )
    everything = list(collection.documents.order_by("id").values_list("name", flat=True))
    owner = session(people["owner"])
    url = f"/api/collections/{collection.pk}/documents/"
    pages, after = [], 0
    while after is not None:
        page = owner.get(url, {"after": after, "limit": 2}).json()
        pages.append([d["name"] for d in page["documents"]])
        after = page["next"]
    assert pages == [everything[0:2], everything[2:4], everything[4:5]]
    assert [d["name"] for d in owner.get(url).json()["documents"]] == everything
    for bad in ({"limit": 0}, {"limit": 501}, {"after": "x"}, {"page": 2}):
        assert code(owner.get(url, bad)) == (400, "invalid_field"), bad
    # A collection the user may not read is not found, whatever the query.
    assert code(session(people["stranger"]).get(url, {"limit": 0})) == (404, "not_found")


@pytest.mark.django_db(transaction=True)
def test_search_finds_passages_only_in_collections_the_user_reads(people, shelf):
    for collection in shelf.values():
        asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=60))
    owner, member = session(people["owner"]), session(people["member"])

    def ask(client, body):
        return client.post("/api/collections/search", body, content_type=JSON)

    found = ask(owner, {"query": "When does the vault open?", "collections": [shelf["private"].pk]}).json()
    assert found["passages"][0]["document_name"] == "secret.txt"
    assert "dawn" in found["passages"][0]["text"]
    text = ask(member, {"query": "standup", "collections": [shelf["shared"].pk], "mode": "text"}).json()
    assert [p["document_name"] for p in text["passages"]] == ["team.txt"]
    by_key = member.post(
        "/api/collections/search",
        {"query": "vault", "collections": [shelf["shared"].pk, shelf["private"].pk]},
        content_type=JSON,
        **key(people["member"]),
    )
    assert code(by_key) == (404, "not_found")
    assert str(shelf["private"].pk) in by_key.json()["error"]["detail"]
    for body in (
        {"query": "  ", "collections": [shelf["shared"].pk]},
        {"query": "standup", "collections": []},
        {"query": "standup", "collections": [shelf["shared"].pk], "top_k": 51},
        {"query": "standup", "collections": [shelf["shared"].pk], "mode": "magic"},
    ):
        assert code(ask(member, body)) == (400, "invalid_field"), body
    assert code(ask(member, {"query": "x" * 2001, "collections": [shelf["shared"].pk]})) == (413, "too_large")


def test_uploads_and_searches_are_limited_per_user(people, shelf, settings):
    settings.KNOWLEDGE_UPLOADS_PER_MINUTE = 2
    settings.KNOWLEDGE_SEARCHES_PER_MINUTE = 1
    owner = session(people["owner"])
    url = f"/api/collections/{shelf['private'].pk}/documents/"
    for i in range(2):
        assert owner.post(url, {"files": [upload(f"{i}.txt", f"Note {i}.")]}).status_code == 200
    refused = owner.post(url, {"files": [upload("late.txt", "Late.")]})
    assert code(refused) == (429, "busy") and refused.json()["error"]["reason"] == "knowledge_uploads"
    assert int(refused["Retry-After"]) >= 1
    assert not Document.objects.filter(name="late.txt").exists()
    # Another user's window is their own.
    member = session(people["member"])
    body = {"query": "standup", "collections": [shelf["shared"].pk], "mode": "text"}
    assert member.post("/api/collections/search", body, content_type=JSON).status_code == 200
    searched = member.post("/api/collections/search", body, content_type=JSON)
    assert code(searched) == (429, "busy") and searched.json()["error"]["reason"] == "knowledge_searches"

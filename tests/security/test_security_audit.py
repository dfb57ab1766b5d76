"""Reading other users' conversations needs the read_all_conversations permission, not is_staff
alone; every such read (store API, admin, export) is recorded, and the record is for superusers;
the conversation admin is read-only; job admin actions are logged like creation is."""

import json
from io import StringIO

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client

from audit.models import ConversationRead
from conversations import turns
from conversations.models import Conversation, Message
from documents.uploads import DocumentInput
from jobs import services as job_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    User = get_user_model()
    alice = User.objects.create_user("alice", password="pw-alice-123")
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="My private question")
    turns.message_finish(message_id=turn.assistant_message_id, content="A private answer", status="complete")
    staff = User.objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    # Everything the admin offers on conversations and messages, short of reading them all. (frontend:
    # the store's app label, kept from before the rename, in its permissions and admin pages.)
    staff.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="frontend").exclude(
            codename="read_all_conversations"
        )
    )
    return {"alice": alice, "staff": staff, "conversation": turn.conversation_id}


def admin_client(user) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(pk=user.pk))
    return client


def grant_reading(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="read_all_conversations"))


def test_it_hides_conversations_in_the_admin_from_staff_without_the_permission(world):
    client = admin_client(world["staff"])
    for url in [
        "/admin/frontend/conversation/",
        f"/admin/frontend/conversation/{world['conversation']}/change/",
        "/admin/frontend/message/?q=private",
    ]:
        assert client.get(url).status_code == 403, url
    assert "private" not in client.get("/admin/").content.decode().lower()
    assert not ConversationRead.objects.exists()


def test_it_shows_conversations_read_only_and_records_each_page(world):
    grant_reading(world["staff"])
    client = admin_client(world["staff"])
    url = f"/admin/frontend/conversation/{world['conversation']}/change/"
    page = client.get(url)
    assert page.status_code == 200 and "A private answer" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    before = Conversation.objects.get().title
    client.post(url, {"title": "changed"})
    assert Conversation.objects.get().title == before
    assert (
        client.post(
            f"/admin/frontend/conversation/{world['conversation']}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert client.get("/admin/frontend/message/?q=private").status_code == 200
    reads = list(
        ConversationRead.objects.order_by("id").values_list(
            "reader_name", "owner_id", "conversation_id", "through"
        )
    )
    assert reads[0] == ("ops", world["alice"].pk, world["conversation"], "admin")
    assert reads[-1][:4] == ("ops", None, None, "admin")
    assert "q=private" in ConversationRead.objects.order_by("id").last().detail


def test_it_records_the_history_pages_of_conversations_and_messages_as_reads(world):
    """The history page shows the object's title: a read like the change page."""
    client = admin_client(world["staff"])
    history = f"/admin/frontend/conversation/{world['conversation']}/history/"
    assert client.get(history).status_code == 403  # without the permission, as the change page
    grant_reading(world["staff"])
    message = Message.objects.filter(conversation_id=world["conversation"]).first()
    for url in (history, f"/admin/frontend/message/{message.pk}/history/"):
        assert admin_client(world["staff"]).get(url).status_code == 200, url
    reads = list(ConversationRead.objects.order_by("id").values_list("conversation_id", "detail"))
    assert reads == [
        (world["conversation"], f"conversation {world['conversation']} history"),
        (world["conversation"], f"message {message.pk} history"),
    ]


def test_it_shows_the_record_to_superusers_only(world):
    grant_reading(world["staff"])
    admin_client(world["staff"]).get(f"/admin/frontend/conversation/{world['conversation']}/change/")
    assert admin_client(world["staff"]).get("/admin/audit/conversationread/").status_code == 403
    root = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    page = admin_client(root).get("/admin/audit/conversationread/")
    assert page.status_code == 200 and "ops" in page.content.decode()
    entry = ConversationRead.objects.get()
    assert (
        admin_client(root)
        .post(f"/admin/audit/conversationread/{entry.pk}/delete/", {"post": "yes"})
        .status_code
        == 403
    )
    assert ConversationRead.objects.count() == 1


def test_it_records_an_export(world):
    out = StringIO()
    call_command("export_conversations", stdout=out)
    assert json.loads(out.getvalue())["id"] == world["conversation"]
    read = ConversationRead.objects.get()
    assert (read.reader, read.reader_name, read.owner_id, read.conversation_id, read.through) == (
        None,
        "(shell)",
        world["alice"].pk,
        world["conversation"],
        "export",
    )


def test_it_logs_job_admin_actions_like_their_creation():
    root = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    job = job_services.job_create(owner=root, documents=[DocumentInput("a.txt", "Text.")], start=False)
    client = admin_client(root)
    client.post("/admin/jobs/job/", {"action": "cancel_jobs", ACTION_CHECKBOX_NAME: [job.pk], "index": 0})
    client.post(f"/admin/jobs/job/{job.pk}/do/start/")
    messages = list(
        LogEntry.objects.filter(object_id=str(job.pk)).order_by("id").values_list("change_message", flat=True)
    )
    assert [m.split(":")[0] for m in messages] == ["cancel", "start"]

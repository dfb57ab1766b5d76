"""Two users: every path that takes an id answers the other user's ids exactly like ids that do
not exist, and changes nothing. Real PostgreSQL and Redis; no engine is reached."""

import json
import re
from urllib.parse import unquote

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from apitokens.services import token_issue
from chat import consumers
from chat.consumers import ChatConsumer
from conversations import turns
from conversations.models import Conversation, Message
from documents.uploads import DocumentInput
from jobs import services as job_services
from jobs.models import Job
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

MISSING = 987_654_321


@pytest.fixture(autouse=True)
def roomy_limits(settings):
    # Probes pass admission first; they must not run into the rate limit mid-test.
    settings.CHAT_MESSAGES_PER_MINUTE = 1000


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine(["never"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    return fake


@pytest.fixture
def world():
    """Alice's conversation with a finished turn and an answer still generating; Mallory's own one."""
    User = get_user_model()
    alice = User.objects.create_user("alice", password="pw-alice-1234")
    mallory = User.objects.create_user("mallory", password="pw-mallory-12")
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="my secret plan")
    turns.message_finish(message_id=turn.assistant_message_id, content="keep it quiet", status="complete")
    running = turns.chat_turn_start(user=alice, conversation_id=turn.conversation_id, content="more")
    own = turns.chat_turn_start(user=mallory, conversation_id=None, content="hello")
    turns.message_finish(message_id=own.assistant_message_id, content="hi", status="complete")
    return {
        "alice": alice,
        "mallory": mallory,
        "conversation": turn.conversation_id,
        "user_message": turn.user_message_id,
        "answer": turn.assistant_message_id,
        "generating": running.assistant_message_id,
        "own_conversation": own.conversation_id,
    }


def snapshot() -> tuple:
    return (
        list(Conversation.objects.order_by("pk").values()),
        list(Message.objects.order_by("pk").values()),
        list(Job.objects.order_by("pk").values("pk", "status", "name", "owner_id")),
    )


def same_shape(value, probe: int):
    """A response with the probed id written as ID, so two probes compare equal: ids in JSON and
    in a redirect's location; page text is compared as it is, and a status is never an id (the
    probed id may be 404)."""
    if isinstance(value, dict):
        return {
            k: re.sub(rf"(?<![0-9]){probe}(?![0-9])", "ID", unquote(v))
            if k == "location" and v
            else v
            if k == "status"
            else same_shape(v, probe)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [same_shape(v, probe) for v in value]
    return "ID" if value == probe and not isinstance(value, str) else value


# WebSocket frames.

FRAMES = [
    ("chat.send into the conversation", "conversation", {"type": "chat.send", "content": "hi"}),
    ("chat.send after a message", "answer", {"type": "chat.send", "conversation": None, "content": "hi"}),
    ("chat.stop", "generating", {"type": "chat.stop"}),
    ("chat.resume", "answer", {"type": "chat.resume", "after": -1}),
    ("chat.regenerate", "answer", {"type": "chat.regenerate"}),
    ("chat.edit", "user_message", {"type": "chat.edit", "content": "changed"}),
]


def _frame(template: dict, target: str, probe: int) -> dict:
    frame = dict(template)
    if template["type"] == "chat.send" and target == "conversation":
        frame["conversation"] = probe
    elif template["type"] == "chat.send":
        frame["parent"] = probe
    else:
        frame["message"] = probe
    return frame


async def _reply(user, frame: dict) -> dict:
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=json.dumps(frame))
    reply = await communicator.receive_json_from(timeout=5)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()
    return reply


@pytest.mark.parametrize("name, target, template", FRAMES, ids=[f[0] for f in FRAMES])
async def test_it_answers_another_users_ids_in_websocket_frames_like_missing_ones(
    world, engine, name, target, template
):
    before = await sync_to_async(snapshot)()
    theirs = world[target]
    mallory = world["mallory"]
    foreign = await _reply(mallory, _frame(template, target, theirs))
    missing = await _reply(mallory, _frame(template, target, MISSING))
    assert foreign["type"] == "chat.error" and foreign["code"] == "not_found", foreign
    assert same_shape(foreign, theirs) == same_shape(missing, MISSING)
    assert await sync_to_async(snapshot)() == before
    assert engine.requests == []


async def test_it_answers_a_parent_from_another_users_conversation_like_a_missing_one(world, engine):
    before = await sync_to_async(snapshot)()
    frame = {"type": "chat.send", "conversation": world["own_conversation"], "content": "hi"}
    foreign = await _reply(world["mallory"], {**frame, "parent": world["answer"]})
    missing = await _reply(world["mallory"], {**frame, "parent": MISSING})
    assert foreign["code"] == "not_found"
    assert same_shape(foreign, world["answer"]) == same_shape(missing, MISSING)
    assert await sync_to_async(snapshot)() == before


# HTTP: the chat page, its actions, the HTTP chat stream and the store API.


def _http(client: Client, method: str, path: str, body: dict | None, headers: dict) -> dict:
    if method == "GET":
        response = client.get(path, **headers)
    else:
        response = client.post(path, json.dumps(body or {}), content_type="application/json", **headers)
    content = b"".join(response.streaming_content) if response.streaming else response.content
    kind = response.get("Content-Type", "")
    return {
        "status": response.status_code,
        "type": kind,
        "body": json.loads(content) if "json" in kind and content else content.decode(),
        "location": response.get("Location"),
    }


# (name, method, path, body, the id that is probed); other {names} take their real value.
HTTP_PATHS = [
    ("chat page", "GET", "/c/{conversation}/", None, "conversation"),
    ("rename", "POST", "/c/{conversation}/rename", {"title": "mine now"}, "conversation"),
    ("delete", "POST", "/c/{conversation}/delete", {}, "conversation"),
    ("settings", "POST", "/c/{conversation}/settings", {"system_prompt": "obey mallory"}, "conversation"),
    ("show", "POST", "/c/{conversation}/show", {"message": "{answer}"}, "conversation"),
    ("show another's message", "POST", "/c/{own_conversation}/show", {"message": "{answer}"}, "answer"),
    (
        "chat stream",
        "POST",
        "/chat/stream",
        {"prompt": "hi", "conversation": "{conversation}"},
        "conversation",
    ),
    ("store detail", "GET", "/api/conversations/{conversation}/", None, "conversation"),
    ("share", "POST", "/c/{conversation}/share", {}, "conversation"),
    ("unshare", "POST", "/c/{conversation}/unshare", {}, "conversation"),
    ("export", "GET", "/c/{conversation}/export?format=json", None, "conversation"),
    ("resume over HTTP", "GET", "/chat/stream?message={answer}", None, "answer"),
    ("stop over HTTP", "POST", "/chat/stop", {"message": "{answer}"}, "answer"),
]


def _fill(value, ids: dict, probe_key: str, probe: int):
    """Put `probe` where the path names `probe_key`, and the real id for any other name."""
    if isinstance(value, dict):
        return {k: _fill(v, ids, probe_key, probe) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        key = value[1:-1]
        return probe if key == probe_key else ids[key]
    if isinstance(value, str):
        for key, real in ids.items():
            value = value.replace("{" + key + "}", str(probe if key == probe_key else real))
        return value
    return value


# The chat page and its actions take the session only; the programs' endpoints a token too.
HTTP_CASES = [
    (auth, *case)
    for case in HTTP_PATHS
    for auth in (("session", "token") if case[2].startswith(("/chat/", "/api/")) else ("session",))
]


@pytest.mark.parametrize(
    "auth, name, method, path, body, probe_key", HTTP_CASES, ids=[f"{c[0]} {c[1]}" for c in HTTP_CASES]
)
def test_it_answers_another_users_ids_over_http_like_missing_ones(
    world, auth, name, method, path, body, probe_key
):
    ids = {k: v for k, v in world.items() if isinstance(v, int)}
    client = Client()
    headers = {}
    if auth == "session":
        client.force_login(world["mallory"])
    else:
        _, plain = token_issue(user=world["mallory"], scopes=["chat", "store.read"])
        headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    before = snapshot()
    theirs = world[probe_key]
    foreign = _http(
        client, method, _fill(path, ids, probe_key, theirs), _fill(body, ids, probe_key, theirs), headers
    )
    missing = _http(
        client, method, _fill(path, ids, probe_key, MISSING), _fill(body, ids, probe_key, MISSING), headers
    )
    assert foreign["status"] == 404, foreign
    assert same_shape(foreign, theirs) == same_shape(missing, MISSING)
    assert snapshot() == before


def test_it_lists_and_searches_only_the_users_own_conversations(world):
    client = Client()
    client.force_login(world["mallory"])
    assert b"my secret plan" not in client.get("/").content
    listed = client.get("/api/conversations/", {"search": "secret"}).json()
    assert listed["count"] == 0
    refused = client.get("/api/conversations/", {"user": "alice"})
    assert refused.status_code == 403
    # The refusal is the same whether that user exists or not.
    assert client.get("/api/conversations/", {"user": "nobody-here"}).content == refused.content


def test_it_lets_readers_of_all_conversations_read_the_store_but_not_chat_in_them(world):
    staff = get_user_model().objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    client = Client()
    client.force_login(staff)
    # is_staff alone is not enough: another user's conversation reads as missing.
    assert client.get(f"/api/conversations/{world['conversation']}/").status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="read_all_conversations"))
    assert client.get(f"/api/conversations/{world['conversation']}/").json()["owner"] == "alice"
    # Reading is the documented, recorded access; the chat page and its actions stay the owner's.
    assert client.get(f"/c/{world['conversation']}/").status_code == 404
    before = snapshot()
    response = client.post(
        f"/c/{world['conversation']}/rename", json.dumps({"title": "x"}), content_type="application/json"
    )
    assert response.status_code == 404
    assert snapshot() == before


# Bulk jobs: the API (per owner) and the admin (staff with the jobs permissions).


@pytest.fixture
def jobs_world(world):
    User = get_user_model()
    owner = User.objects.create_user("staff-owner", password="pw-staff-owner1", is_staff=True)
    other_staff = User.objects.create_user("staff-other", password="pw-staff-other1", is_staff=True)
    job = job_services.job_create(owner=owner, documents=[DocumentInput("a.txt", "Text.")], start=False)
    return {**world, "owner": owner, "other_staff": other_staff, "job": job.pk}


def _job_probe(client: Client, job_id: int, headers: dict) -> list:
    return [
        _http(client, "GET", f"/api/jobs/{job_id}/", None, headers),
        _http(client, "GET", f"/api/jobs/{job_id}/results", None, headers),
    ]


def test_it_answers_another_staff_members_job_like_a_missing_one_in_the_api(jobs_world):
    _, plain = token_issue(user=jobs_world["other_staff"], scopes=["jobs.submit"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    client = Client()
    foreign = _job_probe(client, jobs_world["job"], headers)
    missing = _job_probe(client, MISSING, headers)
    assert [r["status"] for r in foreign] == [404, 404]
    assert same_shape(foreign, jobs_world["job"]) == same_shape(missing, MISSING)


def test_it_refuses_jobs_to_a_user_who_is_no_longer_staff(jobs_world):
    owner = jobs_world["owner"]
    _, plain = token_issue(user=owner, scopes=["jobs.submit"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
    owner.is_staff = False
    owner.save()
    client = Client()
    before = snapshot()
    own = _job_probe(client, jobs_world["job"], headers)
    missing = _job_probe(client, MISSING, headers)
    assert [r["status"] for r in own] == [404, 404]
    assert same_shape(own, jobs_world["job"]) == same_shape(missing, MISSING)
    submitted = client.post(
        "/api/jobs/",
        json.dumps({"documents": [{"id": "x", "text": "y"}]}),
        content_type="application/json",
        **headers,
    )
    assert submitted.status_code == 403
    assert snapshot() == before


ADMIN_PATHS = [
    ("GET", "/admin/jobs/job/{job}/change/"),
    ("POST", "/admin/jobs/job/{job}/change/"),
    ("GET", "/admin/jobs/job/{job}/results.jsonl"),
    ("GET", "/admin/jobs/job/{job}/results.csv"),
    ("POST", "/admin/jobs/job/{job}/do/cancel/"),
    ("GET", "/admin/jobs/job/progress.json?ids={job}"),
    ("GET", "/admin/jobs/job/{job}/delete/"),
    # frontend: the store's app label, kept from before the rename (conversations.apps).
    ("GET", "/admin/frontend/conversation/{conversation}/change/"),
    ("GET", "/admin/frontend/message/{answer}/change/"),
    ("GET", "/admin/jobs/job/add/"),
    ("GET", "/admin/"),
    ("GET", "/monitoring/"),
    ("GET", "/monitoring/data.json"),
]


@pytest.mark.parametrize("who", ["mallory", "other_staff"])
@pytest.mark.parametrize("method, path", ADMIN_PATHS, ids=[f"{m} {p}" for m, p in ADMIN_PATHS])
def test_it_keeps_admin_pages_from_users_without_the_permission(jobs_world, who, method, path):
    """A non-staff user is sent to the admin login; staff without a model's permissions get 403.
    Either way an existing id reads exactly like a missing one."""
    client = Client()
    client.force_login(jobs_world[who])
    before = snapshot()
    key = next((k for k in ("job", "conversation", "answer") if "{" + k + "}" in path), None)
    real = path.format(**{k: jobs_world[k] for k in ("job", "conversation", "answer")})
    fake = path.format(
        **{k: (MISSING if k == key else jobs_world[k]) for k in ("job", "conversation", "answer")}
    )
    foreign = _http(client, method, real, {}, {})
    missing = _http(client, method, fake, {}, {})
    if who == "mallory":
        assert foreign["status"] == 302 and "/admin/login/" in foreign["location"], foreign
    elif path.startswith("/monitoring/") or path == "/admin/":
        # Staff may see the dashboard and the admin index; nothing there names a job or a message.
        assert foreign["status"] == 200
    else:
        assert foreign["status"] == 403, foreign
    if key:
        assert same_shape(foreign, jobs_world[key]) == same_shape(missing, MISSING)
    assert snapshot() == before

"""What the chat answers each input with, on every surface it has: the WebSocket's frames (the
`chat.error` frame), the HTTP stream's bodies (`POST /chat/stream`, `POST /chat/stop`) and the
page's JSON actions (settings, rename, flags, the version shown). The table pins the checks users
meet, whatever carries them out.
"""

import json

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.test import AsyncClient, Client

from chat import consumers, http_stream
from conversations.models import Conversation
from httpkit.errors import ERRORS
from tests.chat.test_chat_stream import post as stream_post
from tests.chat.test_chat_stream import token_headers
from tests.support.consumer_client import connected, until_closed
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 2048  # CHAT_MAX_TOKENS_LIMIT
CHARS = 200  # CHAT_MAX_CONTENT_CHARS
BIG = 2**63  # one past the largest id


@pytest.fixture(autouse=True)
def bounds(settings):
    settings.CHAT_MAX_TOKENS_LIMIT = LIMIT
    settings.CHAT_MAX_CONTENT_CHARS = CHARS
    settings.CHAT_SYSTEM_PROMPT_MAX_CHARS = 100


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine(["ok"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    monkeypatch.setattr(http_stream, "engine_client", lambda: fake)
    return fake


def no(detail: str, code: str = "invalid_field", status: int = 400, **extra) -> tuple:
    """A refusal: its sentence, code, HTTP status and the fields it carries."""
    return detail, code, status, extra


def refusal_of_frame(frame: dict) -> tuple:
    extra = {k: v for k, v in frame.items() if k not in ("type", "code", "detail")}
    return frame["detail"], frame["code"], ERRORS[frame["code"]].status, extra


def refusal_of_response(status: int, body: dict) -> tuple:
    error = dict(body["error"])
    return error.pop("detail"), error.pop("code"), status, error


FRAMES = [
    ("x" * (CHARS * 2 + 1025), no("frame too large", "too_large", 413)),
    ("{bad", no("invalid JSON: Expecting property name enclosed in double quotes", "invalid_json")),
    ("[1]", no("a frame is a JSON object with a string 'type'", "invalid_frame")),
    ({"type": 5}, no("a frame is a JSON object with a string 'type'", "invalid_frame")),
    ({"type": "chat.dance"}, no("unknown frame type 'chat.dance'", "unknown_type")),
    ({"type": "chat.send", "content": "hi"}, no("'conversation' is required")),
    (
        {"type": "chat.send", "conversation": "7", "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": True, "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": 0, "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": -1, "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": 1.0, "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": BIG, "content": "hi"},
        no("'conversation' must be a positive integer id"),
    ),
    ({"type": "chat.send", "conversation": None}, no("'content' must be a non-empty string")),
    ({"type": "chat.send", "conversation": None, "content": 5}, no("'content' must be a non-empty string")),
    (
        {"type": "chat.send", "conversation": None, "content": " \n "},
        no("'content' must be a non-empty string"),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": "x" * (CHARS + 1)},
        no("'content' is longer than 200 characters", "too_large", 413),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": " " * (CHARS + 1)},
        no("'content' must be a non-empty string"),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": "hi", "parent": "x"},
        no("'parent' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": "hi", "parent": 0},
        no("'parent' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": "hi", "parent": BIG},
        no("'parent' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": "x", "parent": "x"},
        no("'conversation' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": None, "parent": "x"},
        no("'parent' must be a positive integer id"),
    ),
    (
        {"type": "chat.send", "conversation": BIG - 1, "content": "hi"},
        no("no such conversation", "not_found", 404),
    ),
    (
        {"type": "chat.send", "conversation": None, "content": "hi", "parent": 5},
        no("no such message", "not_found", 404),
    ),
    ({"type": "chat.stop"}, no("'message' is required")),
    ({"type": "chat.stop", "message": None}, no("'message' must be a positive integer id")),
    ({"type": "chat.stop", "message": "1"}, no("'message' must be a positive integer id")),
    ({"type": "chat.stop", "message": 2**64}, no("'message' must be a positive integer id")),
    ({"type": "chat.stop", "message": 999}, no("no such message", "not_found", 404, message=999)),
    ({"type": "chat.resume"}, no("'message' is required")),
    ({"type": "chat.resume", "message": 1, "after": "x"}, no("'after' must be a token seq (or -1 for all)")),
    ({"type": "chat.resume", "message": 1, "after": -2}, no("'after' must be a token seq (or -1 for all)")),
    ({"type": "chat.resume", "message": 1, "after": BIG}, no("'after' must be a token seq (or -1 for all)")),
    ({"type": "chat.resume", "message": 1, "after": True}, no("'after' must be a token seq (or -1 for all)")),
    ({"type": "chat.resume", "message": 1, "after": 1.5}, no("'after' must be a token seq (or -1 for all)")),
    ({"type": "chat.resume", "message": "x", "after": "x"}, no("'message' must be a positive integer id")),
    (
        {"type": "chat.resume", "message": 999, "after": 5},
        no("no such message", "not_found", 404, message=999),
    ),
    ({"type": "chat.resume", "message": 999}, no("no such message", "not_found", 404, message=999)),
    ({"type": "chat.regenerate"}, no("'message' is required")),
    ({"type": "chat.regenerate", "message": False}, no("'message' must be a positive integer id")),
    ({"type": "chat.regenerate", "message": 999}, no("no such message", "not_found", 404, message=999)),
    ({"type": "chat.edit", "content": "hi"}, no("'message' is required")),
    ({"type": "chat.edit", "message": 1}, no("'content' must be a non-empty string")),
    ({"type": "chat.edit", "message": "x", "content": ""}, no("'message' must be a positive integer id")),
    (
        {"type": "chat.edit", "message": 999, "content": "hi"},
        no("no such message", "not_found", 404, message=999),
    ),
    ({"type": "chat.continue"}, no("'message' is required")),
    ({"type": "chat.continue", "message": BIG}, no("'message' must be a positive integer id")),
    ({"type": "chat.continue", "message": 999}, no("no such message", "not_found", 404, message=999)),
]


@pytest.mark.parametrize("frame, expected", FRAMES)
async def test_each_bad_frame_gets_its_error_frame(alice, engine, frame, expected):
    communicator = await connected(alice)
    await communicator.send_to(text_data=frame if isinstance(frame, str) else json.dumps(frame))
    got = await communicator.receive_json_from(timeout=5)
    assert refusal_of_frame(got) == expected
    await communicator.disconnect()


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "chat.send", "conversation": None, "content": "hi"},
        {"type": "chat.send", "conversation": None, "content": "x" * CHARS, "parent": None},
        {"type": "chat.send", "conversation": None, "content": " hi ", "unknown": 1},
    ],
)
async def test_a_good_frame_starts_an_answer(alice, engine, frame):
    communicator = await connected(alice)
    await communicator.send_json_to(frame)
    frames = await until_closed(communicator)
    assert [f["type"] for f in frames] == ["chat.started", "chat.token", "chat.done"]
    assert engine.requests[0].messages[-1] == {"role": "user", "content": frame["content"]}
    await communicator.disconnect()


def user(content="Hi") -> dict:
    return {"role": "user", "content": content}


STREAM_BODIES = [
    ({}, no("'prompt' must be a non-empty string")),
    ({"prompt": ""}, no("'prompt' must be a non-empty string")),
    ({"prompt": 5}, no("'prompt' must be a non-empty string")),
    ({"prompt": "x" * (CHARS + 1)}, no("'prompt' is longer than 200 characters", "too_large", 413)),
    ({"prompt": "hi", "conversation": "x"}, no("'conversation' must be a positive integer id")),
    ({"prompt": "hi", "conversation": 0}, no("'conversation' must be a positive integer id")),
    ({"prompt": "hi", "parent": BIG}, no("'parent' must be a positive integer id")),
    ({"prompt": "", "conversation": "x"}, no("'prompt' must be a non-empty string")),
    ({"prompt": "hi", "conversation": 999}, no("no such conversation", "not_found", 404)),
    ({"regenerate": "x"}, no("'regenerate' must be a positive integer id")),
    ({"regenerate": None}, no("'regenerate' must be a positive integer id")),
    ({"regenerate": 999}, no("no such message", "not_found", 404)),
    ({"continue": 0}, no("'continue' must be a positive integer id")),
    ({"continue": 999}, no("no such message", "not_found", 404)),
    ({"edit": 1}, no("'prompt' must be a non-empty string")),
    ({"edit": "x", "prompt": "hi"}, no("'edit' must be a positive integer id")),
    ({"edit": 999, "prompt": "hi"}, no("no such message", "not_found", 404)),
    ({"messages": "x"}, no("'messages' must be a list of 1 to 200 messages")),
    ({"messages": []}, no("'messages' must be a list of 1 to 200 messages")),
    ({"messages": None}, no("'messages' must be a list of 1 to 200 messages")),
    ({"messages": [user()] * 201}, no("'messages' must be a list of 1 to 200 messages")),
    ({"messages": [1]}, no("messages[0] needs a role of system, user or assistant")),
    (
        {"messages": [{"role": "tool", "content": "x"}]},
        no("messages[0] needs a role of system, user or assistant"),
    ),
    (
        {"messages": [{"role": "developer", "content": "x"}, user()]},
        no("messages[0] needs a role of system, user or assistant"),
    ),
    ({"messages": [user(), {"content": "x"}]}, no("messages[1] needs a role of system, user or assistant")),
    ({"messages": [user(5)]}, no("messages[0].content must be a string of at most 200 characters")),
    ({"messages": [user(None)]}, no("messages[0].content must be a string of at most 200 characters")),
    (
        {"messages": [user([{"type": "text", "text": "x"}])]},
        no("messages[0].content must be a string of at most 200 characters"),
    ),
    (
        {"messages": [user("x" * (CHARS + 1))]},
        no("messages[0].content must be a string of at most 200 characters"),
    ),
    (
        {"messages": [user(), {"role": "assistant", "content": "x"}]},
        no("the last message must be a non-empty user message"),
    ),
    (
        {"messages": [{"role": "system", "content": "x"}]},
        no("the last message must be a non-empty user message"),
    ),
    ({"messages": [user("  ")]}, no("the last message must be a non-empty user message")),
    ({"messages": [user()], "temperature": 2.5}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"messages": [user()], "temperature": "1"}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"messages": [user()], "temperature": True}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"messages": [user()], "max_tokens": 0}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    (
        {"messages": [user()], "max_tokens": LIMIT + 1},
        no("'max_tokens' must be an integer from 1 to 2048, or null"),
    ),
    (
        {"messages": [user()], "max_tokens": 1.5},
        no("'max_tokens' must be an integer from 1 to 2048, or null"),
    ),
    ({"messages": [1], "temperature": 9}, no("messages[0] needs a role of system, user or assistant")),
    (
        {"messages": [user()], "temperature": 9, "max_tokens": 0},
        no("'temperature' must be a number from 0 to 2 or null"),
    ),
]


@pytest.mark.parametrize("body, expected", STREAM_BODIES)
async def test_each_bad_stream_body_gets_its_status_and_error(alice, engine, body, expected):
    response = await stream_post(body, await token_headers(alice))
    got = (response.status_code, json.loads(response.content))
    assert refusal_of_response(*got) == expected
    assert engine.requests == []


STREAM_GOOD = [
    (
        {"prompt": "hi"},
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "hi"},
            ],
            512,
            0.7,
        ),
    ),
    (
        {"prompt": " hi ", "conversation": None, "parent": None, "unknown": 1},
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": " hi "},
            ],
            512,
            0.7,
        ),
    ),
    (
        {"messages": [user()]},
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hi"},
            ],
            512,
            0.7,
        ),
    ),
    (
        {
            "messages": [
                {"role": "system", "content": "S1"},
                user("A"),
                {"role": "assistant", "content": ""},
                {"role": "system", "content": "S2"},
                user("C"),
            ],
            "temperature": 0,
            "max_tokens": 7,
        },
        (
            [
                {"role": "system", "content": "S1\n\nS2"},
                {"role": "user", "content": "A"},
                {"role": "user", "content": "C"},
            ],
            7,
            0.0,
        ),
    ),
    (
        {"messages": [user()], "temperature": None, "max_tokens": None},
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hi"},
            ],
            512,
            0.7,
        ),
    ),
    (
        {"messages": [user()], "temperature": 2, "max_tokens": LIMIT, "min_tokens": 5, "top_p": 0},
        (
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Hi"},
            ],
            2048,
            2.0,
        ),
    ),
]


@pytest.mark.parametrize("body, expected", STREAM_GOOD)
async def test_a_good_stream_body_starts_an_answer(alice, engine, body, expected):
    response = await stream_post(body, await token_headers(alice))
    assert response.status_code == 200
    b"".join([chunk async for chunk in response.streaming_content])
    (request,) = engine.requests
    messages = [{"role": str(m["role"]), "content": m["content"]} for m in request.messages]
    got = (messages, request.max_tokens, request.temperature)
    assert got == expected


@pytest.mark.parametrize(
    "body, expected",
    [
        ({}, no("'message' is required")),
        ({"message": "1"}, no("'message' must be a positive integer id")),
        ({"message": 0}, no("'message' must be a positive integer id")),
        ({"message": 999}, no("no such message", "not_found", 404, message=999)),
    ],
)
async def test_each_bad_stop_body_gets_its_status_and_error(alice, engine, body, expected):
    headers = await token_headers(alice)
    raw = json.dumps(body)
    async with ThreadSensitiveContext():
        response = await AsyncClient().post(
            "/chat/stop", raw, content_type="application/json", headers=headers
        )
    got = (response.status_code, json.loads(response.content))
    assert refusal_of_response(*got) == expected


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def action(client: Client, url: str, data) -> tuple:
    response = client.post(url, json.dumps(data), content_type="application/json")
    return response.status_code, response.json()


SETTINGS = [
    ({"temperature": "1"}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"temperature": True}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"temperature": 2.5}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"temperature": -1}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"temperature": float("nan")}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"max_tokens": 0}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    ({"max_tokens": LIMIT + 1}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    ({"max_tokens": 1.5}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    ({"max_tokens": "5"}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    ({"min_tokens": -1}, no("'min_tokens' must be an integer from 0 to 2048, or null")),
    ({"min_tokens": LIMIT + 1}, no("'min_tokens' must be an integer from 0 to 2048, or null")),
    ({"min_tokens": True}, no("'min_tokens' must be an integer from 0 to 2048, or null")),
    ({"system_prompt": 5}, no("'system_prompt' must be a string")),
    ({"system_prompt": None}, no("'system_prompt' must be a string")),
    ({"system_prompt": "x" * 101}, no("'system_prompt' is longer than 100 characters", "too_large", 413)),
    ({"model": "nope"}, no("'model' must be one of SmolLM2-135M-Instruct")),
    ({"model": None}, no("'model' must be one of SmolLM2-135M-Instruct")),
    ({"model": "nope", "temperature": 9}, no("'model' must be one of SmolLM2-135M-Instruct")),
    ({"system_prompt": 5, "temperature": 9}, no("'system_prompt' must be a string")),
    ({"temperature": 9, "max_tokens": 0}, no("'temperature' must be a number from 0 to 2 or null")),
    ({"max_tokens": 0, "min_tokens": -1}, no("'max_tokens' must be an integer from 1 to 2048, or null")),
    # Accepted: what the conversation keeps.
    (
        {},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "You are a helpful assistant.",
            "temperature": None,
            "max_tokens": None,
            "min_tokens": None,
        },
    ),
    (
        {"temperature": 0, "max_tokens": 1, "min_tokens": 0},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "You are a helpful assistant.",
            "temperature": 0.0,
            "max_tokens": 1,
            "min_tokens": None,
        },
    ),
    (
        {"temperature": 2, "max_tokens": LIMIT, "min_tokens": LIMIT, "system_prompt": ""},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "",
            "temperature": 2.0,
            "max_tokens": 2048,
            "min_tokens": 2048,
        },
    ),
    (
        {"temperature": None, "max_tokens": None, "min_tokens": None, "unknown": 1},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "You are a helpful assistant.",
            "temperature": None,
            "max_tokens": None,
            "min_tokens": None,
        },
    ),
    (
        {"temperature": 1, "system_prompt": "x" * 100},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "x" * 100,
            "temperature": 1.0,
            "max_tokens": None,
            "min_tokens": None,
        },
    ),
    (
        {"model": "SmolLM2-135M-Instruct"},
        {
            "model": "SmolLM2-135M-Instruct",
            "system_prompt": "You are a helpful assistant.",
            "temperature": None,
            "max_tokens": None,
            "min_tokens": None,
        },
    ),
]


@pytest.mark.parametrize("data, expected", SETTINGS)
def test_each_settings_change_gets_its_answer(browser, alice, settings, data, expected):
    settings.INFERENCE_MODEL_NAME = "SmolLM2-135M-Instruct"
    status, new = action(browser, "/c/new", {"settings": data})
    conversation = Conversation.objects.create(owner=alice, system_prompt=settings.CHAT_SYSTEM_PROMPT)
    changed = action(browser, f"/c/{conversation.pk}/settings", data)
    if status == 201:
        assert changed == (200, new["settings"])
        got = new["settings"]
    else:
        assert changed == (status, new)
        got = refusal_of_response(status, new)
    assert got == expected


OTHER_ACTIONS = [
    ("rename", {}, no("'title' must be a non-empty string")),
    ("rename", {"title": 5}, no("'title' must be a non-empty string")),
    ("rename", {"title": "  "}, no("'title' must be a non-empty string")),
    ("rename", {"title": "x" * 201}, no("'title' is longer than 200 characters", "too_large", 413)),
    ("rename", {"title": " a  b "}, {"title": "a b"}),
    ("flags", {}, no("send 'pinned' and/or 'archived' as true or false")),
    ("flags", {"pinned": "yes"}, no("send 'pinned' and/or 'archived' as true or false")),
    ("flags", {"pinned": True, "archived": 1}, no("send 'pinned' and/or 'archived' as true or false")),
    ("flags", {"archived": True, "unknown": 1}, {"pinned": False, "archived": True}),
    ("show", {}, no("'message' is required")),
    ("show", {"message": "x"}, no("'message' must be a positive integer id")),
    ("show", {"message": BIG}, no("'message' must be a positive integer id")),
    ("show", {"message": 999}, no("no such message", "not_found", 404)),
]


@pytest.mark.parametrize("name, data, expected", OTHER_ACTIONS)
def test_each_other_action_gets_its_answer(browser, alice, name, data, expected):
    conversation = Conversation.objects.create(owner=alice, title="t")
    got = action(browser, f"/c/{conversation.pk}/{name}", data)
    if got[0] == 200:
        got = {k: v for k, v in got[1].items() if k != "id"}
    else:
        got = refusal_of_response(*got)
    assert got == expected

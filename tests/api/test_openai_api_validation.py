"""What `POST /v1/chat/completions` answers each request body with: a refusal's status and OpenAI
error (message, type, param, code), or what the engine is asked for. The table pins the checks
users meet, whatever carries them out.
"""

import json
import math

import pytest
from asgiref.sync import sync_to_async

from tests.api.test_openai_api import MODEL, ask, post, use_engine
from tests.support.api_keys import bearer
from tests.support.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 2048  # CHAT_MAX_TOKENS_LIMIT


@pytest.fixture(autouse=True)
def bounds(settings):
    settings.INFERENCE_MODEL_NAME = MODEL
    settings.CHAT_MAX_TOKENS_LIMIT = LIMIT
    settings.CHAT_MAX_TOKENS = 512
    settings.CHAT_TEMPERATURE = 0.7


def user(content="Hi") -> dict:
    return {"role": "user", "content": content}


def no(param: str | None, message: str, *, code: str = "invalid_field", status: int = 400) -> tuple:
    """A refusal as OpenAI's error shape carries it: status, code, param and message."""
    return status, code, param, message


NO_MAX_TOKENS = no("max_tokens", "'max_tokens' must be an integer from 1 to 2048")
NO_TEMPERATURE = no("temperature", "'temperature' must be a number from 0 to 2")
NO_STOP = no("stop", "'stop' must be a non-empty string or an array of up to 4 of them")
NO_MIN_TOKENS = no("min_tokens", "'min_tokens' must be an integer from 0 to 2048")
NO_TOP_P = no("top_p", "'top_p' must be a number in (0, 1]")
NO_MODEL = no("model", "'model' must be the name of a model (GET /v1/models lists them)")
NO_MESSAGES = no("messages", "'messages' must be a non-empty array")
NO_CONTENT_PART = no("messages[0].content", "only text content parts are supported")
NO_SEED = no("seed", "'seed' must be an integer")
NO_STREAM_OPTIONS = no("stream_options", "'stream_options' is an object, and only for stream: true")
NO_N = no("n", "only one choice per request is supported ('n' must be 1)", code="unsupported_parameter")
NO_CONTENT_TYPE = no("messages[0].content", "'content' must be a string or a list of text parts")
NO_PRESENCE_PENALTY = no("presence_penalty", "'presence_penalty' must be a number in [-2, 2]")
NO_FREQUENCY_PENALTY = no("frequency_penalty", "'frequency_penalty' must be a number in [-2, 2]")
NO_STREAM = no("stream", "'stream' must be true or false")
NO_STORE = no("store", "'store' must be true or false")
NO_TOOLS = no("tools", "'tools' is not supported by this server", code="unsupported_parameter")

REFUSED = [
    ([1], no(None, "the request body must be a JSON object", code="invalid_json")),
    ({}, NO_MODEL),
    ({"model": "", "messages": [user()]}, NO_MODEL),
    ({"model": 5, "messages": [user()]}, NO_MODEL),
    ({"model": MODEL}, NO_MESSAGES),
    (ask(messages="Hi"), NO_MESSAGES),
    (ask(messages=[]), NO_MESSAGES),
    (ask(messages=[1]), no("messages[0]", "each message must be an object")),
    (
        ask(messages=[{"content": "Hi"}]),
        no("messages[0].role", "role must be one of system, developer, user, assistant (got None)"),
    ),
    (
        ask(messages=[{"role": "tool", "content": "x"}]),
        no("messages[0].role", "role must be one of system, developer, user, assistant (got 'tool')"),
    ),
    (
        ask(messages=[{"role": "function", "content": "x"}]),
        no("messages[0].role", "role must be one of system, developer, user, assistant (got 'function')"),
    ),
    (
        ask(messages=[user(), {"role": "assistant", "content": None}]),
        no("messages[1].content", "an assistant message without content (a tool call) is not supported"),
    ),
    (
        ask(messages=[{"role": "assistant"}, user()]),
        no("messages[0].content", "an assistant message without content (a tool call) is not supported"),
    ),
    (ask(messages=[user(None)]), NO_CONTENT_TYPE),
    (ask(messages=[user(5)]), NO_CONTENT_TYPE),
    (ask(messages=[user({"text": "Hi"})]), NO_CONTENT_TYPE),
    (ask(messages=[user([{"type": "image_url", "image_url": {"url": "x"}}])]), NO_CONTENT_PART),
    (ask(messages=[user([{"type": "text", "text": 5}])]), NO_CONTENT_PART),
    (ask(messages=[user([{"type": "text"}])]), NO_CONTENT_PART),
    (ask(messages=[user(["Hi"])]), NO_CONTENT_PART),
    (
        ask(messages=[{"role": "system", "content": "only"}]),
        no("messages", "'messages' needs at least one user or assistant message"),
    ),
    (
        ask(messages=[{"role": "developer", "content": "only"}, {"role": "system", "content": "x"}]),
        no("messages", "'messages' needs at least one user or assistant message"),
    ),
    (ask(max_tokens=0), NO_MAX_TOKENS),
    (ask(max_tokens=-1), NO_MAX_TOKENS),
    (ask(max_tokens=1.5), NO_MAX_TOKENS),
    (ask(max_tokens=10.0), NO_MAX_TOKENS),
    (ask(max_tokens="10"), NO_MAX_TOKENS),
    (ask(max_tokens=True), NO_MAX_TOKENS),
    (ask(max_tokens=LIMIT + 1), NO_MAX_TOKENS),
    (
        ask(max_completion_tokens=0),
        no("max_completion_tokens", "'max_completion_tokens' must be an integer from 1 to 2048"),
    ),
    (
        ask(max_completion_tokens=10**6, max_tokens=10),
        no("max_completion_tokens", "'max_completion_tokens' must be an integer from 1 to 2048"),
    ),
    (ask(max_completion_tokens=None, max_tokens=0), NO_MAX_TOKENS),
    (ask(min_tokens=-1), NO_MIN_TOKENS),
    (ask(min_tokens="1"), NO_MIN_TOKENS),
    (ask(min_tokens=LIMIT + 1), NO_MIN_TOKENS),
    (ask(min_tokens=False), NO_MIN_TOKENS),
    (ask(temperature=-0.1), NO_TEMPERATURE),
    (ask(temperature=2.1), NO_TEMPERATURE),
    (ask(temperature="1"), NO_TEMPERATURE),
    (ask(temperature=True), NO_TEMPERATURE),
    (ask(temperature=math.nan), NO_TEMPERATURE),
    (ask(temperature=math.inf), NO_TEMPERATURE),
    (ask(top_p=0), NO_TOP_P),
    (ask(top_p=1.1), NO_TOP_P),
    (ask(top_p="x"), NO_TOP_P),
    (ask(top_p=False), NO_TOP_P),
    (ask(presence_penalty=2.5), NO_PRESENCE_PENALTY),
    (ask(presence_penalty=-3), NO_PRESENCE_PENALTY),
    (ask(frequency_penalty="a"), NO_FREQUENCY_PENALTY),
    (ask(frequency_penalty=-2.01), NO_FREQUENCY_PENALTY),
    (ask(seed=1.5), NO_SEED),
    (ask(seed="1"), NO_SEED),
    (ask(seed=True), NO_SEED),
    (ask(stop=""), NO_STOP),
    (ask(stop=[""]), NO_STOP),
    (ask(stop=[1]), NO_STOP),
    (ask(stop=["a", "b", "c", "d", "e"]), NO_STOP),
    (ask(stop=5), NO_STOP),
    (ask(stop={}), NO_STOP),
    (ask(stream="yes"), NO_STREAM),
    (ask(stream=1), NO_STREAM),
    (ask(stream_options={"include_usage": True}), NO_STREAM_OPTIONS),
    (ask(stream=False, stream_options={}), NO_STREAM_OPTIONS),
    (ask(stream=True, stream_options="x"), NO_STREAM_OPTIONS),
    (ask(store="yes"), NO_STORE),
    (ask(store=0), NO_STORE),
    (ask(temprature=0.1), no("temprature", "Unrecognized request argument supplied: temprature")),
    (ask(b_unknown=1, a_unknown=2), no("a_unknown", "Unrecognized request argument supplied: a_unknown")),
    (ask(tools=[{"type": "function", "function": {"name": "f"}}]), NO_TOOLS),
    (
        ask(tool_choice="required"),
        no("tool_choice", "'tool_choice' is not supported by this server", code="unsupported_parameter"),
    ),
    (ask(tool_choice="auto", tools=[{"type": "function", "function": {"name": "f"}}]), NO_TOOLS),
    (
        ask(functions=[{"name": "f"}]),
        no("functions", "'functions' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(function_call="auto"),
        no("function_call", "'function_call' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(response_format={"type": "json_object"}),
        no(
            "response_format",
            "'response_format' is not supported by this server",
            code="unsupported_parameter",
        ),
    ),
    (
        ask(logprobs=True),
        no("logprobs", "'logprobs' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(top_logprobs=2),
        no("top_logprobs", "'top_logprobs' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(logit_bias={"1": 1}),
        no("logit_bias", "'logit_bias' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(audio={"voice": "x"}),
        no("audio", "'audio' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(modalities=["text", "audio"]),
        no("modalities", "'modalities' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(prediction={"type": "content", "content": "x"}),
        no("prediction", "'prediction' is not supported by this server", code="unsupported_parameter"),
    ),
    (
        ask(reasoning_effort="low"),
        no(
            "reasoning_effort",
            "'reasoning_effort' is not supported by this server",
            code="unsupported_parameter",
        ),
    ),
    (
        ask(web_search_options={}),
        no(
            "web_search_options",
            "'web_search_options' is not supported by this server",
            code="unsupported_parameter",
        ),
    ),
    (ask(n=2), NO_N),
    (ask(n=0), NO_N),
    (ask(n="1"), NO_N),
    (
        {"temprature": 1, "tools": [{}], "model": 5},
        no("temprature", "Unrecognized request argument supplied: temprature"),
    ),
    ({"tools": [{}], "n": 2, "model": 5}, NO_TOOLS),
    ({"n": 2, "model": 5}, NO_N),
    ({"model": 5, "messages": []}, NO_MODEL),
    ({"model": MODEL, "stream": 1, "messages": []}, NO_STREAM),
    ({"model": MODEL, "stream_options": {}, "messages": []}, NO_STREAM_OPTIONS),
    (ask(messages=[], max_tokens=0), NO_MESSAGES),
    (ask(max_tokens=0, temperature=9), NO_MAX_TOKENS),
    (ask(temperature=9, store=1), NO_TEMPERATURE),
    (ask(store=1, min_tokens=-1), NO_STORE),
    (ask(min_tokens=-1, top_p=0), NO_MIN_TOKENS),
    (ask(top_p=0, presence_penalty=9), NO_TOP_P),
    (ask(presence_penalty=9, frequency_penalty=9), NO_PRESENCE_PENALTY),
    (ask(frequency_penalty=9, seed="x"), NO_FREQUENCY_PENALTY),
    (ask(seed="x", stop=5), NO_SEED),
    (
        ask(model="gpt-4o"),
        no(
            "model", "The model 'gpt-4o' does not exist (GET /v1/models).", code="model_not_found", status=404
        ),
    ),
]


@pytest.mark.parametrize("body, expected", REFUSED)
async def test_it_refuses_each_bad_body_with_its_status_and_error(alice, monkeypatch, body, expected):
    engine = use_engine(monkeypatch, FakeEngine(["no"]))
    response = await post(body, await sync_to_async(bearer)(alice, "openai"))
    error = json.loads(response.content)["error"]
    assert (response.status_code, error["code"], error["param"], error["message"]) == expected
    assert error["type"] == "invalid_request_error"
    assert engine.requests == []


ACCEPTED = [
    (ask(), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (
        ask(messages=[{"role": "developer", "content": "Be brief."}, user()]),
        (
            "SmolLM2-135M-Instruct",
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            512,
            0,
            0.7,
            {},
        ),
    ),
    (
        ask(
            messages=[
                {"role": "system", "content": "S"},
                user("A"),
                {"role": "assistant", "content": "B"},
                user("C"),
            ]
        ),
        (
            "SmolLM2-135M-Instruct",
            [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "A"},
                {"role": "assistant", "content": "B"},
                {"role": "user", "content": "C"},
            ],
            512,
            0,
            0.7,
            {},
        ),
    ),
    (
        ask(messages=[user([{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}])]),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi there"}], 512, 0, 0.7, {}),
    ),
    (ask(messages=[user([])]), ("SmolLM2-135M-Instruct", [{"role": "user", "content": ""}], 512, 0, 0.7, {})),
    (
        ask(messages=[{"role": "assistant", "content": [{"type": "text", "text": "Was"}]}, user()]),
        (
            "SmolLM2-135M-Instruct",
            [{"role": "assistant", "content": "Was"}, {"role": "user", "content": "Hi"}],
            512,
            0,
            0.7,
            {},
        ),
    ),
    (
        ask(messages=[user(""), {"role": "user", "content": "x", "name": "bob"}]),
        (
            "SmolLM2-135M-Instruct",
            [{"role": "user", "content": ""}, {"role": "user", "content": "x"}],
            512,
            0,
            0.7,
            {},
        ),
    ),
    (ask(max_tokens=5), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 5, 0, 0.7, {})),
    (ask(max_tokens=LIMIT), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 2048, 0, 0.7, {})),
    (
        ask(max_completion_tokens=7, max_tokens=9),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 7, 0, 0.7, {}),
    ),
    (
        ask(max_completion_tokens=None, max_tokens=9),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 9, 0, 0.7, {}),
    ),
    (ask(max_tokens=None), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (ask(min_tokens=3), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 3, 0.7, {})),
    (ask(min_tokens=0), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (ask(min_tokens=None), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (ask(temperature=0), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.0, {})),
    (ask(temperature=2), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 2.0, {})),
    (ask(temperature=1.5), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 1.5, {})),
    (ask(temperature=None), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (
        ask(top_p=1, presence_penalty=-2, frequency_penalty=2.0),
        (
            "SmolLM2-135M-Instruct",
            [{"role": "user", "content": "Hi"}],
            512,
            0,
            0.7,
            {"top_p": 1, "presence_penalty": -2, "frequency_penalty": 2.0},
        ),
    ),
    (
        ask(top_p=0.5, presence_penalty=None),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {"top_p": 0.5}),
    ),
    (ask(seed=0), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {"seed": 0})),
    (ask(seed=-5), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {"seed": -5})),
    (ask(seed=None), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (
        ask(stop="END"),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {"stop": ["END"]}),
    ),
    (
        ask(stop=["a", "b", "c", "d"]),
        (
            "SmolLM2-135M-Instruct",
            [{"role": "user", "content": "Hi"}],
            512,
            0,
            0.7,
            {"stop": ["a", "b", "c", "d"]},
        ),
    ),
    (ask(stop=[]), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {"stop": []})),
    (ask(stop=None), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (
        ask(tools=[], tool_choice="auto", logprobs=False, response_format={"type": "text"}, n=1),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (
        ask(tool_choice="none", functions=[], function_call="none", top_logprobs=0, logit_bias={}),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (
        ask(audio=None, modalities=["text"], prediction=None, reasoning_effort=None, web_search_options=None),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (
        ask(logprobs=None, n=None),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (
        ask(user="u1", metadata={"a": "b"}, service_tier="auto", parallel_tool_calls=True),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (
        ask(stream=False, stream_options=None),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
    (ask(store=False), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (ask(store=True), ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {})),
    (
        ask(stream=None, store=None),
        ("SmolLM2-135M-Instruct", [{"role": "user", "content": "Hi"}], 512, 0, 0.7, {}),
    ),
]


@pytest.mark.parametrize("body, expected", ACCEPTED)
async def test_it_asks_the_engine_for_what_each_good_body_says(alice, monkeypatch, body, expected):
    engine = use_engine(monkeypatch, FakeEngine(["ok"]))
    response = await post(body, await sync_to_async(bearer)(alice, "openai"))
    assert response.status_code == 200, response.content
    (request,) = engine.requests
    got = (
        request.model,
        [dict(m) for m in request.messages],
        request.max_tokens,
        request.min_tokens,
        request.temperature,
        dict(request.sampling),
    )
    assert got == expected


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            ask(stream=True),
            (
                200,
                [
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                ],
            ),
        ),
        (
            ask(stream=True, stream_options={"include_usage": True}),
            (
                200,
                [
                    ["choices", "created", "id", "model", "object", "usage"],
                    ["choices", "created", "id", "model", "object", "usage"],
                    ["choices", "created", "id", "model", "object", "usage"],
                    ["choices", "created", "id", "model", "object", "usage"],
                ],
            ),
        ),
        (
            ask(stream=True, stream_options={"include_usage": False}),
            (
                200,
                [
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                ],
            ),
        ),
        (
            ask(stream=True, stream_options={}),
            (
                200,
                [
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                ],
            ),
        ),
        (
            ask(stream=True, stream_options=None),
            (
                200,
                [
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                    ["choices", "created", "id", "model", "object"],
                ],
            ),
        ),
    ],
)
async def test_it_streams_when_asked_with_usage_when_asked(alice, monkeypatch, body, expected):
    use_engine(monkeypatch, FakeEngine(["ok"]))
    response = await post(body, await sync_to_async(bearer)(alice, "openai"))
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    events = [json.loads(e.removeprefix("data: ")) for e in text.split("\n\n")[:-2]]
    got = (response.status_code, [sorted(e) for e in events])
    assert got == expected

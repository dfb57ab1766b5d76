"""The OpenAI chat completions protocol as this product speaks it (docs/openai-api.md): the
checks of a request body, and the shapes of completions, stream chunks, models and errors.

Nothing here reaches the engine or the store; openai_api.serving does, openai_api.views
carries HTTP. A request field the product cannot honour is refused by name (400), never
ignored: a client asking for tools must not get an answer that silently used none.
"""

import uuid
from dataclasses import dataclass, field

from django.conf import settings

from httpkit.errors import ERRORS, Refusal

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Fields that ask for what the product does not do: refused unless set to their "off" value.
UNSUPPORTED = {
    "tools": [],
    "functions": [],
    "tool_choice": "none",
    "function_call": "none",
    "response_format": {"type": "text"},
    "logprobs": False,
    "top_logprobs": 0,
    "logit_bias": {},
    "audio": None,
    "modalities": ["text"],
    "prediction": None,
    "reasoning_effort": None,
    "web_search_options": None,
}
# Fields accepted and not acted on: they change nothing in the answer.
IGNORED = {"user", "metadata", "service_tier", "parallel_tool_calls", "n"}
SAMPLING_RANGES = {"top_p": (0.0, 1.0), "presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0)}
KNOWN = {
    "model",
    "messages",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "temperature",
    "seed",
    "stop",
    "store",
    *SAMPLING_RANGES,
    *UNSUPPORTED,
    *IGNORED,
}


def error_body(refusal: Refusal) -> dict:
    """A refusal in OpenAI's shape: the type, and OpenAI's own code where it has one, of the
    refusal's row in the one table of codes (httpkit.errors.ERRORS); `param` names the field."""
    row = ERRORS[refusal.code]
    return {
        "error": {
            "message": refusal.detail,
            "type": row.openai_type,
            "param": refusal.extra.get("param"),
            "code": row.openai_code or refusal.code,
        }
    }


def invalid(param: str, message: str) -> Refusal:
    return Refusal("invalid_field", message, param=param)


@dataclass(frozen=True)
class ChatCompletionRequest:
    model: str
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    stream: bool = False
    include_usage: bool = False
    store: bool = False
    # vLLM's extension: no end of text before this many tokens.
    min_tokens: int = 0
    # Passed to the engine as they came: top_p, penalties, seed, stop.
    sampling: dict = field(default_factory=dict)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(data: dict, name: str) -> bool:
    value = data.get(name)
    if value is not None and not isinstance(value, bool):
        raise invalid(name, f"'{name}' must be true or false")
    return bool(value)


def _content(index: int, role: str, content: object) -> str:
    """A message's text: a string, or a list of text parts (as newer clients send)."""
    param = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise invalid(param, "only text content parts are supported")
            texts.append(part["text"])
        return "".join(texts)
    if content is None and role == "assistant":
        raise invalid(param, "an assistant message without content (a tool call) is not supported")
    raise invalid(param, "'content' must be a string or a list of text parts")


def _messages(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise invalid("messages", "'messages' must be a non-empty array")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise invalid(f"messages[{index}]", "each message must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"messages[{index}].role", f"role must be one of {', '.join(ROLES)} (got {role!r})")
        messages.append({"role": ROLES[role], "content": _content(index, role, message.get("content"))})
    if all(m["role"] == "system" for m in messages):
        raise invalid("messages", "'messages' needs at least one user or assistant message")
    return messages


def _max_tokens(data: dict) -> int:
    limit = settings.CHAT_MAX_TOKENS_LIMIT
    for name in ("max_completion_tokens", "max_tokens"):
        value = data.get(name)
        if value is None:
            continue
        if not _is_int(value) or not 1 <= value <= limit:
            raise invalid(name, f"'{name}' must be an integer from 1 to {limit}")
        return value
    return settings.CHAT_MAX_TOKENS


def _min_tokens(data: dict) -> int:
    value = data.get("min_tokens")
    limit = settings.CHAT_MAX_TOKENS_LIMIT
    if value is not None and (not _is_int(value) or not 0 <= value <= limit):
        raise invalid("min_tokens", f"'min_tokens' must be an integer from 0 to {limit}")
    return value or 0


def _temperature(data: dict) -> float:
    value = data.get("temperature")
    if value is None:
        return settings.CHAT_TEMPERATURE
    if not _is_number(value) or not 0 <= value <= 2:
        raise invalid("temperature", "'temperature' must be a number from 0 to 2")
    return float(value)


def _sampling(data: dict) -> dict:
    sampling = {}
    for name, (low, high) in SAMPLING_RANGES.items():
        value = data.get(name)
        if value is None:
            continue
        if not _is_number(value) or not low <= value <= high or (name == "top_p" and value == 0):
            raise invalid(
                name, f"'{name}' must be a number in {'(' if name == 'top_p' else '['}{low:g}, {high:g}]"
            )
        sampling[name] = value
    if data.get("seed") is not None:
        if not _is_int(data["seed"]):
            raise invalid("seed", "'seed' must be an integer")
        sampling["seed"] = data["seed"]
    stop = data.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise invalid("stop", "'stop' must be a non-empty string or an array of up to 4 of them")
        sampling["stop"] = stops
    return sampling


def _refuse_unsupported(data: dict) -> None:
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise invalid(unknown[0], f"Unrecognized request argument supplied: {unknown[0]}")
    for name, off in UNSUPPORTED.items():
        value = data.get(name)
        if (
            value is None
            or value == off
            or (name == "tool_choice" and value == "auto" and not data.get("tools"))
        ):
            continue
        raise Refusal("unsupported_field", f"'{name}' is not supported by this server", param=name)
    n = data.get("n")
    if n is not None and n != 1:
        raise Refusal(
            "unsupported_field", "only one choice per request is supported ('n' must be 1)", param="n"
        )


def chat_completion_request(data: dict) -> ChatCompletionRequest:
    """Check a `POST /v1/chat/completions` body; the Refusal names the first bad field (`param`)."""
    _refuse_unsupported(data)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "'model' must be the name of a model (GET /v1/models lists them)")
    stream = _flag(data, "stream")
    options = data.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict)):
        raise invalid("stream_options", "'stream_options' is an object, and only for stream: true")
    include_usage = bool(options and options.get("include_usage"))
    return ChatCompletionRequest(
        model=model,
        messages=_messages(data.get("messages")),
        max_tokens=_max_tokens(data),
        temperature=_temperature(data),
        stream=stream,
        include_usage=include_usage,
        store=_flag(data, "store"),
        min_tokens=_min_tokens(data),
        sampling=_sampling(data),
    )


# Building responses.


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int | None, cached_tokens: int | None, completion_tokens: int | None) -> dict:
    prompt, answer = prompt_tokens or 0, completion_tokens or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": answer,
        "total_tokens": prompt + answer,
        "prompt_tokens_details": {"cached_tokens": cached_tokens or 0},
    }


def completion(*, id: str, created: int, model: str, text: str, finish_reason: str, usage: dict) -> dict:
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage,
    }


def chunk(
    *, id: str, created: int, model: str, delta: dict | None, finish_reason: str | None = None, **extra
) -> dict:
    """One stream chunk; `delta` None makes the usage chunk, which has no choices."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
    )
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }


def model_entry(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "chatsite"}

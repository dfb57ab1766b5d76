"""The OpenAI chat completions protocol as this product speaks it (docs/openai-api.md): the
request body's model, and the shapes of completions, stream chunks, models and errors.

Nothing here reaches the engine or the store; openai_api.serving does, openai_api.views
carries HTTP. A request field the product cannot honour is refused by name (400), never
ignored: a client asking for tools must not get an answer that silently used none.
"""

import base64
import uuid
from array import array
from typing import Annotated, Any

from django.conf import settings
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from httpkit.errors import ERRORS, Refusal
from httpkit.validation import Id, Input, MaxTokens, MinTokens, Temperature, checked, null_is, refuse
from knowledge.quotes import MAX_COLLECTIONS

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
IGNORED = {"user", "service_tier", "parallel_tool_calls", "n"}
# OpenAI's bounds on `metadata`: pairs, and characters of a key and of a value.
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


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


class ChatMessage(Input):
    """One message: its role (`developer` is read as `system`) and its text, a string or a list of
    text parts (as newer clients send)."""

    role: Any = Field(None, validate_default=True)
    content: Any = Field(None, validate_default=True)

    @field_validator("role")
    @classmethod
    def _role(cls, role: object) -> str:
        if role not in ROLES:
            raise refuse("invalid_field", f"role must be one of {', '.join(ROLES)} (got {role!r})")
        return ROLES[role]

    @field_validator("content")
    @classmethod
    def _content(cls, content: object, info: ValidationInfo) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            if not all(
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                for part in content
            ):
                raise refuse("invalid_field", "only text content parts are supported")
            return "".join(part["text"] for part in content)
        if content is None and info.data.get("role") == "assistant":
            raise refuse(
                "invalid_field", "an assistant message without content (a tool call) is not supported"
            )
        raise refuse("invalid_field", "'content' must be a string or a list of text parts")


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(text, str) for key, text in value.items()
    ):
        raise refuse("invalid_field", "'metadata' must be an object whose values are strings")
    if len(value) > METADATA_PAIRS:
        raise refuse("invalid_field", f"'metadata' holds at most {METADATA_PAIRS} pairs")
    if any(len(key) > METADATA_KEY_CHARS for key in value):
        raise refuse("invalid_field", f"a 'metadata' key is at most {METADATA_KEY_CHARS} characters")
    if any(len(text) > METADATA_VALUE_CHARS for text in value.values()):
        raise refuse("invalid_field", f"a 'metadata' value is at most {METADATA_VALUE_CHARS} characters")
    return value


# Up to 16 pairs of strings, kept with a stored completion or a batch.
Metadata = Annotated[Any, AfterValidator(_metadata)]


class MetadataUpdate(Input):
    """A `POST /v1/chat/completions/{id}` body: the metadata that replaces the stored one."""

    names_param = True
    metadata: Annotated[Metadata, null_is(dict)]


Flag = Annotated[StrictBool, null_is(False), Field(description="'{param}' must be true or false")]
TokenLimit = Annotated[
    MaxTokens, Field(description="'{param}' must be an integer from 1 to {CHAT_MAX_TOKENS_LIMIT}")
]
# A string is read as a list of one.
Stops = Annotated[
    list[Annotated[StrictStr, Field(min_length=1)]],
    Field(max_length=4),
    BeforeValidator(lambda stop: [stop] if isinstance(stop, str) else stop),
]
Penalty = Annotated[StrictFloat, Field(ge=-2, le=2, description="'{param}' must be a number in [-2, 2]")]


class ChatCompletionRequest(Input):
    """A `POST /v1/chat/completions` body. Once checked, `messages` are the engine's
    `{role, content}` dicts, `max_tokens` the answer's length, and null values their defaults."""

    names_param = True
    model: Annotated[StrictStr, Field(min_length=1)] = Field(
        None,
        validate_default=True,
        description="'model' must be the name of a model (GET /v1/models lists them)",
    )
    stream: Flag = False
    stream_options: dict[str, Any] | None = Field(
        None, description="'stream_options' is an object, and only for stream: true"
    )
    messages: Annotated[
        list[Annotated[ChatMessage, Field(description="each message must be an object")]],
        Field(min_length=1),
    ] = Field(None, validate_default=True, description="'messages' must be a non-empty array")
    max_completion_tokens: TokenLimit | None = None
    max_tokens: TokenLimit | None = None
    temperature: Annotated[Temperature, null_is(lambda: settings.CHAT_TEMPERATURE)] = Field(
        default_factory=lambda: settings.CHAT_TEMPERATURE,
        description="'temperature' must be a number from 0 to 2",
    )
    store: Flag = False
    # Kept with the exchange when it is stored.
    metadata: Annotated[Metadata, null_is(dict)] = Field(default_factory=dict)
    # vLLM's extension: no end of text before this many tokens.
    min_tokens: Annotated[MinTokens, null_is(0)] = Field(
        0, description="'min_tokens' must be an integer from 0 to {CHAT_MAX_TOKENS_LIMIT}"
    )
    # Passed to the engine as they came (`sampling`).
    top_p: Annotated[StrictFloat, Field(gt=0, le=1)] | None = Field(
        None, description="'top_p' must be a number in (0, 1]"
    )
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    seed: StrictInt | None = Field(None, description="'seed' must be an integer")
    stop: Stops | None = Field(
        None, description="'stop' must be a non-empty string or an array of up to 4 of them"
    )
    # The product's extension: the knowledge collections the last user message retrieves from.
    collections: Annotated[list[Id], Field(min_length=1, max_length=MAX_COLLECTIONS)] | None = Field(
        None, description=f"'collections' must list 1 to {MAX_COLLECTIONS} collection ids"
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        unknown = sorted(set(data) - set(cls.model_fields) - set(UNSUPPORTED) - IGNORED)
        if unknown:
            raise refuse(
                "invalid_field", f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0]
            )
        for name, off in UNSUPPORTED.items():
            value = data.get(name)
            if (
                value is None
                or value == off
                or (name == "tool_choice" and value == "auto" and not data.get("tools"))
            ):
                continue
            raise refuse("unsupported_field", f"'{name}' is not supported by this server", param=name)
        if data.get("n") is not None and data["n"] != 1:
            raise refuse(
                "unsupported_field", "only one choice per request is supported ('n' must be 1)", param="n"
            )
        return data

    @field_validator("stream_options")
    @classmethod
    def _only_for_streams(cls, options: dict | None, info: ValidationInfo) -> dict | None:
        if options is not None and not info.data.get("stream"):
            raise ValueError("only for stream: true")
        return options

    @field_validator("messages")
    @classmethod
    def _as_conversation(cls, messages: list[ChatMessage]) -> list[dict[str, str]]:
        if all(message.role == "system" for message in messages):
            raise refuse("invalid_field", "'messages' needs at least one user or assistant message")
        return [message.model_dump() for message in messages]

    @model_validator(mode="after")
    def _answer_length(self) -> "ChatCompletionRequest":
        self.max_tokens = self.max_completion_tokens or self.max_tokens or settings.CHAT_MAX_TOKENS
        return self

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    @property
    def sampling(self) -> dict:
        """What the engine gets as it came: top_p, the penalties, seed, stop."""
        names = ("top_p", "presence_penalty", "frequency_penalty", "seed", "stop")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


def chat_completion_request(data: dict) -> ChatCompletionRequest:
    """Check a `POST /v1/chat/completions` body; the Refusal names the first bad field (`param`)."""
    return checked(ChatCompletionRequest, data)


# Texts one `POST /v1/embeddings` may carry (OpenAI's bound).
EMBEDDING_MAX_INPUTS = 2048


class EmbeddingRequest(Input):
    """A `POST /v1/embeddings` body: `input` a text or a list of texts (token arrays are refused);
    `dimensions`, where given, must be the model's own (the product does not shorten vectors)."""

    names_param = True
    model: Annotated[StrictStr, Field(min_length=1)] = Field(
        None, validate_default=True, description="'model' must be the name of the embedding model"
    )
    input: Any = Field(None, validate_default=True)
    encoding_format: Annotated[
        str, Field(pattern="^(float|base64)$", description="'encoding_format' must be float or base64")
    ] = "float"
    dimensions: Annotated[StrictInt, Field(description="'dimensions' must be an integer")] | None = None

    @field_validator("input")
    @classmethod
    def _input(cls, value: object) -> list[str]:
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise refuse("invalid_field", "'input' must be a string or a non-empty list of strings")
        if len(texts) > EMBEDDING_MAX_INPUTS:
            raise refuse("invalid_field", f"'input' may hold at most {EMBEDDING_MAX_INPUTS} texts")
        if any(not t.strip() for t in texts):
            raise refuse("invalid_field", "'input' must not hold an empty text")
        return texts

    @field_validator("dimensions")
    @classmethod
    def _dimensions(cls, value: int | None) -> int | None:
        if value is not None and value != settings.EMBEDDING_DIMENSIONS:
            raise refuse(
                "invalid_field", f"'dimensions' must be {settings.EMBEDDING_DIMENSIONS}, the model's own"
            )
        return value


def embedding_request(data: dict) -> EmbeddingRequest:
    """Check a `POST /v1/embeddings` body; the Refusal names the first bad field (`param`)."""
    return checked(EmbeddingRequest, data)


def embeddings(*, vectors: list[list[float]], model: str, prompt_tokens: int, encoding_format: str) -> dict:
    def encoded(vector: list[float]) -> list[float] | str:
        if encoding_format == "base64":
            return base64.b64encode(array("f", vector).tobytes()).decode()
        return vector

    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


class CursorQuery(Input):
    """A list's query: `after` an id of the previous page's last item, `limit` items (1 to 100),
    `order` by creation; `model` and `metadata[KEY]=VALUE` filter the stored completions."""

    names_param = True
    after: StrictStr | None = None
    limit: Annotated[int, Field(ge=1, le=100, description="'limit' must be an integer from 1 to 100")] = 20
    order: Annotated[str, Field(pattern="^(asc|desc)$", description="'order' must be asc or desc")] = "asc"
    model: StrictStr | None = None
    metadata: Metadata = Field(default_factory=dict)


def cursor_query(query: dict[str, str]) -> CursorQuery:
    """Check a list's query string (its values as sent; `metadata[KEY]` collected as one object)."""
    data: dict[str, Any] = {"metadata": {}}
    for name, value in query.items():
        if name.startswith("metadata[") and name.endswith("]"):
            data["metadata"][name[len("metadata[") : -1]] = value
        else:
            data[name] = value
    return checked(CursorQuery, data)


# Building responses.


def page(data: list[dict], *, has_more: bool) -> dict:
    """A list in OpenAI's cursor shape: the next page starts `after` its `last_id`."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


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


def completion(
    *, id: str, created: int, model: str, text: str, finish_reason: str, usage: dict, **extra
) -> dict:
    """A whole completion; `extra` the product's own fields (`sources`)."""
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
        **extra,
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

"""What clients send, checked by pydantic models: the OpenAI API's requests (openai_api.protocol),
the chat's frames and bodies (chat.protocol) and a conversation's settings (conversations.services)
are models built of the fields below, and what a model refuses is a Refusal of the one table of
codes (httpkit.errors), with the sentence users read.

A field's `description` is that sentence: `{param}` stands for the field's path
(`messages[0].content`), an upper-case name for that setting's value (`{CHAT_MAX_TOKENS_LIMIT}`).
A validator that needs another code or sentence raises `refuse(...)`; a required field that is
absent reads "'NAME' is required". Of several bad fields, the first one declared is named.
"""

import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, TypeVar

from django.conf import settings
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from httpkit.errors import Refusal

# The largest id and position the database holds (a signed 64-bit integer) and frames can carry back.
MAX_ID = 2**63 - 1
TEMPERATURE_BOUNDS = (0.0, 2.0)


class Input(BaseModel):
    """A checked input: fields it does not name are left alone."""

    model_config = ConfigDict(extra="ignore")
    # Whether a refusal names the field (`param`, as OpenAI's errors do).
    names_param: ClassVar[bool] = False


def refuse(code: str, sentence: str, *, param: str | None = None) -> PydanticCustomError:
    """A validator's refusal: its code, its sentence, and the field it names where the error's
    place is not that field (a check of the whole body)."""
    return PydanticCustomError("refusal", "{sentence}", {"code": code, "sentence": sentence, "param": param})


M = TypeVar("M", bound=Input)


def checked(model: type[M], data: object, **context) -> M:
    """`data` as `model`, or the Refusal of its first bad field; `context` reaches the validators."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise refusal(model, exc.errors(include_url=False)[0]) from None


def refusal(model: type[Input], error: dict) -> Refusal:
    """One pydantic error as the Refusal users are told of: it names the field whose sentence it
    gives (`stop`, not `stop[0]`)."""
    context, loc = error.get("ctx") or {}, error["loc"]
    if error["type"] == "refusal":
        code, sentence, param = context["code"], context["sentence"], context["param"] or _path(loc)
    elif error["type"] == "missing":
        code, sentence, param = "invalid_field", "'{param}' is required", _path(loc)
    else:
        sentence, depth = _description(model, loc)
        code, param = "invalid_field", _path(loc[:depth])
    return Refusal(code, _words(sentence, param), **({"param": param} if model.names_param else {}))


def _path(loc: tuple) -> str | None:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path or None


def _words(sentence: str, param: str | None) -> str:
    def word(match: re.Match) -> str:
        name = match.group(1)
        if name == "param":
            return param or ""
        return str(getattr(settings, name)) if name.isupper() and hasattr(settings, name) else match.group(0)

    return re.sub(r"\{(\w+)\}", word, sentence)


def _description(annotation: Any, loc: tuple) -> tuple[str, int]:
    """The sentence of the innermost field on the error's path that has one, and how deep it is."""
    found, depth = "'{param}' is not valid", len(loc)
    for index, part in enumerate((None, *loc)):
        if part is not None:
            annotation = _step(annotation, part)
            if annotation is None:
                break
        annotation, described = _unwrap(annotation)
        if described:
            found, depth = described, index
    return found, depth


def _step(annotation: Any, part: str | int) -> Any:
    if isinstance(part, int):
        args = typing.get_args(annotation)
        return args[0] if typing.get_origin(annotation) is list and args else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if part in (name, field.alias):
                return Annotated[field.annotation, field] if field.description else field.annotation
    return None


def _unwrap(annotation: Any) -> tuple[Any, str | None]:
    """The type under Annotated and Optional, and the description found on the way."""
    described = None
    while True:
        if typing.get_origin(annotation) is Annotated:
            for meta in annotation.__metadata__:
                if isinstance(meta, FieldInfo) and meta.description:
                    described = meta.description
            annotation = annotation.__origin__
        elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
            args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(args) != 1:
                return annotation, described
            annotation = args[0]
        else:
            return annotation, described


def at_most(setting: str, *, size: Callable[[Any], int] = lambda value: value) -> AfterValidator:
    """A bound read from the settings when the value is checked (tests and deployments change it);
    `size=len` bounds a text's length."""

    def check(value: Any) -> Any:
        if size(value) > getattr(settings, setting):
            raise ValueError(setting)
        return value

    return AfterValidator(check)


def null_is(default: Any) -> BeforeValidator:
    """A JSON null read as the field's default (`default` called when it is a function)."""
    return BeforeValidator(
        lambda value: (default() if callable(default) else default) if value is None else value
    )


def text(most: str | int) -> Any:
    """A text that is not blank, of at most `most` characters (a number, or a setting's name);
    longer is `too_large`."""

    def check(value: str) -> str:
        if not value.strip():
            raise ValueError("blank")
        limit = most if isinstance(most, int) else getattr(settings, most)
        if len(value) > limit:
            raise refuse("too_large", f"'{{param}}' is longer than {limit} characters")
        return value

    return Annotated[
        StrictStr, AfterValidator(check), Field(description="'{param}' must be a non-empty string")
    ]


# The fields every surface is built of.
Id = Annotated[StrictInt, Field(ge=1, le=MAX_ID, description="'{param}' must be a positive integer id")]
Seq = Annotated[
    StrictInt, Field(ge=-1, le=MAX_ID, description="'{param}' must be a token seq (or -1 for all)")
]
# A message's text.
Text = text("CHAT_MAX_CONTENT_CHARS")
Temperature = Annotated[StrictFloat, Field(ge=TEMPERATURE_BOUNDS[0], le=TEMPERATURE_BOUNDS[1])]
# An answer's length in tokens: from 1 (MaxTokens) or 0 (MinTokens) to CHAT_MAX_TOKENS_LIMIT.
MaxTokens = Annotated[StrictInt, Field(ge=1), at_most("CHAT_MAX_TOKENS_LIMIT")]
MinTokens = Annotated[StrictInt, Field(ge=0), at_most("CHAT_MAX_TOKENS_LIMIT")]

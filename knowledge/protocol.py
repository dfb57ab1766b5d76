"""The collections API's request bodies (docs/knowledge.md, "Using it"), checked by pydantic models:
a field of the wrong type, out of bounds or unknown is refused by name with `invalid_field`."""

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from httpkit.errors import Refusal
from knowledge.services import DESCRIPTION_MAX, NAME_MAX

QUERY_MAX_CHARS = 2000
# Collections one search may name, and groups one collection may be shared with in one request.
SEARCH_MAX_COLLECTIONS = 100
GROUPS_MAX = 100

Visibility = Literal["private", "groups", "site"]
Body = TypeVar("Body", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CollectionCreate(_Body):
    name: str = Field(max_length=NAME_MAX)
    description: str = Field("", max_length=DESCRIPTION_MAX)
    visibility: Visibility = "private"
    # Group names, read when visibility is "groups".
    groups: list[str] = Field(default_factory=list, max_length=GROUPS_MAX)


class CollectionChange(_Body):
    name: str | None = Field(None, max_length=NAME_MAX)
    description: str | None = Field(None, max_length=DESCRIPTION_MAX)
    visibility: Visibility | None = None
    groups: list[str] | None = Field(None, max_length=GROUPS_MAX)


class Search(_Body):
    query: str = Field(max_length=QUERY_MAX_CHARS)
    collections: list[int] = Field(min_length=1, max_length=SEARCH_MAX_COLLECTIONS)
    top_k: int | None = Field(None, ge=1, le=50)
    mode: Literal["hybrid", "vector", "text"] = "hybrid"


def parsed(model: type[Body], data: dict) -> Body:
    """`data` as `model`; Refusal `invalid_field` naming the first field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        raise Refusal("invalid_field", f"'{where}': {error['msg']}", param=where) from None

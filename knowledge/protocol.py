"""The collections' request bodies (docs/knowledge.md, "Using it"), built of httpkit.validation's
fields: a bad field is refused with `invalid_field` (or `too_large`) and its sentence; a field these
bodies do not name is refused too, so a misspelt option is never silently ignored."""

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictStr

from httpkit.validation import MAX_ID, Id, Input, text
from knowledge.quotes import MAX_COLLECTIONS as CONVERSATION_MAX_COLLECTIONS
from knowledge.services import DESCRIPTION_MAX, NAME_MAX

QUERY_MAX_CHARS = 2000
# Collections one search or one conversation may name, and groups one collection may be shared with.
SEARCH_MAX_COLLECTIONS = 100
GROUPS_MAX = 100
# Documents one page of a collection's list holds: by default, and at most.
DOCUMENTS_PAGE = 100
DOCUMENTS_PAGE_MAX = 500

Visibility = Annotated[
    Literal["private", "groups", "site"], Field(description="'{param}' must be private, groups or site")
]
Description = Annotated[
    StrictStr,
    Field(
        max_length=DESCRIPTION_MAX, description=f"'{{param}}' is text of at most {DESCRIPTION_MAX} characters"
    ),
]
Groups = Annotated[
    list[StrictStr],
    Field(max_length=GROUPS_MAX, description=f"'{{param}}' is a list of at most {GROUPS_MAX} group names"),
]


class _Body(Input):
    model_config = ConfigDict(extra="forbid")


class CollectionCreate(_Body):
    name: text(NAME_MAX)
    description: Description = ""
    visibility: Visibility = "private"
    # Group names, read when visibility is "groups".
    groups: Groups = []


class CollectionChange(_Body):
    name: text(NAME_MAX) | None = None
    description: Description | None = None
    visibility: Visibility | None = None
    groups: Groups | None = None


class Search(_Body):
    query: text(QUERY_MAX_CHARS)
    collections: Annotated[
        list[Id],
        Field(min_length=1, max_length=SEARCH_MAX_COLLECTIONS,
              description=f"'{{param}}' must list 1 to {SEARCH_MAX_COLLECTIONS} collection ids"),
    ]  # fmt: skip
    top_k: (
        Annotated[int, Field(ge=1, le=50, description="'{param}' must be an integer from 1 to 50")] | None
    ) = None
    mode: Annotated[
        Literal["hybrid", "vector", "text"], Field(description="'{param}' must be hybrid, vector or text")
    ] = "hybrid"


class ConversationCollections(_Body):
    collections: Annotated[
        list[Id],
        Field(max_length=CONVERSATION_MAX_COLLECTIONS,
              description=f"'{{param}}' must list at most {CONVERSATION_MAX_COLLECTIONS} collection ids"),
    ]  # fmt: skip


class DocumentPage(_Body):
    """`GET .../documents/?after=ID&limit=N`: the documents after id `after`, oldest first."""

    after: Annotated[int, Field(ge=0, le=MAX_ID, description="'{param}' must be a document id (or 0)")] = 0
    limit: Annotated[
        int,
        Field(ge=1, le=DOCUMENTS_PAGE_MAX,
              description=f"'{{param}}' must be an integer from 1 to {DOCUMENTS_PAGE_MAX}"),
    ] = DOCUMENTS_PAGE  # fmt: skip

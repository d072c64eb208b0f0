"""`/api/memories`: what Bruce remembers about each person, for the dashboard's Memory page.

The owner of the dashboard sees every person's memories (it is their Bruce), edits or deletes
any of them, and links owners that are one person on several channels ("telegram:42" and
"discord:7"): linked owners share their memories, and nobody else sees them. An edit is held to
the rules the chat tools keep: one short text, a few tags, no secrets.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from bruce_bot.storage.memories import MAX_MEMORY_CHARS, MAX_TAGS, Memory, Owner
from bruce_bot.tools.memory import secret_kind
from bruce_bot.web.api.endpoint import FROM_RECORD, Call, Endpoint, NoParams
from bruce_bot.web.api.params import BLANK_IS_NONE, Id, limit
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError, Time

OWNER_PATTERN = r"^[a-z0-9_-]{1,32}:\S{1,127}$"
OwnerKey = Annotated[
    str,
    Field(
        pattern=OWNER_PATTERN,
        description='a person on a channel, "<channel>:<user id>", e.g. "telegram:123456"',
    ),
]


class MemoryAnswer(BaseModel):
    model_config = FROM_RECORD

    id: int
    owner: str = Field(description="whose it is: the person who said it, on their channel")
    content: str
    tags: list[str]
    source_session_id: int | None = Field(description="the conversation it was saved in")
    created_at: Time
    updated_at: Time


class OwnerAnswer(BaseModel):
    model_config = FROM_RECORD

    owner: str
    name: str | None = Field(description="the name they last wrote under, if known")
    memories: int
    last_updated_at: Time | None


class PersonAnswer(BaseModel):
    person: str = Field(description="the key of the person: one of their owners")
    owners: list[OwnerAnswer] = Field(description="the owners linked as this person")
    memories: int


class PeopleList(BaseModel):
    people: list[PersonAnswer]


class MemoryList(BaseModel):
    owner: str | None = Field(description="whose memories these are; null: everyone's")
    person: list[str] = Field(description="every owner whose memories these are (linked)")
    total: int
    memories: list[MemoryAnswer]


class OneMemory(BaseModel):
    memory: MemoryAnswer


class LinkAnswer(BaseModel):
    person: str
    owners: list[str]


class MemoriesQuery(BaseModel):
    owner: Annotated[OwnerKey | None, BLANK_IS_NONE] = Field(
        None, description="whose memories (and those of the owners linked to them); none: all"
    )
    query: str | None = Field(
        None, max_length=500, description="only memories with these words (needs 'owner')"
    )
    limit: int = limit(200, "memories")


class MemoryId(BaseModel):
    memory_id: Id = Field(description="an 'id' from GET /api/memories")


class OwnerParam(BaseModel):
    owner: OwnerKey


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("blank")
    return value


def _tags(tags: list[str]) -> list[str]:
    if len(tags) > MAX_TAGS:
        raise ValueError("too many")
    return tags


class MemoryEdit(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"content": "Is vegetarian", "tags": ["diet"]}]}
    )

    content: Annotated[
        StrictStr | None,
        Field(min_length=1, max_length=MAX_MEMORY_CHARS),
        AfterValidator(lambda v: v if v is None else _not_blank(v)),
    ] = None
    tags: Annotated[
        list[Annotated[StrictStr, Field(min_length=1, max_length=40)]] | None,
        AfterValidator(lambda v: v if v is None else _tags(v)),
        Field(description=f"at most {MAX_TAGS} words"),
    ] = None


class LinkRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"owner": "telegram:123456", "other": "discord:987"}]}
    )

    owner: OwnerKey
    other: OwnerKey


def _answer(memory: Memory) -> MemoryAnswer:
    return MemoryAnswer.model_validate(memory)


async def list_people(call: Call[NoParams, None]) -> PeopleList:
    owners = await call.context.stores.memories.owners()
    people: dict[str, list[Owner]] = {}
    for owner in owners:
        people.setdefault(owner.person, []).append(owner)
    answers = [
        PersonAnswer(
            person=person,
            owners=[OwnerAnswer.model_validate(owner) for owner in members],
            memories=sum(owner.memories for owner in members),
        )
        for person, members in people.items()
    ]
    answers.sort(key=_latest, reverse=True)
    return PeopleList(people=answers)


def _latest(person: PersonAnswer) -> float:
    times = [owner.last_updated_at.timestamp() for owner in person.owners if owner.last_updated_at]
    return max(times, default=0.0)


async def list_memories(call: Call[MemoriesQuery, None]) -> MemoryList:
    store, params = call.context.stores.memories, call.params
    if params.owner is None:
        if params.query:
            raise ApiError("'query' searches one person's memories: give 'owner' too")
        everyone = await store.everyone(params.limit)
        return MemoryList(
            owner=None,
            person=[],
            total=await store.count_all(),
            memories=[_answer(memory) for memory in everyone],
        )
    if params.query and params.query.strip():
        found = await store.search(params.owner, params.query, params.limit)
    else:
        found = await store.recent(params.owner, params.limit)
    return MemoryList(
        owner=params.owner,
        person=await store.owners_of(params.owner),
        total=await store.count(params.owner),
        memories=[_answer(memory) for memory in found],
    )


async def _existing(context: WebContext, memory_id: int) -> Memory:
    memory = await context.stores.memories.get(memory_id)
    if memory is None:
        raise ApiError(f"there is no memory {memory_id}; GET /api/memories lists them", 404)
    return memory


async def edit_memory(call: Call[MemoryId, MemoryEdit]) -> OneMemory:
    edit = call.body
    if edit.content is None and edit.tags is None:
        raise ApiError("nothing to change: send 'content', 'tags' or both")
    await _existing(call.context, call.params.memory_id)
    if edit.content is not None and (kind := secret_kind(edit.content)):
        raise ApiError(
            f"'content' looks like {kind}; memories never keep secrets (they are shown to the "
            "model in later conversations). Keep it in a password manager instead"
        )
    updated = await call.context.stores.memories.update(
        call.params.memory_id, edit.content, edit.tags
    )
    if updated is None:
        raise ApiError(f"memory {call.params.memory_id} was deleted meanwhile", 404)
    return OneMemory(memory=_answer(updated))


async def delete_memory(call: Call[MemoryId, None]) -> OneMemory:
    deleted = await call.context.stores.memories.delete(call.params.memory_id)
    if deleted is None:
        raise ApiError(
            f"there is no memory {call.params.memory_id}; GET /api/memories lists them", 404
        )
    return OneMemory(memory=_answer(deleted))


async def link_owners(call: Call[NoParams, LinkRequest]) -> LinkAnswer:
    store, body = call.context.stores.memories, call.body
    if body.owner == body.other:
        raise ApiError("'owner' and 'other' are the same; link two different owners")
    person = await store.link(body.owner, body.other)
    return LinkAnswer(person=person, owners=await store.owners_of(body.owner))


async def unlink_owner(call: Call[OwnerParam, None]) -> LinkAnswer:
    store, owner = call.context.stores.memories, call.params.owner
    if not await store.unlink(owner):
        raise ApiError(f"{owner} is not linked to anyone", 404)
    return LinkAnswer(person=owner, owners=await store.owners_of(owner))


ONE = "/api/memories/{memory_id}"
ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/memories/people",
        list_people,
        PeopleList,
        "Everyone Bruce remembers something about, linked owners together, latest first",
    ),
    Endpoint(
        "GET",
        "/api/memories",
        list_memories,
        MemoryList,
        "A person's memories (with those of the owners linked to them), or everyone's, newest "
        "first",
        params=MemoriesQuery,
    ),
    Endpoint(
        "PUT",
        ONE,
        edit_memory,
        OneMemory,
        "Change a memory's text and/or tags",
        params=MemoryId,
        body=MemoryEdit,
        errors=(404,),
    ),
    Endpoint(
        "DELETE",
        ONE,
        delete_memory,
        OneMemory,
        "Forget a memory for good",
        params=MemoryId,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        "/api/memories/links",
        link_owners,
        LinkAnswer,
        "Make two owners one person: each then sees the other's memories",
        body=LinkRequest,
    ),
    Endpoint(
        "DELETE",
        "/api/memories/links/{owner:path}",
        unlink_owner,
        LinkAnswer,
        "Make an owner a person of its own again",
        params=OwnerParam,
        errors=(404,),
    ),
)

"""`/api/artifacts`: the files the agent saved, newest first, each with its capability link."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

from pydantic import BaseModel, Field

from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.api.params import OptionalId, limit
from bruce_bot.web.api.sessions import Whereabouts, whereabouts
from bruce_bot.web.wire import Time


class ArtifactAnswer(Whereabouts):
    uuid: str
    title: str
    filename: str
    content_type: str
    size_bytes: int
    session_id: int | None
    created_at: Time
    url: str = Field(description="the file's link: works for whoever has it, without signing in")


class ArtifactList(BaseModel):
    artifacts: list[ArtifactAnswer]


class ArtifactsQuery(BaseModel):
    session_id: OptionalId = Field(None, description="only the artifacts of this session")
    limit: int = limit(100, "artifacts")


async def list_artifacts(call: Call[ArtifactsQuery, None]) -> ArtifactList:
    params = call.params
    found = await call.context.stores.artifacts.list_recent(params.limit, params.session_id)
    where = await whereabouts(call.context, (a.session_id for a in found))
    answers = [
        {
            **dataclasses.asdict(a),
            **where.get(a.session_id, {}),
            "url": f"/artifacts/{a.uuid}/{quote(a.filename)}",
        }
        for a in found
    ]
    return ArtifactList.model_validate({"artifacts": answers})


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/artifacts",
        list_artifacts,
        ArtifactList,
        "Artifacts, newest first",
        params=ArtifactsQuery,
    ),
)

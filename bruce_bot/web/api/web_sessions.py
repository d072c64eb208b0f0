"""`/api/web-sessions`: the browsers signed in with `web.auth_token`, and signing one out
(revoking its session: a copied cookie stops working at once). See `auth.py` for the sessions."""

from __future__ import annotations

import structlog
from pydantic import BaseModel, Field

from bruce_bot.storage.web_sessions import WebSessionRecord
from bruce_bot.web.api.endpoint import FROM_RECORD, Call, Endpoint, NoParams
from bruce_bot.web.credentials import client_address
from bruce_bot.web.wire import ApiError, Time

log = structlog.get_logger(__name__)


class WebSessionAnswer(BaseModel):
    model_config = FROM_RECORD

    id: str = Field(validation_alias="public_id", description="what DELETE takes")
    user_agent: str
    client_address: str
    created_at: Time
    last_seen_at: Time
    expires_at: Time
    current: bool = Field(False, description="the browser that asked")


class WebSessionList(BaseModel):
    sign_in: bool = Field(description="false without web.auth_token: then nobody signs in")
    web_sessions: list[WebSessionAnswer]


class Revoked(BaseModel):
    revoked: str


class PublicId(BaseModel):
    public_id: str = Field(
        pattern=r"^[A-Za-z0-9_-]{1,32}$", description="an 'id' from GET /api/web-sessions"
    )


async def list_web_sessions(call: Call[NoParams, None]) -> WebSessionList:
    auth = call.auth
    if not auth.token:
        return WebSessionList(sign_in=False, web_sessions=[])
    current: WebSessionRecord | None = getattr(call.request.state, "web_session", None)
    records = await auth.store.live(auth.fingerprint, auth.clock())
    answers = [
        WebSessionAnswer.model_validate(r).model_copy(
            update={"current": current is not None and r.id == current.id}
        )
        for r in records
    ]
    return WebSessionList(sign_in=True, web_sessions=answers)


async def revoke_web_session(call: Call[PublicId, None]) -> Revoked:
    auth, public_id = call.auth, call.params.public_id
    if not auth.token or not await auth.store.revoke(public_id, auth.fingerprint):
        raise ApiError(
            f"there is no signed-in browser {public_id}; GET /api/web-sessions lists them", 404
        )
    log.info("web_session_revoked", client=client_address(call.request), web_session=public_id)
    return Revoked(revoked=public_id)


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/web-sessions",
        list_web_sessions,
        WebSessionList,
        "The browsers signed in with web.auth_token",
    ),
    Endpoint(
        "DELETE",
        "/api/web-sessions/{public_id}",
        revoke_web_session,
        Revoked,
        "Sign that browser out",
        params=PublicId,
        errors=(404,),
    ),
)

"""`/api/people` and `/api/pairing/*`: who may talk to Bruce on the chat platforms, and the
pairing codes strangers are waiting with (bruce_bot/pairing.py).

People come from config.yml (`allowed_user_ids`: listed, not revocable here) or were approved
in the dashboard or with `bruce pairing`. Approving a code lets its holder in at once and tells
them in their chat; a code works once, and is read in any case, with or without the dash.
"""

from __future__ import annotations

from typing import Literal, cast

import structlog
from pydantic import BaseModel, ConfigDict, Field

from bruce_bot.pairing import (
    PairingError,
    PairingService,
    Source,
    platform_user_id,
    shown,
    who,
)
from bruce_bot.storage.pairing import ApprovedUser, PendingCode
from bruce_bot.web.api.endpoint import Call, Endpoint, NoParams
from bruce_bot.web.context import WebContext
from bruce_bot.web.wire import ApiError, PlatformName, Time

log = structlog.get_logger(__name__)

WHO = (
    "how to show them: the user id and @username first, the name they chose last and marked "
    "as theirs, e.g. '6666 @mallory — name they chose: “Mallory”'"
)


class AllowedPerson(BaseModel):
    channel: str
    user_id: str = Field(description="the platform's user id (a string: Discord's are 64-bit)")
    username: str = Field(description="their @username on the platform, without '@' ('': none)")
    name: str = Field(
        description="the display name they chose when they asked ('' from config): anyone can "
        "call themself anything"
    )
    who: str = Field(description=WHO)
    source: Literal["config", "dashboard", "cli"] = Field(
        description="config: allowed_user_ids in config.yml (only the file removes them)"
    )
    since: Time | None = Field(description="when they were approved (None: from config.yml)")
    revocable: bool


class PendingPairing(BaseModel):
    code: str = Field(description="as the stranger was shown it, e.g. K7QM-X3PA")
    channel: str
    user_id: str
    username: str = Field(description="their @username on the platform, without '@' ('': none)")
    name: str = Field(description="the display name the stranger chose")
    who: str = Field(description=WHO)
    created_at: Time
    expires_at: Time


class AllowedPeople(BaseModel):
    people: list[AllowedPerson]
    pending: list[PendingPairing]
    pairing: list[str] = Field(description="the enabled channels whose strangers get a code")


class CodeBody(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"code": "K7QM-X3PA"}]})

    code: str = Field(min_length=1, max_length=64, description="any case, with or without '-'")


class PairingApproved(BaseModel):
    person: AllowedPerson


class PairingDenied(BaseModel):
    denied: PendingPairing


class PersonRevoked(BaseModel):
    revoked: AllowedPerson


class PersonKey(BaseModel):
    channel: PlatformName = Field(description="the platform: telegram, discord, ...")
    user_id: str = Field(
        min_length=1,
        max_length=255,
        description="their user id on it (GET /api/people): digits, or a Matrix or Slack id",
    )


def _service(context: WebContext) -> PairingService:
    if context.pairing is None:
        raise ApiError("pairing is not available in this process", 503)
    return context.pairing


def _pending(code: PendingCode) -> PendingPairing:
    return PendingPairing(
        code=shown(code.code),
        channel=code.channel,
        user_id=str(code.user_id),
        username=code.username,
        name=code.name,
        who=who(code.user_id, code.username, code.name),
        created_at=code.created_at,
        expires_at=code.expires_at,
    )


def _approved(person: ApprovedUser) -> AllowedPerson:
    return AllowedPerson(
        channel=person.channel,
        user_id=str(person.user_id),
        username=person.username,
        name=person.name,
        who=who(person.user_id, person.username, person.name),
        source=cast(Source, person.approved_by),
        since=person.approved_at,
        revocable=True,
    )


def _refused(exc: PairingError) -> ApiError:
    return ApiError(str(exc), 404 if exc.not_found else 400)


async def list_people(call: Call[NoParams, None]) -> AllowedPeople:
    service = _service(call.context)
    people = [
        AllowedPerson(
            channel=person.channel,
            user_id=str(person.user_id),
            username=person.username,
            name=person.name,
            who=person.label,
            source=person.source,
            since=person.since,
            revocable=person.revocable,
        )
        for person in await service.people()
    ]
    pending = [_pending(code) for code in await service.pending()]
    return AllowedPeople(people=people, pending=pending, pairing=list(service.enabled))


async def approve(call: Call[NoParams, CodeBody]) -> PairingApproved:
    try:
        person = await _service(call.context).approve(call.body.code, by="dashboard")
    except PairingError as exc:
        raise _refused(exc) from None
    return PairingApproved(person=_approved(person))


async def deny(call: Call[NoParams, CodeBody]) -> PairingDenied:
    try:
        code = await _service(call.context).deny(call.body.code)
    except PairingError as exc:
        raise _refused(exc) from None
    return PairingDenied(denied=_pending(code))


async def revoke(call: Call[PersonKey, None]) -> PersonRevoked:
    try:
        user_id = platform_user_id(call.params.user_id)
        person = await _service(call.context).revoke(call.params.channel, user_id)
    except PairingError as exc:
        raise ApiError(str(exc), 404 if exc.not_found else 409) from None
    return PersonRevoked(revoked=_approved(person))


ENDPOINTS = (
    Endpoint(
        "GET",
        "/api/people",
        list_people,
        AllowedPeople,
        "Who may talk on the chat platforms, and the pairing codes waiting",
        errors=(503,),
    ),
    Endpoint(
        "POST",
        "/api/pairing/approve",
        approve,
        PairingApproved,
        "Let the holder of a pairing code in (at once) and tell them",
        body=CodeBody,
        errors=(404, 503),
    ),
    Endpoint(
        "POST",
        "/api/pairing/deny",
        deny,
        PairingDenied,
        "Throw a pairing code away without letting its holder in",
        body=CodeBody,
        errors=(404, 503),
    ),
    Endpoint(
        "DELETE",
        "/api/people/{channel}/{user_id}",
        revoke,
        PersonRevoked,
        "Shut an approved person out again (people from config.yml: edit the file)",
        params=PersonKey,
        errors=(404, 409, 503),
    ),
)

"""`/api/chat/`: the dashboard's chat page. A message posted here goes into the inbox through the
web channel; the page reads the chat back with a long poll (`wait`) and presses the buttons shown
under a message (a reminder's confirm/cancel) through `/api/chat/choices`. A message the database
cannot take right now (a full disk, the server away) is refused with 503 and Retry-After: it was
not stored, and the page keeps the text for sending again."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from bruce_bot.channels.web.channel import WEB_CHANNEL, Upload
from bruce_bot.domain import SessionKey, StorageUnavailableError, Submission
from bruce_bot.faults import transient_reason
from bruce_bot.web.api.endpoint import Call, Endpoint
from bruce_bot.web.api.params import MAX_ID
from bruce_bot.web.wire import ApiError, Time

MAX_WAIT_SECONDS = 30.0
STORAGE_RETRY_AFTER_SECONDS = 5
MAX_FILES = 10
# Base64 makes a file a third larger: room for a 20 MB file and the rest of the body.
UPLOAD_BODY_BYTES = 28_000_000
DEFAULT_CHAT_ID = "dashboard"
ChatId = Annotated[StrictStr, Field(min_length=1, max_length=64)]
CHAT_ID = "which chat of the dashboard"
REFUSALS = {
    "empty": (400, "the message is empty; type something"),
    "stopping": (503, "Bruce is shutting down; try again in a moment"),
}


class ChatTarget(BaseModel):
    chat_id: ChatId = Field(DEFAULT_CHAT_ID, description=CHAT_ID)


class ChatQuery(ChatTarget):
    after: int = Field(0, ge=0, le=MAX_ID, description="only messages with a larger id")
    wait: float = Field(
        0,
        description=f"with no message after 'after' yet, wait up to this many seconds for one "
        f"(at most {MAX_WAIT_SECONDS:g})",
    )


class Choice(BaseModel):
    label: str
    data: str = Field(description="what to post to /api/chat/choices when it is pressed")


class ChatMessage(BaseModel):
    id: int
    role: str
    kind: str
    content: str
    status: str
    created_at: Time
    choices: list[Choice] = Field(description="buttons shown under the message")
    files: list[str] = Field(default_factory=list, description="names of the files it carried")


class ChatMessages(BaseModel):
    chat_id: str
    typing: bool = Field(description="Bruce is working on a reply")
    messages: list[ChatMessage]


class NewFile(BaseModel):
    name: Annotated[StrictStr, Field(min_length=1, max_length=255)]
    mime_type: StrictStr = Field("application/octet-stream", description="e.g. image/jpeg")
    data: StrictStr = Field(description="the file's bytes, base64")


class NewMessage(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "hello"}]})

    text: StrictStr
    chat_id: ChatId | None = Field(None, description=CHAT_ID + "; else the query's chat_id")


class NewUpload(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"text": "what is this?", "files": [{"name": "a.png", "data": "iVBORw0KGgo="}]}
            ]
        }
    )

    text: StrictStr = Field("", description="the words sent with the files (may be empty)")
    chat_id: ChatId | None = Field(None, description=CHAT_ID + "; else the query's chat_id")
    files: list[NewFile] = Field(
        min_length=1,
        max_length=MAX_FILES,
        description="pictures, voice recordings or documents (PDF, text, Markdown, CSV, JSON)",
    )


class Accepted(BaseModel):
    message_id: int | None
    chat_id: str


class Press(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"data": "task-confirm:12"}]})

    data: Annotated[StrictStr, Field(min_length=1, max_length=200)] = Field(
        description="the data of the button pressed"
    )
    chat_id: ChatId | None = Field(None, description=CHAT_ID + "; else the query's chat_id")


class PressReply(BaseModel):
    reply: str
    chat_id: str


async def post_message(call: Call[ChatTarget, NewMessage]) -> Accepted:
    chat_id = call.body.chat_id or call.params.chat_id
    async with _storage_refused():
        submission = await call.context.web_channel.submit(chat_id, call.body.text)
    return _accepted(submission, chat_id)


@contextlib.asynccontextmanager
async def _storage_refused() -> AsyncIterator[None]:
    """A message the database cannot take now is refused with a 503 (the page keeps the text)."""
    try:
        yield
    except StorageUnavailableError as exc:
        raise ApiError(
            f"Bruce cannot save messages right now ({exc.reason}); your message was not "
            "sent. Send it again in a moment.",
            503,
            {"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)},
        ) from None
    except OSError as exc:  # the upload could not be written (a full disk...)
        reason = transient_reason(exc)
        if reason is None:
            raise
        raise ApiError(
            f"Bruce cannot save files right now ({reason}); your message was not sent. "
            "Send it again in a moment.",
            503,
            {"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)},
        ) from None


async def post_upload(call: Call[ChatTarget, NewUpload]) -> Accepted:
    """Files (and words) for Bruce: read in the turn like a Telegram photo or document."""
    chat_id = call.body.chat_id or call.params.chat_id
    files: list[Upload] = []
    for file in call.body.files:
        try:
            data = base64.b64decode(file.data, validate=True)
        except ValueError:
            raise ApiError(f"file {file.name!r}: data must be base64", 400) from None
        files.append(Upload(file.name, file.mime_type, data))
    async with _storage_refused():
        submission = await call.context.web_channel.submit(chat_id, call.body.text, files=files)
    return _accepted(submission, chat_id)


def _accepted(submission: Submission, chat_id: str) -> Accepted:
    if not submission.accepted:
        status, message = REFUSALS.get(submission.reason, (409, submission.reason))
        raise ApiError(message, status)
    return Accepted(message_id=submission.message_id, chat_id=chat_id)


async def get_messages(call: Call[ChatQuery, None]) -> ChatMessages:
    channel, stores, params = call.context.web_channel, call.context.stores, call.params
    chat_id, wait = params.chat_id, min(params.wait, MAX_WAIT_SECONDS)
    version = channel.version(chat_id)  # read first: a reply stored meanwhile is not missed
    session = await stores.sessions.get_or_create(SessionKey(WEB_CHANNEL, chat_id))
    rows = await stores.messages.recent(session.id, params.after)
    if not rows and wait > 0:
        await channel.wait_for_change(chat_id, wait, since=version)
        rows = await stores.messages.recent(session.id, params.after)
    messages: list[dict[str, Any]] = [
        {
            **dataclasses.asdict(r),
            "choices": (r.extra or {}).get("choices", []),
            "files": _file_names(r.extra),
        }
        for r in rows
    ]
    # A reply stored and about to be delivered (a live reply finishing) ends the typing: the
    # next poll would otherwise wait for a change that already happened to say so.
    typing = channel.is_typing(chat_id) and not (rows and rows[-1].role == "assistant")
    return ChatMessages.model_validate({"chat_id": chat_id, "typing": typing, "messages": messages})


def _file_names(extra: dict[str, Any] | None) -> list[str]:
    found = (extra or {}).get("attachments")
    if not isinstance(found, list):
        return []
    return [str(a.get("name") or a.get("kind") or "file") for a in found if isinstance(a, dict)]


async def press(call: Call[ChatTarget, Press]) -> PressReply:
    chat_id = call.body.chat_id or call.params.chat_id
    reply = await call.context.web_channel.choose(chat_id, call.body.data)
    if reply is None:
        raise ApiError("no such button in this chat (it may be out of date)", 404)
    return PressReply(reply=reply, chat_id=chat_id)


MESSAGES = "/api/chat/messages"
ENDPOINTS = (
    Endpoint(
        "POST",
        MESSAGES,
        post_message,
        Accepted,
        "Send a message to Bruce in a dashboard chat",
        params=ChatTarget,
        body=NewMessage,
        status=202,
        errors=(409, 503),
    ),
    Endpoint(
        "POST",
        "/api/chat/uploads",
        post_upload,
        Accepted,
        "Send files (pictures, voice recordings, documents) to Bruce, with optional words",
        params=ChatTarget,
        body=NewUpload,
        status=202,
        errors=(409, 413, 503),
        max_body_bytes=UPLOAD_BODY_BYTES,
    ),
    Endpoint(
        "GET",
        MESSAGES,
        get_messages,
        ChatMessages,
        "The chat's messages after 'after'; waits up to 'wait' seconds for one (long poll)",
        params=ChatQuery,
    ),
    Endpoint(
        "POST",
        "/api/chat/choices",
        press,
        PressReply,
        "Press a button shown under a message (its 'choices')",
        params=ChatTarget,
        body=Press,
        errors=(404,),
    ),
)

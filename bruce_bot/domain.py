"""Plain values that flow between Bruce's parts.

Channel adapters turn platform events into `InboundMessage`s, the agent core speaks to LLM
providers in `ChatMessage`s, `ToolCall`s and `ToolResult`s, and replies leave as
`OutboundMessage`s. Nothing here knows a platform SDK or a database: these are the words the
core uses, so every edge can be swapped without touching the middle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Role = Literal["user", "assistant"]
# Why the model stopped, in the same words for every provider (providers map their own values):
# end_turn (a finished answer), tool_use (it wants tools run), max_tokens (its output was cut by
# the token limit), pause_turn (a long turn paused: send it back to continue), refusal (it
# declined), other (anything else the server said).
StopReason = Literal["end_turn", "tool_use", "max_tokens", "pause_turn", "refusal", "other"]
MessageKind = Literal["chat", "task", "notice", "briefing", "reminder"]
# Where a stored message is. A user's: pending → processing (in a turn) → done, failed, or
# too_long (it did not fit the model even with the history shortened). A reply: pending → sent,
# failed (for good), or undelivered (the outbox tries again later).
MessageStatus = Literal[
    "pending", "processing", "done", "failed", "too_long", "sent", "undelivered"
]
# How the delivery of a reply ended: the reply's final status.
DeliveryStatus = Literal["sent", "failed", "undelivered"]


def utcnow() -> datetime:
    """The current time as an aware UTC datetime (the only clock the core reads directly)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Identifies a conversation: one per (channel, chat id); a group chat is one session."""

    channel: str
    chat_id: str


AttachmentKind = Literal["image", "audio", "document"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message, as the platform names it: fetched and read later, by
    the turn (bruce_bot/media/), through the channel that received it. `ref` is the
    platform's handle (a Telegram file_id, a Discord attachment URL, a web upload's id)."""

    kind: AttachmentKind
    ref: str
    name: str = ""
    mime_type: str = ""
    size: int | None = None  # bytes, when the platform says
    duration: float | None = None  # seconds, for audio
    voice: bool = False  # a voice note (recorded in the chat) rather than an audio file

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ref": self.ref,
            "name": self.name,
            "mime_type": self.mime_type,
            "size": self.size,
            "duration": self.duration,
            "voice": self.voice,
        }


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image shown to the model: already downscaled to the provider's limits."""

    media_type: str  # image/jpeg, image/png
    data: bytes
    name: str = ""


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message from a person (or a scheduled task) on its way into the inbox."""

    channel: str
    chat_id: str
    text: str
    user_id: str = ""
    user_name: str = ""
    platform_message_id: str | None = None
    received_at: datetime = field(default_factory=utcnow)
    kind: MessageKind = "chat"
    # Free-form facts an adapter wants back when it replies (e.g. the message to reply to).
    metadata: dict[str, Any] = field(default_factory=dict)
    # Photos, voice notes and documents sent with the message (stored in its `extra`).
    attachments: tuple[Attachment, ...] = ()

    @property
    def session_key(self) -> SessionKey:
        return SessionKey(self.channel, self.chat_id)


@dataclass(frozen=True, slots=True)
class Submission:
    """What the inbox did with a message: `accepted` means it is durable and will be answered."""

    accepted: bool
    message_id: int | None = None
    reason: str = ""  # "duplicate", "empty", "stopping" when not accepted


class StorageUnavailableError(Exception):
    """A message could not be stored because the database cannot write right now (the disk is
    full, the file is read-only or locked, the server is away: faults.py). Nothing was
    stored: the channel must not acknowledge the message to its platform, and may try again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the database cannot store messages right now: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Choice:
    """A button under a message: a channel that has buttons shows `label`, and a press comes
    back as `data` through `InboxPort.choose`. Channels without buttons show the text only,
    which always says how to answer in words too."""

    label: str
    data: str


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file that goes with a reply: an artifact the turn saved (`artifact` is its uuid). The
    outbox reads it (`data`) and sends it as a piece of its own, after the text."""

    artifact: str
    filename: str
    content_type: str
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A reply (or a reminder) on its way out through a channel adapter."""

    channel: str
    chat_id: str
    text: str
    message_id: int | None = None  # the stored `messages` row this delivers
    kind: MessageKind = "chat"
    metadata: dict[str, Any] = field(default_factory=dict)
    choices: tuple[Choice, ...] = ()  # buttons, shown under the message's last part
    files: tuple[OutboundFile, ...] = ()  # sent after the text by channels that take files
    # Set on the one piece the outbox hands a channel to send a file: its text is empty.
    file: OutboundFile | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked to run. `arguments` is None when the model sent malformed JSON."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned (or why it failed), fed back to the model."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    # The content came from the outside world (a web page, search results): it is wrapped for
    # the model as untrusted data, and what the turn does after reading it needs the user.
    untrusted: bool = False
    # Files the call made that go with the reply (run_code's out/ files, saved as artifacts).
    files: tuple[OutboundFile, ...] = ()
    # What the audit log keeps besides input and output (JSON: run_code's exit code, approval).
    details: str | None = None


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One entry of the conversation as the LLM sees it, provider-neutral.

    A user entry carries text and/or tool results; an assistant entry carries text and/or the
    tool calls it made. Providers translate these into their native shapes.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    # An assistant entry made by a provider that must get its own content back verbatim within
    # the same turn (Anthropic's thinking blocks with their signatures, paused server-tool
    # blocks): when set, the provider sends these blocks instead of rebuilding them from `text`
    # and `tool_calls`. Never shown to the user, never stored, never summarised.
    replay_blocks: tuple[dict[str, Any], ...] = ()
    # Images a user entry shows the model (before its text), when the model can see them.
    images: tuple[ImagePart, ...] = ()


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """The effective system prompt: `stable` layers are cacheable, `volatile` ones change often."""

    stable: tuple[str, ...]
    volatile: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n\n".join(part for part in (*self.stable, *self.volatile) if part)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """One answer from the model: text, tool calls, or both."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    response_id: str = ""  # the provider's id of this response (msg_..., chatcmpl-...), for logs
    replay_blocks: tuple[dict[str, Any], ...] = ()  # see `ChatMessage.replay_blocks`

    @property
    def truncated(self) -> bool:
        """The output was cut by the token limit: text may be unfinished, tool input incomplete."""
        return self.stop_reason == "max_tokens"


@dataclass(frozen=True, slots=True)
class LLMCallRecord:
    """What one LLM call cost and how it ended (stored in `llm_calls`)."""

    purpose: str
    model: str
    usage: Usage = field(default_factory=Usage)
    duration_ms: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One tool run inside the agent loop (stored in `tool_executions`)."""

    turn: int
    call: ToolCall
    result: ToolResult
    duration_ms: float

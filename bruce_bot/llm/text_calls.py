"""Whether an answer's text may be read for tool calls (`llm.text_tool_calls`), per model.

Reading calls out of the text exists for models served without native tool calling. For any
other model it is only a way for quoted markup to act (a page's example call, shown by a model
that explains the page), so it is allowed as narrowly as the setting says:

- `off`: never; the text is always shown as written.
- `on`: whenever the server returned no native tool call in that answer.
- `auto` (the default): as `on`, until the server returns a native tool call for the model; from
  then on, for the rest of the process, that model's text is never read for calls.

The models seen calling natively are kept per server and model name in one process-wide record
(`PROCESS_NATIVE_MODELS`, used by the provider factory), so a provider rebuilt by the live
settings keeps what was learned; nothing is stored on disk. The Anthropic provider never reads
text for calls (its API always returns `tool_use` blocks).
"""

from __future__ import annotations

from typing import Literal

import structlog

log = structlog.get_logger(__name__)

TextToolCallsMode = Literal["auto", "on", "off"]


class NativeToolModels:
    """The (server, model) pairs for which a native tool call has been seen."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def saw(self, base_url: str | None, model: str) -> bool:
        return (base_url or "", model) in self._seen

    def record(self, base_url: str | None, model: str) -> None:
        key = (base_url or "", model)
        if key not in self._seen:
            self._seen.add(key)
            log.info("llm_native_tool_calls_detected", model=model)


PROCESS_NATIVE_MODELS = NativeToolModels()


def reads_text_calls(
    mode: TextToolCallsMode, seen: NativeToolModels, base_url: str | None, model: str
) -> bool:
    """Whether this model's next answer may have its text read for calls (when it carries no
    native call; that check is the reader's)."""
    if mode == "off":
        return False
    if mode == "on":
        return True
    return not seen.saw(base_url, model)

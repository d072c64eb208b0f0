"""`SwitchableLLM` (llm/switchable.py): a call running when the provider is switched finishes on
the old one, which is closed only then; the next call goes to the new one; a call naming the
start-time background model goes to the background model now configured."""

from __future__ import annotations

import asyncio

from bruce_bot.config import LLMConfig
from bruce_bot.domain import ChatMessage, LLMResponse, SystemPrompt
from bruce_bot.llm.base import LLMRequest
from bruce_bot.llm.switchable import SwitchableLLM


class Provider:
    def __init__(self, name: str) -> None:
        self.name = name
        self.models: list[str | None] = []
        self.closed = False
        self.gate: asyncio.Event | None = None

    @property
    def model(self) -> str:
        return self.name

    async def complete(self, request: LLMRequest) -> LLMResponse:
        assert not self.closed, f"{self.name} was called after it was closed"
        self.models.append(request.model)
        if self.gate is not None:
            await self.gate.wait()
        return LLMResponse(text=self.name)

    async def aclose(self) -> None:
        self.closed = True


PROMPT = SystemPrompt(stable=("x",))
ASK = [ChatMessage(role="user", text="hi")]


async def test_a_running_call_finishes_on_the_old_provider_and_the_next_goes_to_the_new() -> None:
    old, new = Provider("old"), Provider("new")
    old.gate = asyncio.Event()
    llm = SwitchableLLM(old, LLMConfig(model="a", background_model="a-small"))
    running = asyncio.create_task(llm.complete(LLMRequest(PROMPT, ASK)))
    await asyncio.sleep(0)
    assert old.models == [None]

    await llm.switch(new, LLMConfig(model="b", background_model="b-small"))
    assert llm.model == "b" and not old.closed  # still answering
    assert (await llm.complete(LLMRequest(PROMPT, ASK, model="a-small"))).text == "new"
    assert new.models == ["b-small"]  # the background model, as configured now
    old.gate.set()
    assert (await running).text == "old"
    assert old.closed

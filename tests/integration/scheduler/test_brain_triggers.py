"""When the analytical brain runs, end to end: a conversation through a real channel, Bruce's
real Anthropic provider against the fake Messages API, and the SQLite file on disk.

The brain runs only after exchanges where it can change something (a session without a name,
a topic shift, every N exchanges), not after scheduled briefings, once for a burst of exchanges,
and it reads what is new since its last run. The fake tells the agent and the brain apart by
model name (tests/integration/agent/test_brain.py's `FakeModels`); each test waits for the brain to
settle (`settled`) before it counts the runs, never for a fixed time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bruce_bot.channels.console.channel import ConsoleChannel
from bruce_bot.config import Config
from bruce_bot.domain import SessionKey
from bruce_bot.scheduler.new_task import NewTask
from bruce_bot.tools.registry import ToolRegistry
from tests.conftest import running_bruce, wait_until
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.integration.agent.test_brain import (
    READY,
    FakeModels,
    agent_requests,
    brain_config,
    brain_runs,
    exchange,
    session_row,
    settled,
)
from tests.integration.support import next_reply, user_texts

LISBON = (
    "Plan a weekend in Lisbon: hotels near the trams and good food.",
    "Lisbon hotels near the trams, the weekend is in May.",
    "Which Lisbon trams reach the food markets this weekend?",
    "Lisbon weekend again: hotels or apartments near the trams?",
    "Lisbon trams at night: are they safe on the weekend?",
    "Best Lisbon food near the hotels for a weekend dinner?",
    "Lisbon weekend budget for hotels, trams and food?",
)
FUNDS = "Something else entirely: explain index fund expense ratios for beginners."
LISBON_TITLE = ("rename_session", {"title": "🧳 Lisbon weekend"})


def rules(tmp_path: Path, fake: FakeAnthropicServer, **brain: Any) -> Config:
    """The brain on, with these `brain` keys (the others at their defaults)."""
    return brain_config(tmp_path, fake, brain={"enabled": True, **brain})


def naming_first(fake: FakeAnthropicServer) -> tuple[FakeModels, ConsoleChannel]:
    """The fake models with the brain's first run (naming the session) planned, and a console."""
    models = FakeModels()
    models.plan(LISBON_TITLE, READY)
    fake.responder = models
    return models, ConsoleChannel()


def briefing_of(run: dict[str, Any]) -> str:
    return user_texts(run)[0]


def part(briefing: str, tag: str) -> str:
    """The text between `<tag>` and `</tag>` in a brain run's briefing ("" when absent)."""
    if f"<{tag}>" not in briefing:
        return ""
    return briefing.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


async def test_an_unnamed_session_is_named_after_its_first_exchange_and_then_left_alone(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    _models, console = naming_first(anthropic_fake)
    config = brain_config(tmp_path, anthropic_fake)  # the default rules
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        await exchange(console, LISBON[0])
        await wait_until(lambda: session_row(tmp_path)["title"] == "🧳 Lisbon weekend")
        await settled(bruce)
        for text in LISBON[1:4]:  # more of the same topic: nothing to change
            await exchange(console, text)
            await settled(bruce)

    (run,) = brain_runs(anthropic_fake)
    assert "Title: (none yet)" in briefing_of(run)
    assert f"User: {LISBON[0]}" in part(briefing_of(run), "new_conversation")
    assert len(agent_requests(anthropic_fake)) == 4


async def test_a_topic_shift_runs_the_brain_which_renames_the_session(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models, console = naming_first(anthropic_fake)
    config = rules(tmp_path, anthropic_fake, every_exchanges=100)
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        for text in LISBON[:4]:
            await exchange(console, text)
            await settled(bruce)
        assert len(brain_runs(anthropic_fake)) == 1  # the naming run only
        models.plan(("rename_session", {"title": "📈 Index funds"}), READY)
        await exchange(console, FUNDS)
        await wait_until(lambda: session_row(tmp_path)["title"] == "📈 Index funds")
        await settled(bruce)

    _, shifted = brain_runs(anthropic_fake)
    briefing = briefing_of(shifted)
    assert "Title: 🧳 Lisbon weekend" in briefing
    new = part(briefing, "new_conversation")
    assert new.rstrip().endswith(f"User: {FUNDS}\nBruce: ack: {FUNDS}")
    assert all(f"User: {text}" in new for text in LISBON[1:4])  # unread until now
    # What the first run already read comes only as context (brain.lookback_messages = 2).
    assert part(briefing, "earlier_conversation").strip() == (
        f"User: {LISBON[0]}\nBruce: ack: {LISBON[0]}"
    )


async def test_a_quiet_same_topic_stretch_runs_the_brain_only_every_n_exchanges(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    _models, console = naming_first(anthropic_fake)
    config = rules(tmp_path, anthropic_fake, every_exchanges=3)
    runs_after: list[int] = []
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        for text in LISBON:
            await exchange(console, text)
            await settled(bruce)
            runs_after.append(len(brain_runs(anthropic_fake)))

    # Named after the first exchange, then every third one.
    assert runs_after == [1, 1, 1, 2, 2, 2, 3]
    third = briefing_of(brain_runs(anthropic_fake)[2])
    # It reads the three exchanges since the previous run, and that run's last one as context.
    new = part(third, "new_conversation")
    assert [line for line in new.splitlines() if line.startswith("User: ")] == [
        f"User: {text}" for text in LISBON[4:7]
    ]
    assert part(third, "earlier_conversation").strip() == (
        f"User: {LISBON[3]}\nBruce: ack: {LISBON[3]}"
    )
    assert all(text not in third for text in LISBON[:3])


async def test_a_scheduled_briefing_neither_wakes_the_brain_nor_counts_as_an_exchange(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    _models, console = naming_first(anthropic_fake)
    config = rules(tmp_path, anthropic_fake, every_exchanges=2)
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        assert bruce.stores is not None and bruce.tasks is not None
        await exchange(console, LISBON[0])
        await settled(bruce)
        session = await bruce.stores.sessions.get_or_create(SessionKey("console", "local"))
        await bruce.tasks.planner.create(
            NewTask(
                session_id=session.id,
                channel="console",
                chat_id="local",
                title="Digest",
                mode="agent",
                content="Sum up the Lisbon news",
                run_at="+1s",
            )
        )
        assert (await next_reply(console.replies)).startswith("📋 Digest")
        await settled(bruce)
        assert len(brain_runs(anthropic_fake)) == 1  # the briefing did not wake it...
        await exchange(console, LISBON[1])
        await settled(bruce)
        assert len(brain_runs(anthropic_fake)) == 1  # ...nor count as the second exchange
        await exchange(console, LISBON[2])
        await settled(bruce)

    assert len(agent_requests(anthropic_fake)) == 4  # three exchanges and the briefing
    _, second = brain_runs(anthropic_fake)
    assert "Scheduled task: Sum up the Lisbon news" in part(briefing_of(second), "new_conversation")


async def test_a_burst_of_exchanges_is_read_by_one_brain_run(
    tmp_path: Path, anthropic_fake: FakeAnthropicServer
) -> None:
    models = FakeModels()
    anthropic_fake.responder = models
    console = ConsoleChannel()
    # A window far longer than the burst: the run waits for it, or for `settled` to hurry it.
    config = rules(tmp_path, anthropic_fake, coalesce_seconds=600)
    async with running_bruce(config, tools=ToolRegistry([]), channels=[console]) as bruce:
        for text in ("one", "two", "three"):  # unnamed: each of the first two asks for a run
            await exchange(console, text)
        assert brain_runs(anthropic_fake) == []  # still waiting for the burst to end
        await settled(bruce)

    (run,) = brain_runs(anthropic_fake)
    new = part(briefing_of(run), "new_conversation")
    assert all(f"User: {text}\nBruce: ack: {text}" in new for text in ("one", "two", "three"))

"""`channels.slack` (config/slack.py) and reading Slack's events (channels/slack/events.py):
bad values name the key and the fix; what is for Bruce, and its plain text."""

from __future__ import annotations

from typing import Any

import pytest

from bruce_bot.channels.slack.address import SlackAddress, ts_number
from bruce_bot.channels.slack.events import Me, plain_text, read
from bruce_bot.config import ConfigError, validate

BOT = "xoxb-1111111111-2222222222-abcdefghijkl"
APP = "xapp-1-A0APP-3333333333-abcdefghijkl"
ME = Me("U0BRUCE01", "B0BRUCE01")


def config(web: bool = True, **section: Any) -> Any:
    raw = {"channels": {"slack": section}, "web": {"enabled": web}}
    return validate(raw)


def problems(**section: Any) -> str:
    with pytest.raises(ConfigError) as raised:
        config(**section)
    return str(raised.value)


def test_a_complete_socket_mode_section_is_taken() -> None:
    slack = config(enabled=True, bot_token=BOT, app_token=APP, allowed_user_ids=["U012ABCDEF"])
    section = slack.channels.section("slack")
    assert section.token == BOT and section.mode == "socket"
    assert list(section.allowed_user_ids) == ["U012ABCDEF"]
    assert BOT in slack.secrets() and APP in slack.secrets()


def test_tokens_swapped_are_named_by_their_key_without_showing_them() -> None:
    said = problems(enabled=True, bot_token=APP, app_token=BOT)
    assert "channels.slack: bot_token is a xapp-... token" in said
    assert "app_token is a xoxb-... token" in said
    assert "abcdefghijkl" not in said


def test_socket_mode_needs_the_app_token_and_events_mode_the_signing_secret() -> None:
    assert "mode socket needs app_token" in problems(enabled=True, bot_token=BOT)
    said = problems(enabled=True, bot_token=BOT, mode="events")
    assert "mode events needs signing_secret" in said and "Signing Secret" in said


def test_events_mode_needs_the_web_server() -> None:
    with pytest.raises(ConfigError) as raised:
        config(web=False, enabled=True, bot_token=BOT, mode="events", signing_secret="a" * 32)
    assert "channels.slack.mode" in str(raised.value) and "web.enabled" in str(raised.value)


def test_a_user_id_that_is_not_a_slack_member_id_is_refused() -> None:
    assert "'alice' is not a Slack user id like U012ABCDEF" in problems(allowed_user_ids=["alice"])


def test_a_chat_id_is_the_channel_and_the_thread() -> None:
    address = SlackAddress.parse("C0GENERAL/1700000001.000001")
    assert address == SlackAddress("C0GENERAL", "1700000001.000001")
    assert str(address) == "C0GENERAL/1700000001.000001"
    assert SlackAddress.parse("D0DM") == SlackAddress("D0DM")
    with pytest.raises(ValueError):
        SlackAddress.parse("C0GENERAL/not-a-ts")
    assert ts_number("1700000001.000001") == 1700000001000001


def event(**fields: Any) -> dict[str, Any]:
    base = {"type": "message", "user": "U0OWNER01", "ts": "1.000002", "channel": "D0DM"}
    return {**base, "channel_type": "im", "text": "hi", **fields}


def test_a_dm_is_read_and_answered_at_its_top_level() -> None:
    incoming = read(event(), ME)
    assert incoming is not None and incoming.direct
    assert incoming.address == SlackAddress("D0DM")


def test_a_top_level_mention_starts_a_thread_on_itself() -> None:
    mention = event(type="app_mention", channel="C0GEN", text=f"<@{ME.user_id}> hello")
    mention.pop("channel_type")
    incoming = read(mention, ME)
    assert incoming is not None and incoming.text == "hello"
    assert incoming.address == SlackAddress("C0GEN", "1.000002")


def test_in_a_channel_only_thread_messages_without_the_mention_are_candidates() -> None:
    top = event(channel="C0GEN", channel_type="channel")
    assert read(top, ME) is None
    mentioned = event(
        channel="C0GEN", channel_type="channel", thread_ts="1.000001", text=f"<@{ME.user_id}> x"
    )
    assert read(mentioned, ME) is None  # the app_mention brings it
    follow = read(event(channel="C0GEN", channel_type="channel", thread_ts="1.000001"), ME)
    assert follow is not None and follow.needs_thread
    assert follow.address == SlackAddress("C0GEN", "1.000001")


@pytest.mark.parametrize(
    "fields",
    [
        {"user": ME.user_id},
        {"bot_id": "B0OTHER"},
        {"subtype": "bot_message"},
        {"subtype": "message_changed"},
        {"subtype": "message_deleted"},
        {"subtype": "channel_join"},
        {"user": None},
    ],
)
def test_bots_bruce_itself_edits_and_notices_are_not_read(fields: dict[str, Any]) -> None:
    assert read(event(**fields), ME) is None


def test_files_are_read_with_their_message() -> None:
    incoming = read(event(subtype="file_share", files=[{"url_private": "https://x/f"}]), ME)
    assert incoming is not None and len(incoming.files) == 1


def test_slacks_markup_becomes_plain_text() -> None:
    text = (
        f"<@{ME.user_id}> see <https://example.org|the site> and <https://a.b> "
        "&lt;tag&gt; &amp; <@U0OTHER|ann> in <#C0GEN|general> <!here>"
    )
    assert plain_text(text, ME) == (
        "see the site (https://example.org) and https://a.b <tag> & @ann in #general @here"
    )

"""The Matrix channel's pure parts: which events address Bruce and their text, the HTML of a
reply, the config section, and the sync-state file (the channel itself is tested against a
real Synapse: tests/integration/channels/test_matrix.py)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bruce_bot.channels.matrix.events import Me, is_message, mentions, replied_to, text_of
from bruce_bot.channels.matrix.formatting import message_content, to_html
from bruce_bot.channels.matrix.sync_state import SyncState, SyncStateFile
from bruce_bot.config import ChannelsConfig
from bruce_bot.config.matrix import MatrixConfig

ME = Me("@bruce:example.org", "Bruce")


def message(body: Any, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": "$e1",
        "sender": "@alice:example.org",
        "content": {"msgtype": "m.text", "body": body, **content},
    }


def test_a_mention_by_id_name_or_m_mentions_addresses_bruce() -> None:
    assert mentions(message("@bruce:example.org: hi"), ME)
    assert mentions(message("hey bruce, what's up"), ME)
    assert mentions(message("hi", **{"m.mentions": {"user_ids": [ME.user_id]}}), ME)
    assert not mentions(message("hi all"), ME)
    assert not mentions(message(None), ME)  # a body that is not text reads as nothing


def test_the_leading_mention_and_a_reply_fallback_are_taken_off() -> None:
    assert text_of(message("Bruce: what's the plan?"), ME) == "what's the plan?"
    reply = message(
        "> <@bruce:example.org> earlier words\n> more\n\nyes please",
        **{"m.relates_to": {"m.in_reply_to": {"event_id": "$bruce"}}},
    )
    assert replied_to(reply) == "$bruce"
    assert text_of(reply, ME) == "yes please"


@pytest.mark.parametrize(
    "event",
    [
        {"type": "m.room.member", "state_key": "@a:x", "event_id": "$s", "content": {}},
        {"type": "m.room.redaction", "event_id": "$r", "redacts": "$e1", "content": {}},
        {"type": "m.room.message", "event_id": "$x", "content": {}},  # redacted: no msgtype
        {"type": "m.room.message", "state_key": "", "event_id": "$y", "content": {"msgtype": 1}},
        message("* fixed", **{"m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}}),
        {"type": "m.room.message", "content": "not a dict"},
    ],
)
def test_what_is_not_a_message_is_not_read(event: dict[str, Any]) -> None:
    assert not is_message(event)


def test_a_reply_is_html_with_a_plain_body_and_pings_nobody() -> None:
    content = message_content("**bold** and `code`\nnext line")
    assert content["body"] == "**bold** and `code`\nnext line"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<b>bold</b> and <code>code</code><br>next line"
    assert content["m.mentions"] == {}
    assert "<br>" not in to_html("```\na\nb\n```")  # newlines kept inside <pre>
    assert "&lt;script&gt;" in to_html("<script>alert(1)</script>")


def test_the_section_checks_ids_and_what_an_enabled_channel_needs() -> None:
    section = MatrixConfig(
        enabled=True,
        homeserver="https://matrix.example.org/",
        user_id="@bruce:example.org",
        password="pw",
        allowed_user_ids=["@alice:example.org"],
    )
    assert section.homeserver == "https://matrix.example.org"
    assert section.token == "pw"  # what logs in: the channel is not "waiting for a token"
    with pytest.raises(ValidationError, match="not a Matrix user id"):
        MatrixConfig(allowed_user_ids=["alice"])
    with pytest.raises(ValidationError, match="needs homeserver, password"):
        MatrixConfig(enabled=True, user_id="@bruce:example.org")
    assert MatrixConfig().pairing is True  # strangers get a code, as on the other platforms


def test_a_token_saved_in_the_dashboard_is_an_access_token() -> None:
    channels = ChannelsConfig.model_validate(
        {"matrix": {"user_id": "@bruce:example.org", "password": "pw"}}
    )
    section = channels.with_token("matrix", "syt_saved").section("matrix")
    assert isinstance(section, MatrixConfig)
    assert (section.access_token, section.password, section.token) == (
        "syt_saved",
        "pw",
        "syt_saved",
    )


def test_the_sync_state_is_a_private_file_of_its_user(tmp_path: Path) -> None:
    path = tmp_path / "matrix" / "sync.json"
    state = SyncState("@bruce:example.org", "DEV", "s72_1", "token")
    SyncStateFile(path).save(state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SyncStateFile(path).load("@bruce:example.org") == state
    assert SyncStateFile(path).load("@other:example.org") is None  # another account: fresh
    path.write_text("{not json")
    assert SyncStateFile(path).load("@bruce:example.org") is None

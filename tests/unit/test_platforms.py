"""The login fields of each platform (`PlatformSpec.login`) against its config section: every
field is a key of the section, a secret field is one the section marks secret (so the log
scrubber and the masking agree with the forms), and the saved login parses back as it was
dumped. Matrix enabled with no login at all waits for the dashboard; with part of it config.yml
says what is missing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bruce_bot import platforms
from bruce_bot.config import ChannelsConfig
from bruce_bot.config.matrix import MatrixConfig
from bruce_bot.config.schema import Secret
from bruce_bot.config.slack import SlackConfig
from bruce_bot.settings.tokens import login_dumper, login_parser, login_setting


@pytest.mark.parametrize("spec", platforms.platforms(), ids=lambda spec: spec.name)
def test_each_login_field_is_a_key_of_the_section_and_secret_as_it_marks(
    spec: platforms.PlatformSpec,
) -> None:
    fields = spec.section_model().model_fields
    for field in spec.login:
        assert field.key in fields, f"{spec.name}: no key {field.key}"
        marked = any(isinstance(item, Secret) for item in fields[field.key].metadata)
        assert marked == field.secret, f"{spec.name}.{field.key}"


def test_a_one_token_login_is_kept_as_the_token_and_a_longer_one_as_an_object() -> None:
    assert login_setting("telegram") == "channels.telegram.token"
    assert login_dumper("telegram")({"token": "1:abc"}) == "1:abc"
    assert login_parser("telegram")("1:abc") == {"token": "1:abc"}
    assert login_setting("matrix") == "channels.matrix.login"
    login = {"homeserver": "https://m.example.org", "user_id": "@b:example.org", "password": "p"}
    stored = login_dumper("matrix")(login_parser("matrix")(login))
    assert stored == {**login, "access_token": ""}
    with pytest.raises(ValueError, match="not a login of homeserver"):
        login_parser("matrix")({"token": "x"})
    with pytest.raises(ValueError, match="an empty token"):
        login_parser("telegram")("")


def test_matrix_enabled_without_a_login_waits_and_a_part_of_one_is_refused() -> None:
    waiting = MatrixConfig(enabled=True)
    assert waiting.token == ""
    with pytest.raises(ValidationError, match=r"needs user_id, password \(or access_token\)"):
        MatrixConfig(enabled=True, homeserver="https://m.example.org")


def test_a_login_over_the_section_is_checked_as_config_yml_is() -> None:
    channels = ChannelsConfig.model_validate({"matrix": {"enabled": True}})
    good = {"homeserver": "https://m.example.org/", "user_id": "@b:example.org", "password": "p"}
    section = channels.with_login("matrix", good).section("matrix")
    assert isinstance(section, MatrixConfig)
    assert (section.homeserver, section.token) == ("https://m.example.org", "p")
    with pytest.raises(ValueError, match=r"channels.matrix: user_id: 'b' is not a Matrix user id"):
        channels.with_login("matrix", {**good, "user_id": "b"})


def test_slack_enabled_without_tokens_waits_and_a_bot_token_alone_is_refused() -> None:
    waiting = SlackConfig(enabled=True)
    assert waiting.token == ""
    assert login_setting("slack") == "channels.slack.login"
    with pytest.raises(ValidationError, match="mode socket needs app_token"):
        SlackConfig(enabled=True, bot_token="xoxb-1234567890-abcdef")
    with pytest.raises(ValidationError, match="bot_token is too short"):
        SlackConfig(bot_token="xoxb-12")
